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
        "first_errors": list(dict.fromkeys(failures))[:MAX_FIRST_ERRORS],
        "scoring": dict(sorted(Counter(str(t.score_details.get("method", "none")) for t in trajectories).items())),
        "per_subtask": _per_subtask(trajectories),
        **_live_accounting(trajectories),
    }


def by_role(trajectories: Sequence[Trajectory]) -> dict[str, dict[str, float]]:
    """Cost, tokens, latency and calls of the orchestrator, of each tool (`tool:NAME`) and each label
    (`label:LABEL`), in total and per question (`*_per_question`); the judge's, when one graded, apart
    (`judge`), since its dollars are not the episode's."""
    roles: dict[str, dict[str, float]] = {}

    def add(role: str, *usage: float) -> None:
        """`usage`: calls, cost_usd, prompt_tokens, completion_tokens, latency_s (the entry's order)."""
        entry = roles.setdefault(
            role, {"calls": 0, "cost_usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0, "latency_s": 0.0}
        )
        for key, value in zip(entry, usage, strict=True):
            entry[key] += value

    for trajectory in trajectories:
        for step in trajectory.steps:
            usage = (1, step.cost_usd, step.prompt_tokens, step.completion_tokens, step.latency_s)
            if step.kind == "orchestrator":
                add("orchestrator", *usage)
                continue
            add(f"tool:{step.name}", *usage)
            if step.label:
                add(f"label:{step.label}", *usage)
        judge = trajectory.score_details.get("judge")
        if isinstance(judge, dict) and judge.get("judge_model"):
            add(
                "judge",
                1,
                float(judge.get("cost_usd", 0.0)),
                int(judge.get("prompt_tokens", 0)),
                int(judge.get("completion_tokens", 0)),
                float(judge.get("latency_s", 0.0)),
            )
    count = max(len(trajectories), 1)
    for entry in roles.values():
        for key in ("calls", "cost_usd", "latency_s"):
            entry[f"{key}_per_question"] = entry[key] / count
    return dict(sorted(roles.items()))


def _live_accounting(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """For runs graded by a live world's judge (envs/live/judge.py): the paper's accounting by role, how each
    answer was judged, the questions whose answer tool never ran, and the judge's own cost (apart from
    `cost_usd`, the episodes'). Other runs keep the fields they had (their committed metrics stay comparable)."""
    verdicts = [t.score_details["judge"] for t in trajectories if isinstance(t.score_details.get("judge"), dict)]
    if not verdicts:
        return {}
    outcomes = Counter(f"{v.get('method')}:{'correct' if v.get('correct') else 'incorrect'}" for v in verdicts)
    return {
        "by_role": by_role(trajectories),
        "judge": {
            "mode": sorted({str(v.get("judged_by", "")) for v in verdicts}),
            "verdicts": dict(sorted(outcomes.items())),
            "llm_calls": sum(1 for v in verdicts if v.get("judge_model")),
            "cost_usd": sum(float(v.get("cost_usd", 0.0)) for v in verdicts),
            "prompt_tokens": sum(int(v.get("prompt_tokens", 0)) for v in verdicts),
            "completion_tokens": sum(int(v.get("completion_tokens", 0)) for v in verdicts),
            "errors": sum(1 for v in verdicts if v.get("error")),
        },
        "no_answer": sum(1 for t in trajectories if t.score_details.get("no_answer")),
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
