"""The paper's group reward over verl's rollouts, computed by `toolorchestra.reward` (not re-implemented).

verl groups the `rollout.n` rollouts of one prompt by their `uid`. Each rollout's record (written by the
agent loop, integrations/verl/episode.py) holds its reward features (accuracy, cost, latency, calls per
tool), whether it was correct, and the prompt's preference vector (the cost floor applied). The reward of a
group is `group_rewards` of those records, exactly as the single-machine trainer computes it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from toolorchestra.reward import group_rewards


def group_reward_scores(records: Sequence[Mapping[str, Any]], groups: Sequence[Hashable]) -> list[float]:
    """One reward per rollout; rollouts with the same group id (verl's uid) form one group, in any order."""
    if len(records) != len(groups):
        raise ValueError(f"{len(records)} rollout records but {len(groups)} group ids")
    members: dict[Hashable, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    scores = [0.0] * len(records)
    for group, indices in members.items():
        preference = _preference_of(group, [records[index] for index in indices])
        rewards = group_rewards(
            [records[index]["features"] for index in indices],
            [bool(records[index]["correct"]) for index in indices],
            preference,
        )
        for index, reward in zip(indices, rewards, strict=True):
            scores[index] = reward
    return scores


def _preference_of(group: Hashable, records: list[Mapping[str, Any]]) -> dict[str, float]:
    preference = dict(records[0]["preference"])
    if any(dict(record["preference"]) != preference for record in records[1:]):
        raise ValueError(
            f"group {group!r}: its rollouts carry different preference vectors; a group is the rollouts of one prompt"
        )
    return {name: float(weight) for name, weight in preference.items()}


def compute_score(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any]],
    **_: Any,
) -> list[float]:
    """verl's batch reward function signature (`reward.reward_manager.name=batch` with
    `reward.custom_reward_function`): each extra_info holds our record under "toolorchestra" and the group id
    under "uid" (what `GroupRewardAgentLoopManager` passes). The texts are not needed: correctness was scored
    by the env inside the episode."""
    from toolorchestra.integrations.verl import EXTRA_KEY

    records, groups = [], []
    for index, extra in enumerate(extra_infos):
        if EXTRA_KEY not in extra or "uid" not in extra:
            raise ValueError(f"extra_infos[{index}]: needs {EXTRA_KEY!r} (the agent loop's record) and 'uid'")
        records.append(extra[EXTRA_KEY])
        groups.append(extra["uid"])
    return group_reward_scores(records, groups)
