"""The ToolOrchestra reward: outcome, efficiency and preference of a group of rollouts, and GRPO advantages.

Pure Python (no torch), so evaluation, the trainer and a later verl reward function share it.

For a group of G rollouts of one task and a preference vector P over features
x = [calls:NAME ..., accuracy, -cost, -latency]:

    r(tau) = 0                                              if tau is wrong
    r(tau) = sum_f P_f * (x_f - min_f) / (max_f - min_f)    otherwise

min_f and max_f are taken over *all* G rollouts of the group, wrong ones included (as the issue and the
paper state it): a wrong rollout still widens the range that a correct one is normalized in. A feature
whose max equals its min contributes 0. Features that a preference names but a rollout lacks (a tool it
never called) count as 0.

The advantage is A = clip((r - mean) / (std + 1e-6), -3, 3), the mean over the group and the std per group,
per batch, or not at all (then A = clip(r - mean, -3, 3)). The std is the sample std (n - 1 in the
denominator), as verl's GRPO estimator computes it with torch.std; a group of one has std 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

StdMode = Literal["group", "batch", "none"]

NEGATED_FEATURES = frozenset({"cost", "latency"})
"""Features where less is better: the reward uses -x for them."""

ADVANTAGE_CLIP = 3.0
STD_EPS = 1e-6


def trajectory_features(trajectory: Trajectory, correct: bool) -> dict[str, float]:
    """The reward features of one episode, the only place they are built: `accuracy`, `cost` (USD), `latency`
    (s), and `calls:NAME` for every tool name and every label the episode called."""
    steps = trajectory.tool_steps
    calls = Counter(step.name for step in steps)
    calls.update(step.label for step in steps if step.label)
    values = {"accuracy": float(correct), "cost": trajectory.cost_usd, "latency": trajectory.latency_s}
    values.update({f"calls:{name}": float(count) for name, count in calls.items()})
    return values


def group_rewards(
    features: Sequence[Mapping[str, float]],
    correct: Sequence[bool],
    preference: Mapping[str, float],
    scale_rows: int | None = None,
) -> list[float]:
    """Rewards of one group. `features[i]` holds rollout i's raw `accuracy`, `cost` (USD), `latency` (s) and
    `calls:NAME` counts; the minus signs of cost and latency are applied here. `scale_rows`: min-max normalize
    over the first rows only (the alternatives that set the scale, e.g. a pool's single labels); the later rows
    are scored on that scale and may fall outside [0, 1]."""
    if len(features) != len(correct):
        raise ValueError(f"features has {len(features)} rollouts but correct has {len(correct)}")
    oriented = [_oriented(row, preference) for row in features]
    normalized = {name: _min_max([row[name] for row in oriented], scale_rows) for name in preference}
    return [
        sum(weight * normalized[name][index] for name, weight in preference.items()) if is_correct else 0.0
        for index, is_correct in enumerate(correct)
    ]


def expected_group_rewards(
    features: Sequence[Mapping[str, float]],
    p_correct: Sequence[float],
    preference: Mapping[str, float],
    scale_rows: int | None = None,
) -> list[float]:
    """E[group_rewards] of one group when rollout i is right with probability `p_correct[i]`, independently,
    and every feature but `accuracy` is known (a replay world's cost, latency and calls of each label).

    `accuracy` is the correctness itself, so after min-max normalization it is 1 for a right rollout unless
    every rollout is right (then the column is flat and gives 0); every other feature's normalized value does
    not depend on correctness (min and max run over all rollouts, wrong ones included). Hence

        E[r_i] = p_i * d_i + P_accuracy * (p_i - prod_j p_j)

    with d_i the reward rollout i gets from the other features when it is right (group_rewards itself,
    every rollout marked right). An outcome model's probabilities turn recorded outcomes into these
    low-variance expected rewards (train/outcome_model.py). `scale_rows` as in `group_rewards`."""
    if len(features) != len(p_correct):
        raise ValueError(f"features has {len(features)} rollouts but p_correct has {len(p_correct)}")
    others = {name: weight for name, weight in preference.items() if name != "accuracy"}
    fixed = group_rewards(features, [True] * len(features), others, scale_rows) if others else [0.0] * len(features)
    all_right = math.prod(p_correct)
    accuracy_weight = float(preference.get("accuracy", 0.0))
    return [p * d + accuracy_weight * (p - all_right) for p, d in zip(p_correct, fixed, strict=True)]


def with_cost_floor(preference: Mapping[str, float], cost_floor: float, cost_scale: float = 1.0) -> dict[str, float]:
    """The preference vector with its cost weight times `cost_scale`, raised to at least `cost_floor`
    (training knobs; 0 and 1 leave the paper's vector as it is).

    Under the accuracy preference (P = {accuracy: 1}) every correct rollout gets the same reward, so the
    optimum is the model most often right whatever it costs: gpt-4 on every RouterBench subset, a point
    that the single gpt-4 baseline matches exactly. A small floor (0.1) breaks the ties among likely-correct
    models by price, lexicographically: accuracy first, then dollars.

    A scale above 1 is what "low cost" means to a pool whose prices span orders of magnitude: the cost
    feature is min-max normalized over every label, so one very dear label squeezes the others' differences
    towards 0 and only a larger weight lets them count.
    """
    weights = dict(preference)
    if "cost" in weights:
        weights["cost"] = float(weights["cost"]) * cost_scale
    if cost_floor > 0:
        weights["cost"] = max(float(weights.get("cost", 0.0)), cost_floor)
    return weights


def _oriented(row: Mapping[str, float], preference: Mapping[str, float]) -> dict[str, float]:
    return {name: (-1.0 if name in NEGATED_FEATURES else 1.0) * float(row.get(name, 0.0)) for name in preference}


def _min_max(values: list[float], scale_rows: int | None = None) -> list[float]:
    scale = values[:scale_rows] if scale_rows else values
    low, high = min(scale, default=0.0), max(scale, default=0.0)
    if high == low:
        return [0.0] * len(values)
    return [(value - low) / (high - low) for value in values]


def group_advantages(rewards: Sequence[float], std: StdMode = "group", batch_std: float | None = None) -> list[float]:
    """GRPO advantages of one group. `std="batch"` divides by `batch_std` (see `batch_advantages`)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    if std == "group":
        scale = reward_std(rewards) + STD_EPS
    elif std == "batch":
        if batch_std is None:
            raise ValueError('std="batch" needs batch_std, the reward std over the whole batch')
        scale = batch_std + STD_EPS
    elif std == "none":
        scale = 1.0
    else:
        raise ValueError(f"std must be 'group', 'batch' or 'none'; got {std!r}")
    return [_clip((reward - mean) / scale) for reward in rewards]


def batch_advantages(groups: Sequence[Sequence[float]], std: StdMode = "group") -> list[list[float]]:
    """Advantages of every group of a batch; the mean is always per group, the std as `std` says."""
    flat = [reward for group in groups for reward in group]
    batch_std = reward_std(flat) if std == "batch" else None
    return [group_advantages(group, std, batch_std) for group in groups]


def reward_std(rewards: Sequence[float]) -> float:
    """Sample std of a group's rewards (the quantity the low-variance filter compares to its threshold); 0 for
    fewer than two."""
    if len(rewards) < 2:
        return 0.0
    mean = sum(rewards) / len(rewards)
    return math.sqrt(sum((reward - mean) ** 2 for reward in rewards) / (len(rewards) - 1))


def _clip(value: float) -> float:
    return max(-ADVANTAGE_CLIP, min(ADVANTAGE_CLIP, value))


__all__ = [
    "batch_advantages",
    "expected_group_rewards",
    "group_advantages",
    "group_rewards",
    "reward_std",
    "with_cost_floor",
    "NEGATED_FEATURES",
]
