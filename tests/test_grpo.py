"""The GRPO loss against hand-computed values, advantage broadcast, KL, aggregation and the filters."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from toolorchestra.agent.preference import Preference  # noqa: E402
from toolorchestra.agent.trajectory import Step, Trajectory  # noqa: E402
from toolorchestra.envs.base import Task  # noqa: E402
from toolorchestra.train.grpo import broadcast_advantages, low_var_kl, policy_loss  # noqa: E402
from toolorchestra.train.rollout import Episode  # noqa: E402
from toolorchestra.train.sampler import PromptDraw  # noqa: E402
from toolorchestra.train.recipes.grpo import filter_episodes  # noqa: E402


def test_two_token_loss_matches_hand_computation() -> None:
    # One episode, two generated tokens. Token 1: ratio e^0.5 = 1.6487 > 1.28 -> clipped for A > 0.
    # Token 2: ratio e^-0.1 = 0.9048, inside [0.8, 1.28] -> unclipped.
    logprobs = torch.tensor([[-1.0, -2.1]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.0]])
    advantage = torch.tensor([2.0])
    mask = torch.tensor([[1.0, 1.0]])
    loss, stats = policy_loss(logprobs, old, advantage, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    token1 = max(-2.0 * math.exp(0.5), -2.0 * 1.28)  # = -2.56
    token2 = max(-2.0 * math.exp(-0.1), -2.0 * math.exp(-0.1))
    assert float(loss.detach()) == pytest.approx((token1 + token2) / 2, rel=1e-6)
    assert stats.pg_clipfrac == 1.0 and stats.tokens == 2
    loss.backward()
    # The clipped token has no gradient; the other has d/dlogp (-A e^{dlogp}) / 2.
    assert logprobs.grad[0, 0] == 0.0
    assert float(logprobs.grad[0, 1]) == pytest.approx(-2.0 * math.exp(-0.1) / 2, rel=1e-6)


def test_negative_advantage_uses_low_clip_and_dual_clip() -> None:
    mask = torch.ones(1, 2)
    # ratio 0.5 < 0.8 with A = -1: max(0.5, 0.8) = 0.8 (clipped); ratio e^3 with A = -1: dual clip caps at 3.
    logprobs = torch.tensor([[math.log(0.5), 3.0]])
    loss, _ = policy_loss(logprobs, torch.zeros(1, 2), torch.tensor([-1.0]), mask, clip_ratio_c=3.0)
    assert float(loss) == pytest.approx((0.8 + 3.0) / 2, rel=1e-6)


def test_kl_k3_term_and_masked_tokens_do_not_count() -> None:
    logprobs = torch.tensor([[-1.0, -1.0, -5.0]])
    ref = torch.tensor([[-1.2, -0.7, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    k3 = [math.exp(d) - d - 1 for d in (-0.2, 0.3)]
    assert low_var_kl(logprobs, ref)[0, :2].tolist() == pytest.approx(k3, rel=1e-5)
    loss, stats = policy_loss(logprobs, logprobs, torch.tensor([0.0]), mask, ref_logprobs=ref, kl_coef=0.5)
    assert float(loss) == pytest.approx(0.5 * sum(k3) / 2, rel=1e-5)
    assert stats.kl == pytest.approx(sum(k3), rel=1e-5)


def test_advantage_is_broadcast_to_every_generated_token() -> None:
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0]], dtype=torch.float32)
    broadcast = broadcast_advantages(torch.tensor([0.75, -1.5]), mask)
    assert broadcast.tolist() == [[0.0, 0.75, 0.75, 0.0, 0.75], [0.0, 0.0, -1.5, -1.5, 0.0]]


def test_token_mean_with_global_count_equals_one_big_batch_under_accumulation() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, generator=generator)
    old = torch.randn(4, 6, generator=generator) * 0.1 + logits
    advantages = torch.tensor([1.0, -0.5, 2.0, 0.3])
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0]],
                        dtype=torch.float32)
    whole = logits.clone().requires_grad_(True)
    loss, _ = policy_loss(whole, old, advantages, mask)
    loss.backward()
    parts = logits.clone().requires_grad_(True)
    total_tokens = int(mask.sum())
    for rows in (slice(0, 2), slice(2, 4)):
        part_loss, _ = policy_loss(parts[rows], old[rows], advantages[rows], mask[rows], global_tokens=total_tokens)
        part_loss.backward()
    assert torch.allclose(whole.grad, parts.grad, atol=1e-7)


def _episode(valid: bool, malformed: bool = False) -> Episode:
    task = Task(id="t", prompt="q")
    trajectory = Trajectory(task_id="t", final_answer="B" if valid else None)
    if malformed:
        trajectory.steps.append(Step(turn=0, kind="orchestrator", name="o", error="malformed tool call (x)"))
    return Episode(draw=PromptDraw(task=task, tools=[], preference=Preference(), price_factors={}), group=0,
                   tools={}, messages=[], trajectory=trajectory)


def test_filters_drop_flat_groups_then_invalid_episodes() -> None:
    flat = [_episode(True) for _ in range(4)]
    varied = [_episode(True), _episode(False), _episode(True, malformed=True), _episode(True)]
    kept, metrics = filter_episodes([flat, varied], [[1.0] * 4, [1.0, 0.0, 0.0, 0.5]], 0.1, drop_invalid=True)
    assert kept == [varied[0], varied[3]]
    assert metrics["filter/low_std_dropped_frac"] == 0.5
    assert metrics["filter/invalid_dropped_frac"] == 0.25
    kept_all, metrics = filter_episodes([flat, varied], [[1.0] * 4, [1.0, 0.0, 0.0, 0.5]], 0.1, drop_invalid=False)
    assert kept_all == varied and metrics["filter/invalid_dropped_frac"] == 0.0
    # std 0.05 of [0.1, 0.0] (sample std 0.0707) is below 0.1: dropped.
    assert filter_episodes([flat[:2]], [[0.1, 0.0]], 0.1, drop_invalid=False)[0] == []


def test_masked_logprobs_equal_the_full_computation_on_policy_tokens() -> None:
    from _tiny_policy import tiny_llama, tiny_tokenizer
    from peft import LoraConfig, get_peft_model

    from toolorchestra.train.grpo import token_logprobs

    tokenizer = tiny_tokenizer()
    model = get_peft_model(tiny_llama(tokenizer), LoraConfig(r=4, target_modules="all-linear"))
    ids = torch.randint(0, len(tokenizer), (2, 9), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    attention[1, 7:] = 0
    mask = torch.zeros(2, 8)
    mask[0, 3:6] = 1
    mask[1, 2:6] = 1
    with torch.no_grad():
        full, full_entropy = token_logprobs(model, ids, attention, temperature=0.7, with_entropy=True)
        masked, masked_entropy = token_logprobs(model, ids, attention, temperature=0.7, with_entropy=True, mask=mask)
    assert torch.allclose(full * mask, masked, atol=1e-5)
    assert torch.allclose(full_entropy * mask, masked_entropy, atol=1e-5)
    assert bool((masked[mask == 0] == 0).all())
