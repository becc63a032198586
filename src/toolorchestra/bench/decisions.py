"""Per-task decisions of an eval run: `decisions.csv`, one row per task and preference.

Columns, exactly: `task_id, preference, label, model, correct, cost_usd, latency_s`.

- `task_id`: the env's task id (RouterBench `<sample_id>#<csv row key>`, FRAMES the question id);
- `preference`: the run's `--prefer` as given (run.json `prefer`, e.g. `accuracy`, `cost`, `tool:python`);
  an orchestrator run without `--prefer` is `default` (it ran under the default preference); a baseline
  takes no preference and is `none`;
- `label`: the label the final `answer` call named (`answer(model=LABEL)`, e.g. `gpt-4`); empty when the
  final answer was given as text (the orchestrator answered itself, or a cascade passed an expert's
  reply on) or there was no answer;
- `model`: the model that wrote the final answer (`Trajectory.answered_by`, e.g. `gpt-4-1106-preview`);
  empty when nobody but the policy itself answered;
- `correct`: 1 or 0; `cost_usd`: dollars of the whole episode (every call, the orchestrator's included);
  `latency_s`: the episode's latency. Floats are written with `repr`, so they read back exactly.

Rows follow the task order of the run (the order metrics.json is computed in), from the first saved
trajectory of each task, so the file sums to exactly what metrics.json reports.

A router sweep (`--policy router`, one policy per threshold) writes one file per threshold,
`decisions-router-0.3.csv` (`decisions-<policy name with ':' and '/' as '-'>.csv`), same columns;
`toolorchestra export-results` turns each threshold into its own policy dir.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from toolorchestra.agent.trajectory import Step, Trajectory, read_trajectories
from toolorchestra.errors import UserError

DECISIONS = "decisions.csv"
COLUMNS = ("task_id", "preference", "label", "model", "correct", "cost_usd", "latency_s")
NO_PREFERENCE = "none"  # baselines: they take no preference
DEFAULT_PREFERENCE = "default"  # an orchestrator run without --prefer


def safe_name(policy: str) -> str:
    """A policy name as a file or dir name: ':' and '/' written as '-'."""
    return policy.replace(":", "-").replace("/", "-")


def preference_name(policy: str, prefer: str | None) -> str:
    """The `preference` cell of a run: its --prefer, else `default` (orchestrator) or `none` (baseline)."""
    if prefer:
        return str(prefer)
    return DEFAULT_PREFERENCE if policy.startswith("orchestrator:") else NO_PREFERENCE


def decisions_file(policy: str, sweep: bool) -> str:
    """File name of a policy's decisions in an eval dir: decisions.csv, or per threshold for a sweep."""
    return f"decisions-{safe_name(policy)}.csv" if sweep else DECISIONS


def final_answer_step(trajectory: Trajectory) -> Step | None:
    """The tool call that gave the final answer: the first successful answer call, preferring one served
    by `answered_by`."""
    if trajectory.final_answer is None:
        return None
    answers = [
        step
        for step in trajectory.steps
        if step.kind == "tool" and step.error is None and step.name.split("-")[0] == "answer"
    ]
    if trajectory.answered_by:
        served = [step for step in answers if step.model == trajectory.answered_by]
        if served:
            return served[0]
    return answers[0] if answers else None


def decision(trajectory: Trajectory, preference: str) -> dict[str, str]:
    """One row of decisions.csv."""
    step = final_answer_step(trajectory)
    label = ""
    if step is not None and trajectory.answered_by:
        label = step.label or str((step.arguments or {}).get("model") or "")
    return {
        "task_id": trajectory.task_id,
        "preference": preference,
        "label": label,
        "model": trajectory.answered_by or "",
        "correct": "1" if trajectory.correct else "0",
        "cost_usd": repr(float(trajectory.cost_usd)),
        "latency_s": repr(float(trajectory.latency_s)),
    }


def write_decisions(path: Path, rows: Iterable[dict[str, str]]) -> Path:
    """Write rows (atomically: a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row[column] for column in COLUMNS})
    partial.replace(path)
    return path


def read_decisions(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            found = ", ".join(reader.fieldnames or [])
            raise UserError(f"{path}: expected columns {', '.join(COLUMNS)}; found {found}")
        return list(reader)


def first_saved(path: Path) -> dict[tuple[str, str], Trajectory]:
    """The first saved trajectory of each (policy, task id) in a trajectories.jsonl (none when it is missing)."""
    saved: dict[tuple[str, str], Trajectory] = {}
    if path.exists():
        for trajectory in read_trajectories(path):
            saved.setdefault((trajectory.policy, trajectory.task_id), trajectory)
    return saved


def write_eval_decisions(
    out: Path, policies: Sequence[str], task_ids: Sequence[str], header: dict[str, Any] | None = None
) -> list[Path]:
    """decisions.csv of an eval dir (one file per threshold for a sweep), over `task_ids` in order.

    The preference comes from `header["prefer"]` (the run's manifest), else from out/run.json."""
    header = header if header and "policy" in header else _manifest(out)
    saved = first_saved(out / "trajectories.jsonl")
    sweep = len(policies) > 1
    return [
        _write(out, policy, [t for t in task_ids if (policy, t) in saved], header, saved, sweep) for policy in policies
    ]


def decisions_from_dir(eval_dir: Path) -> list[Path]:
    """Rebuild the decisions of an eval dir written before decisions.csv existed, from its
    trajectories.jsonl, run.json and metrics.json (which names the policies and how many tasks each
    counted). Tasks come in the order they were first saved; a dir whose trajectories hold another
    number of tasks than its metrics counted (a rerun with a smaller --limit) is refused: rerun the
    same `toolorchestra eval` into it instead (it resumes, redoes nothing, writes decisions.csv)."""
    metrics_path = eval_dir / "metrics.json"
    if not metrics_path.exists() or not (eval_dir / "trajectories.jsonl").exists():
        raise UserError(f"{eval_dir}: needs metrics.json and trajectories.jsonl to rebuild {DECISIONS}")
    from toolorchestra.bench.metrics_file import read_metrics

    metrics = read_metrics(metrics_path)
    sweep = metrics.get("kind") == "sweep"
    entries = metrics["sweep"] if sweep else [metrics]
    header = {**metrics, **_manifest(eval_dir)}
    saved = first_saved(eval_dir / "trajectories.jsonl")
    written = []
    for entry in entries:
        policy = str(entry["policy"])
        task_ids = [task_id for (name, task_id) in saved if name == policy]
        if len(task_ids) != entry["n"]:
            raise UserError(
                f"{eval_dir}: trajectories.jsonl holds {len(task_ids)} tasks of {policy}, metrics.json "
                f"counts {entry['n']}; rerun the same `toolorchestra eval` into it to write {DECISIONS}"
            )
        written.append(_write(eval_dir, policy, task_ids, header, saved, sweep))
    return written


def _write(
    out: Path,
    policy: str,
    task_ids: Sequence[str],
    header: dict[str, Any],
    saved: dict[tuple[str, str], Trajectory],
    sweep: bool,
) -> Path:
    preference = preference_name(policy, header.get("prefer"))
    rows = [decision(saved[(policy, task_id)], preference) for task_id in task_ids]
    return write_decisions(out / decisions_file(policy, sweep), rows)


def _manifest(out: Path) -> dict[str, Any]:
    path = out / "run.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
