"""The run-dir store that every eval executor shares (bench/eval.py in process, bench/ray_eval.py on Ray,
integrations/tau2/run.py): claiming a dir for a run, resuming from its trajectories.jsonl, and writing its metrics.

Layout of an output dir:
- run.json: what was run (env, split, policy spec, seed and the orchestrator settings); a later run
  into the same dir must match it, and then resumes;
- trajectories.jsonl: one scored trajectory per line, appended and flushed as each episode ends, so
  a killed run keeps every finished episode and a rerun skips them;
- metrics.json: `metrics.summarize` of the policy over the (limited) task list, in task order; for a
  router sweep, one entry per threshold under "sweep" (report draws them as a curve);
- decisions.csv: one row per task (task_id, preference, label, model, correct, cost_usd, latency_s),
  see bench/decisions.py; a sweep writes decisions-router-<threshold>.csv per threshold.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.bench.decisions import first_saved, write_eval_decisions
from toolorchestra.bench.metrics import summarize
from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.capabilities import LabeledModels
from toolorchestra.errors import UserError
from toolorchestra.files import drop_torn_tail, json_type, read_json_object, read_lines

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from toolorchestra.bench.policies import Policy

TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.json"
MANIFEST = "run.json"


def claim_dir(out: Path, manifest: dict[str, Any], outputs: Sequence[str] = (TRAJECTORIES,)) -> None:
    """Make `out` this run's dir, or check that it already is (then the run resumes where it stopped).
    `manifest` says what the run is; `outputs` are the files whose presence without a manifest means the dir
    holds some other run's results."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        # a torn or edited manifest is named as such, not reported as "a different run"
        existing = read_json_object(manifest_path, f"the manifest of the run in --out {out} ({', '.join(manifest)})")
        if existing != manifest:
            raise UserError(
                f"--out {out}: holds a different run ({manifest_path}: {existing}); "
                f"this run is {manifest}. Use another --out, or delete the dir to start over."
            )
        return
    present = [name for name in outputs if (out / name).exists()]
    if present:
        raise UserError(f"--out {out}: has {', '.join(present)} but no {MANIFEST}; use an empty dir")
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")


def finished(path: Path) -> set[tuple[str, str]]:
    """Every (policy, task id) saved in `path`, after cutting a line a kill tore (so appends start clean)."""
    drop_torn_tail(path)
    if not path.exists():
        return set()
    return {(trajectory.policy, trajectory.task_id) for trajectory in read_saved_trajectories(path)}


def read_saved_trajectories(path: Path) -> list[Trajectory]:
    """The trajectories a run saved in `path`, checked before a resume appends to it.

    A line that is not JSON is a write torn by a kill: it is skipped with a warning and its episode is run again
    (as `read_trajectories` skips it when the metrics are collected). Any other bad line (not UTF-8, not a JSON
    object, not a trajectory, longer than the line limit) means the file is not one this runner wrote: the run is
    refused with one message naming the file, the line and the field, and nothing in the file is changed."""
    where = f"{path} (resuming --out {path.parent})"
    trajectories = []
    for number, raw in read_lines(path):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(
                f"{where}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                f"{exc.start + 1}); expected a saved trajectory (one JSON object). {_LEAVE_IT}"
            ) from None
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            log.warning(
                "%s:%d: skipped, not a complete JSON line (%s); its episode runs again",
                path,
                number,
                exc.__class__.__name__,
            )
            continue
        if not isinstance(record, dict):
            raise UserError(
                f"{where}:{number}: expected a JSON object (a saved trajectory), got {json_type(record)}. {_LEAVE_IT}"
            )
        for derived in ("cost_usd", "prompt_tokens", "completion_tokens"):
            record.pop(derived, None)
        try:
            trajectories.append(Trajectory.model_validate(record))
        except (pydantic.ValidationError, RecursionError) as exc:
            raise UserError(f"{where}:{number}: not a saved trajectory: {_first_problem(exc)}. {_LEAVE_IT}") from None
    return trajectories


_LEAVE_IT = "The file was left as it is: move it (or that line) away to resume, or use another --out"


def _first_problem(exc: Exception) -> str:
    if not isinstance(exc, pydantic.ValidationError):
        return "nested too deeply to read"
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    got = "" if error["type"] == "missing" else f", got {type(error.get('input')).__name__}"
    return f"field '{field}': {error['msg']}{got}"


def collect_metrics(
    path: Path, policies: Sequence[Policy], tasks: Sequence[Task], header: dict[str, Any]
) -> dict[str, Any]:
    """Metrics per policy over `tasks` in task order, from the first saved trajectory of each."""
    saved = first_saved(path)
    entries = []
    for policy in policies:
        trajectories = [saved[(policy.name, task.id)] for task in tasks if (policy.name, task.id) in saved]
        entry: dict[str, Any] = {"policy": policy.name, **summarize(trajectories)}
        threshold = getattr(policy, "threshold", None)
        if threshold is not None:
            entry["threshold"] = threshold
        entries.append(entry)
    if len(entries) == 1:
        return {**header, **entries[0], "policy": entries[0]["policy"], "spec": header.get("policy")}
    return {**header, "kind": "sweep", "spec": header.get("policy"), "sweep": entries}


def add_hold_out_share(metrics: dict[str, Any], env: Env, names: Sequence[str]) -> None:
    """For --hold-out-models: how many calls and final answers went to the held-out models (per sweep entry)."""
    by_label = {env.label(model): model for model in env.models()} if isinstance(env, LabeledModels) else {}
    held = {by_label.get(name, name) for name in names}
    for entry in metrics.get("sweep") or [metrics]:
        entry["hold_out"] = {
            "models": sorted(held),
            "calls": sum(count for model, count in entry.get("calls_per_model", {}).items() if model in held),
            "answered": sum(count for model, count in entry.get("answered_by", {}).items() if model in held),
        }


def write_results(
    out: Path, env: Env | None, policies: Sequence[Policy], tasks: Sequence[Task], header: dict[str, Any]
) -> dict[str, Any]:
    """metrics.json and decisions.csv of the dir from its saved trajectories; the metrics."""
    metrics = collect_metrics(out / TRAJECTORIES, policies, tasks, header)
    if header.get("hold_out_models") and env is not None:
        add_hold_out_share(metrics, env, header["hold_out_models"])
    (out / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    write_eval_decisions(out, [policy.name for policy in policies], [task.id for task in tasks], header)
    return metrics


__all__ = [
    "MANIFEST",
    "METRICS",
    "TRAJECTORIES",
    "add_hold_out_share",
    "claim_dir",
    "collect_metrics",
    "finished",
    "write_results",
]
