"""Loading a tau2 results file (the leaderboard's trajectory format) into tau2's own `Results`.

The leaderboard publishes, per domain, the JSON that tau2 writes with `Results.save`: `timestamp`, `info`
(`Info`: run settings, `user_info`, `agent_info`, `environment_info.domain_name`), `tasks` (the `Task`s run,
as the submitter's tau2 version had them) and `simulations` (`SimulationRun`: `task_id`, `trial`,
`termination_reason`, the full `messages` and the `reward_info` the submitter's evaluator recorded).
Every failure to read one becomes a UserError of one line naming the file and what was expected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from toolorchestra.errors import UserError
from toolorchestra.integrations.tau2.runtime import DOMAINS, require_tau2

if TYPE_CHECKING:
    from tau2.data_model.simulation import Results

EXPECTED = (
    "a tau2 results JSON (an object with info, tasks and simulations, as tau2's Results.save writes "
    "and the tau2-bench leaderboard publishes)"
)


def load_results(path: Path | str) -> Results:
    """Read and validate `path` with tau2's `Results` model."""
    path = Path(path)
    data = _parse_json(path, _read_text(path))  # before importing tau2 (seconds): a wrong path fails fast
    require_tau2()
    from tau2.data_model.simulation import Results

    try:
        return Results.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path}: not {EXPECTED}: {_first_problem(exc)}") from None


def _read_text(path: Path) -> str:
    if not path.exists():
        raise UserError(f"{path}: file not found (expected {EXPECTED})")
    if not path.is_file():
        raise UserError(f"{path}: not a file (expected {EXPECTED})")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot be read ({exc}); expected {EXPECTED}") from None


def _parse_json(path: Path, text: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}); expected {EXPECTED}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level is a JSON {type(data).__name__}; expected {EXPECTED}")
    return data


def _first_problem(error: ValidationError) -> str:
    """The first validation problem as `field.path: message`, and how many more there are.

    A message's role picks one of several models, so one bad message can yield many errors: one is enough
    to point at the place."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def results_domain(results: Results, path: Path | str, override: str | None = None) -> str:
    """The domain to score against: `override` (the CLI's --domain) or the file's environment_info."""
    domain = override or results.info.environment_info.domain_name
    if domain not in DOMAINS:
        source = "--domain" if override else f"{path}: info.environment_info.domain_name"
        raise UserError(
            f"{source} {domain!r}: not a tau2 domain this command scores; expected one of {', '.join(DOMAINS)}"
        )
    return domain


def is_solo_mode(results: Results) -> bool:
    """Whether the run was tau2's solo mode (agent alone, no user simulator).

    Solo mode changes which tools the evaluator's replayed environment allows, so it must match the run."""
    agent = results.info.agent_info.implementation
    user = results.info.user_info.implementation
    return agent == "llm_agent_solo" and user == "dummy_user"
