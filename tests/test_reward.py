"""The ToolOrchestra reward and GRPO advantages on groups computed by hand."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from toolorchestra.agent.preference import Preference
from toolorchestra.reward import (batch_advantages, expected_group_rewards, group_advantages, group_rewards, reward_std,
                                  with_cost_floor)


def test_all_wrong_gives_zero_rewards_and_zero_advantages() -> None:
    features = [{"accuracy": 0.0, "cost": c, "latency": 1.0} for c in (0.1, 0.2, 0.3)]
    rewards = group_rewards(features, [False, False, False], {"accuracy": 1.0, "cost": 1.0})
    assert rewards == [0.0, 0.0, 0.0]
    assert group_advantages(rewards) == [0.0, 0.0, 0.0]


def test_exactly_one_right() -> None:
    features = [{"accuracy": 1.0, "cost": 0.3, "latency": 2.0},
                {"accuracy": 0.0, "cost": 0.1, "latency": 1.0},
                {"accuracy": 0.0, "cost": 0.2, "latency": 3.0},
                {"accuracy": 0.0, "cost": 0.4, "latency": 4.0}]
    preference = {"accuracy": 1.0, "cost": 0.5, "latency": 0.25}
    rewards = group_rewards(features, [True, False, False, False], preference)
    # accuracy: (1 - 0) / (1 - 0) = 1; -cost in [-0.4, -0.1]: (-0.3 + 0.4) / 0.3 = 1/3;
    # -latency in [-4, -1]: (-2 + 4) / 3 = 2/3.  r = 1 + 0.5/3 + 0.25*2/3 = 4/3.
    assert rewards[1:] == [0.0, 0.0, 0.0]
    assert rewards[0] == pytest.approx(1 + 0.5 / 3 + 0.25 * 2 / 3)
    mean = rewards[0] / 4
    std = math.sqrt(((rewards[0] - mean) ** 2 + 3 * mean ** 2) / 3)  # sample std, as torch.std
    advantages = group_advantages(rewards)
    assert advantages[0] == pytest.approx((rewards[0] - mean) / (std + 1e-6))
    assert advantages[1] == pytest.approx(-mean / (std + 1e-6))
    assert advantages[0] == pytest.approx(1.5, rel=1e-5)  # one of four right: (1 - 1/4) / sqrt(1/4) with n-1


def test_ties_give_equal_rewards_and_constant_features_contribute_nothing() -> None:
    features = [{"accuracy": 1.0, "cost": 0.2, "latency": 1.0}] * 2 + [{"accuracy": 1.0, "cost": 0.5, "latency": 1.0}]
    rewards = group_rewards(features, [True, True, True], {"accuracy": 1.0, "cost": 1.0, "latency": 1.0})
    # accuracy and latency are constant (max = min): 0. cost: the two cheap ones get 1, the dear one 0.
    assert rewards == [1.0, 1.0, 0.0]
    advantages = group_advantages(rewards)
    assert advantages[0] == advantages[1] > 0 > advantages[2]


def test_all_right_with_accuracy_only_has_no_signal() -> None:
    features = [{"accuracy": 1.0, "cost": c, "latency": 0.0} for c in (0.1, 0.2)]
    assert group_rewards(features, [True, True], {"accuracy": 1.0}) == [0.0, 0.0]


def test_cost_floor_breaks_ties_among_correct_answers_by_price() -> None:
    features = [{"accuracy": 1.0, "cost": c, "latency": 0.0} for c in (0.1, 0.3)] + [{"accuracy": 0.0, "cost": 0.0}]
    accuracy = Preference().weights()
    plain = group_rewards(features, [True, True, False], accuracy)
    assert plain[0] == plain[1] == 1.0  # the paper's accuracy vector: price makes no difference
    floored = group_rewards(features, [True, True, False], with_cost_floor(accuracy, 0.1))
    # cost range [0, 0.3] over the group (the wrong, free one included): 0.1 -> 2/3 of the cost weight, 0.3 -> 0
    assert floored == [pytest.approx(1.0 + 0.1 * 2 / 3), pytest.approx(1.0), 0.0]
    # a stronger stated cost weight is kept, and the input is not changed
    assert with_cost_floor({"accuracy": 1.0, "cost": 1.0}, 0.1)["cost"] == 1.0
    assert with_cost_floor(accuracy, 0.0) == accuracy and accuracy["cost"] == 0.0


def test_tool_preference_rewards_calls_of_that_label() -> None:
    preference = Preference(tools={"expert-2": 1.0}).weights()
    features = [{"accuracy": 1.0, "calls:expert-2": 2.0}, {"accuracy": 1.0}, {"accuracy": 0.0, "calls:expert-2": 4.0}]
    rewards = group_rewards(features, [True, True, False], preference)
    # accuracy in [0, 1] -> 1 for both right ones; calls:expert-2 in [0, 4]: 2/4 and 0.
    assert rewards == [pytest.approx(1.5), pytest.approx(1.0), 0.0]


def test_advantages_are_clipped_and_std_modes() -> None:
    rewards = [1.0] + [0.0] * 15
    assert max(group_advantages(rewards)) == 3.0
    assert group_advantages([1.0, 0.0], std="none") == [0.5, -0.5]
    groups = [[1.0, 0.0], [0.2, 0.0]]
    per_batch = batch_advantages(groups, std="batch")
    batch_std = reward_std([1.0, 0.0, 0.2, 0.0])
    assert per_batch[1][0] == pytest.approx(0.1 / (batch_std + 1e-6))
    assert batch_advantages(groups, std="group")[1][0] == pytest.approx(0.1 / (reward_std([0.2, 0.0]) + 1e-6))
    with pytest.raises(ValueError):
        group_advantages([1.0], std="median")  # type: ignore[arg-type]


@pytest.mark.parametrize("preference", [{"accuracy": 1.0}, {"accuracy": 1.0, "cost": 1.0},
                                        {"accuracy": 1.0, "cost": 0.1, "latency": 0.5},
                                        {"accuracy": 1.0, "calls:b": 1.0}, {"cost": 1.0}])
def test_expected_group_rewards_equal_the_exact_enumeration(preference: dict[str, float]) -> None:
    import itertools

    features = [{"cost": 0.5, "latency": 2.0, "calls:a": 1.0}, {"cost": 0.1, "latency": 5.0, "calls:b": 1.0},
                {"cost": 0.9, "latency": 1.0, "calls:c": 1.0}, {"cost": 0.1, "latency": 3.0, "calls:d": 1.0}]
    p_correct = [0.9, 0.6, 0.3, 0.0]
    exact = [0.0] * len(features)
    for outcome in itertools.product([False, True], repeat=len(features)):
        weight = math.prod(p if right else 1 - p for p, right in zip(p_correct, outcome))
        rows = [{**row, "accuracy": float(right)} for row, right in zip(features, outcome)]
        exact = [total + weight * reward for total, reward in zip(exact, group_rewards(rows, list(outcome), preference))]
    assert expected_group_rewards(features, p_correct, preference) == pytest.approx(exact, abs=1e-12)
    # certain outcomes give group_rewards itself
    certain = [True, False, True, False]
    rows = [{**row, "accuracy": float(right)} for row, right in zip(features, certain)]
    assert expected_group_rewards(features, [float(c) for c in certain], preference) == pytest.approx(
        group_rewards(rows, certain, preference))


def test_mismatched_lengths_raise() -> None:
    with pytest.raises(ValueError, match="rollouts"):
        group_rewards([{"accuracy": 1.0}], [True, False], {"accuracy": 1.0})


def test_reward_package_does_not_import_torch() -> None:
    code = "import sys, toolorchestra.reward; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_cost_scale_multiplies_the_stated_cost_weight_before_the_floor() -> None:
    assert with_cost_floor({"accuracy": 1.0, "cost": 1.0}, 0.1, 50.0) == {"accuracy": 1.0, "cost": 50.0}
    # the accuracy preference states no cost weight: only the floor gives it one
    assert with_cost_floor({"accuracy": 1.0}, 0.1, 50.0) == {"accuracy": 1.0, "cost": 0.1}
    assert with_cost_floor({"accuracy": 1.0}, 0.0, 50.0) == {"accuracy": 1.0}
    # with a dear label in the group, a larger weight is what lets the cheaper of two right labels win by more
    features = [{"cost": 0.001}, {"cost": 0.002}, {"cost": 0.1}]
    plain = group_rewards(features, [True, True, False], with_cost_floor({"accuracy": 1.0, "cost": 1.0}, 0.0))
    scaled = group_rewards(features, [True, True, False], with_cost_floor({"accuracy": 1.0, "cost": 1.0}, 0.0, 50.0))
    assert plain[0] - plain[1] == pytest.approx(0.001 / 0.099)
    assert scaled[0] - scaled[1] == pytest.approx(50 * 0.001 / 0.099)


def test_scale_rows_sets_the_scale_from_the_first_alternatives():
    from toolorchestra.reward import expected_group_rewards, group_rewards

    features = [{"cost": 1.0}, {"cost": 3.0}, {"cost": 5.0}]
    weights = {"accuracy": 1.0, "cost": 1.0}
    # all right: the accuracy column is flat (0). Over all three the dearest is 5; over the first two it is 3,
    # so the third scores below the second
    assert group_rewards(features, [True] * 3, weights) == pytest.approx([1.0, 0.5, 0.0])
    assert group_rewards(features, [True] * 3, weights, scale_rows=2) == pytest.approx([1.0, 0.0, -1.0])
    # adding a dear alternative no longer changes how the first two compare
    two = expected_group_rewards(features[:2], [0.9, 0.8], weights)
    three = expected_group_rewards(features, [0.9, 0.8, 0.99], weights, scale_rows=2)
    assert three[0] - three[1] == pytest.approx(two[0] - two[1], abs=1e-9)
