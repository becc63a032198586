"""Metrics of a tau2 run, from our saved trajectories alone (no tau2 import): pass^k, mean reward, and cost,
tokens and latency split into the orchestrator, the experts and the user simulator.

pass^k (tau-bench, arXiv 2406.12045): the chance that k trials of a task, drawn without replacement from its
n trials, all succeed, estimated without bias as C(c, k) / C(n, k) with c successful trials, averaged over the
tasks. A trial succeeds when its reward is 1 (within 1e-6, as tau2's `is_successful`). k runs from 1 to the
fewest trials any task has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from math import comb
from typing import Any

from toolorchestra.agent.trajectory import Step, Trajectory

SUCCESS_TOLERANCE = 1e-6
EXPERT_TOOL = "call_expert"


def is_success(reward: float) -> bool:
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def pass_hat_k(successes_per_task: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """pass^k for k = 1..(fewest trials of a task), each the mean over tasks of C(c, k) / C(n, k)."""
    if not successes_per_task:
        return {}
    max_k = min(len(trials) for trials in successes_per_task.values())
    return {
        k: sum(comb(sum(trials), k) / comb(len(trials), k) for trials in successes_per_task.values())
        / len(successes_per_task)
        for k in range(1, max_k + 1)
    }


def group_totals(steps: Iterable[Step]) -> dict[str, Any]:
    """Calls, tokens, dollars and summed seconds of a group of model calls."""
    steps = list(steps)
    return {
        "calls": len(steps),
        "prompt_tokens": sum(step.prompt_tokens for step in steps),
        "completion_tokens": sum(step.completion_tokens for step in steps),
        "cost_usd": float(sum(step.cost_usd for step in steps)),
        "latency_s": float(sum(step.latency_s for step in steps)),
    }


def user_totals(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The user simulator's calls, tokens, dollars and seconds, as each trajectory's score_details records."""
    keys = ("calls", "prompt_tokens", "completion_tokens", "cost_usd", "latency_s")
    totals: dict[str, Any] = {key: 0 for key in keys}
    for trajectory in trajectories:
        recorded = trajectory.score_details.get("user_simulator") or {}
        for key in keys:
            totals[key] += recorded.get(key, 0)
    totals["cost_usd"] = float(totals["cost_usd"])
    totals["latency_s"] = float(totals["latency_s"])
    return totals


def cost_groups(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The three cost groups (orchestrator, experts with a per-label split, user simulator) and their sums."""
    steps = [step for trajectory in trajectories for step in trajectory.steps]
    expert_steps = [step for step in steps if step.kind == "tool" and step.name == EXPERT_TOOL]
    per_label = {
        label: {
            "model": next(step.model for step in expert_steps if step.label == label),
            **group_totals(step for step in expert_steps if step.label == label),
        }
        for label in sorted({step.label for step in expert_steps if step.label})
    }
    groups = {
        "orchestrator": group_totals(step for step in steps if step.kind == "orchestrator"),
        "experts": {**group_totals(expert_steps), "per_label": per_label},
        "user_simulator": user_totals(trajectories),
    }
    count = len(trajectories) or 1
    for group in groups.values():
        group["cost_per_simulation_usd"] = group["cost_usd"] / count
    groups["agent_cost_usd"] = groups["orchestrator"]["cost_usd"] + groups["experts"]["cost_usd"]
    groups["total_cost_usd"] = groups["agent_cost_usd"] + groups["user_simulator"]["cost_usd"]
    return groups


def summarize_tau2(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The metrics block of a tau2 run over `trajectories` (one per simulation, any order)."""
    rewards = [float(trajectory.score_details.get("reward", 0.0)) for trajectory in trajectories]
    successes: dict[str, list[bool]] = {}
    for trajectory, reward in zip(trajectories, rewards, strict=True):
        successes.setdefault(trajectory.task_id, []).append(is_success(reward))
    trials = Counter(len(values) for values in successes.values())
    errors = [str(t.score_details["error"]) for t in trajectories if t.score_details.get("error")]
    return {
        "n_simulations": len(trajectories),
        "n_tasks": len(successes),
        "trials_per_task": {str(count): tasks for count, tasks in sorted(trials.items())},
        "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
        "pass_hat_k": {str(k): value for k, value in pass_hat_k(successes).items()},
        "termination_reasons": dict(
            sorted(Counter(str(t.score_details.get("termination_reason", "none")) for t in trajectories).items())
        ),
        "cost": cost_groups(trajectories),
        "agent_latency_s": sum(trajectory.latency_s for trajectory in trajectories),
        "simulation_wall_s": sum(float(t.score_details.get("duration_s", 0.0)) for t in trajectories),
        "errors": len(errors),
        "first_errors": list(dict.fromkeys(errors))[:3],
        "per_task": {
            task_id: {"trials": len(values), "successes": sum(values)} for task_id, values in sorted(successes.items())
        },
    }
