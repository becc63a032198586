"""Metrics of a set of scored trajectories: accuracy, dollars, latency, tokens, tool and model use.

Everything is computed from the trajectories alone, in the order given, so a resumed run and an
uninterrupted one give identical metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from toolorchestra.agent.trajectory import Trajectory

MAX_FIRST_ERRORS = 3


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The metrics block of one policy's run (see docs/replay.md for each field)."""
    count = len(trajectories)
    correct = sum(1 for trajectory in trajectories if trajectory.correct)
    cost = sum(trajectory.cost_usd for trajectory in trajectories)
    latencies = np.asarray([trajectory.latency_s for trajectory in trajectories], dtype=float)
    calls_per_tool: Counter[str] = Counter()
    calls_per_model: Counter[str] = Counter()
    answered_by: Counter[str] = Counter()
    for trajectory in trajectories:
        calls_per_tool.update(trajectory.calls_per_tool())
        calls_per_model.update(trajectory.calls_per_model())
        if trajectory.answered_by:
            answered_by[trajectory.answered_by] += 1
    tool_calls = sum(calls_per_tool.values())
    failures = [error for error in map(episode_error, trajectories) if error is not None]
    return {
        "n": count,
        "correct": correct,
        "accuracy": correct / count if count else 0.0,
        "cost_usd": cost,
        "cost_per_task_usd": cost / count if count else 0.0,
        "latency_s": _latency(latencies),
        "tokens": _tokens(trajectories),
        "tool_calls": tool_calls,
        "tool_calls_per_task": tool_calls / count if count else 0.0,
        "calls_per_tool": dict(sorted(calls_per_tool.items())),
        "calls_per_model": dict(sorted(calls_per_model.items())),
        "answered_by": dict(sorted(answered_by.items())),
        "stop_reasons": dict(sorted(Counter(t.stop_reason or "none" for t in trajectories).items())),
        "malformed_calls": sum(trajectory.malformed_calls() for trajectory in trajectories),
        "errors": len(failures),
        "first_errors": _first_distinct(failures, MAX_FIRST_ERRORS),
        "scoring": dict(sorted(Counter(str(t.score_details.get("method", "none")) for t in trajectories).items())),
        "per_subtask": _per_subtask(trajectories),
    }


def episode_error(trajectory: Trajectory) -> str | None:
    """Why an episode failed, or None: an error recorded by the runner (score_details), an orchestrator turn
    that failed, or an episode that stopped with stop_reason "error" (its last step error names the cause)."""
    recorded = trajectory.score_details.get("error")
    if recorded:
        return str(recorded)
    for step in trajectory.steps:
        if step.kind == "orchestrator" and step.error and step.error.startswith("orchestrator failed"):
            return step.error
    if trajectory.stop_reason == "error":
        return next((step.error for step in reversed(trajectory.steps) if step.error), "stopped with an error")
    return None


def _first_distinct(errors: Sequence[str], limit: int) -> list[str]:
    shown: list[str] = []
    for error in errors:
        if error not in shown:
            shown.append(error)
            if len(shown) == limit:
                break
    return shown


def _latency(latencies: np.ndarray) -> dict[str, float]:
    if latencies.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    return {
        "mean": float(latencies.mean()),
        "p50": float(np.percentile(latencies, 50)),
        "p95": float(np.percentile(latencies, 95)),
        "max": float(latencies.max()),
    }


def _tokens(trajectories: Sequence[Trajectory]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for trajectory in trajectories:
        for step in trajectory.steps:
            prefix = "orchestrator" if step.kind == "orchestrator" else "tools"
            totals[f"{prefix}_prompt"] += step.prompt_tokens
            totals[f"{prefix}_completion"] += step.completion_tokens
    return {
        key: int(totals[key])
        for key in ("orchestrator_prompt", "orchestrator_completion", "tools_prompt", "tools_completion")
    }


def _per_subtask(trajectories: Sequence[Trajectory]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Trajectory]] = {}
    for trajectory in trajectories:
        groups.setdefault(str(trajectory.score_details.get("subtask") or "all"), []).append(trajectory)
    breakdown = {}
    for name in sorted(groups):
        members = groups[name]
        correct = sum(1 for trajectory in members if trajectory.correct)
        cost = sum(trajectory.cost_usd for trajectory in members)
        breakdown[name] = {
            "n": len(members),
            "correct": correct,
            "accuracy": correct / len(members),
            "cost_usd": cost,
            "latency_mean_s": float(np.mean([t.latency_s for t in members])),
        }
    return breakdown
