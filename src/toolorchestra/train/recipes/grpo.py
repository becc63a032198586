"""The grpo recipe: sampled episodes, group-normalized advantages, the clipped policy loss (the paper's path).

One step: play rollout.n episodes of each drawn task, reward them under the draw's preference, drop groups
without a learning signal (grpo.filter_*), then update the policy on the kept episodes with the loss of
train/grpo.py and the `actor` knobs (verl's names). It reads the trainer only through its public interface:
`policy`, `rollout`, `logprobs`, `optimizer_step`.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from toolorchestra.reward import batch_advantages, group_rewards, reward_std, with_cost_floor
from toolorchestra.train.grpo import pad_rows
from toolorchestra.train.health import check_trajectories
from toolorchestra.train.rollout import Episode
from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    from toolorchestra.train.trainer import Trainer


class GRPORecipe:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def step(self, draws: list[PromptDraw]) -> tuple[dict[str, Any], list[Episode]]:
        """Rollouts, rewards, filters, policy update: the step's metrics and its episodes."""
        import torch

        trainer, config = self.trainer, self.trainer.config
        started = time.perf_counter()
        trainer.policy.eval()
        saved_before = trainer.rollout.prefill_stats["prefill_tokens_saved"]
        with torch.no_grad():
            episodes = trainer.rollout.run(draws)
        # a broken env stops the run with its errors
        check_trajectories([episode.trajectory for episode in episodes], trainer.global_step + 1)
        rollout_time = time.perf_counter() - started
        groups = [[episode for episode in episodes if episode.group == index] for index in range(len(draws))]
        rewards = [
            group_rewards(
                [e.features() for e in group],
                [e.correct for e in group],
                with_cost_floor(draw.preference.weights(), config.algorithm.cost_floor, config.algorithm.cost_scale),
            )
            for draw, group in zip(draws, groups, strict=True)
        ]
        advantages = batch_advantages(rewards, config.algorithm.norm_adv_by_std)
        for group, group_rewards_, group_advantages_ in zip(groups, rewards, advantages, strict=True):
            for episode, reward, advantage in zip(group, group_rewards_, group_advantages_, strict=True):
                episode.reward, episode.advantage = reward, advantage
        kept, filter_metrics = filter_episodes(
            groups, rewards, config.grpo.filter_min_reward_std, config.grpo.filter_invalid
        )
        update_started = time.perf_counter()
        update_metrics = self.update(kept) if kept else {}
        update_time = time.perf_counter() - update_started
        generated = sum(sum(episode.loss_mask) for episode in episodes)
        metrics: dict[str, Any] = {
            **_episode_metrics(episodes),
            **filter_metrics,
            **update_metrics,
            "generated_tokens": generated,
            "prefill_tokens_saved": trainer.rollout.prefill_stats["prefill_tokens_saved"] - saved_before,
            "rollout_time_s": rollout_time,
            "update_time_s": update_time,
            "tokens_per_s": generated / rollout_time if rollout_time > 0 else 0.0,
        }
        if update_metrics.get("train_tokens"):
            metrics["train_tokens_per_s"] = update_metrics["train_tokens"] / max(update_time, 1e-9)
        return metrics, episodes

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        """ppo_epochs passes over the episodes in mini-batches, accumulating micro-batches."""
        import torch

        from toolorchestra.train.grpo import policy_loss

        trainer, config = self.trainer, self.trainer.config
        actor = config.actor
        temperature = config.rollout.temperature
        ids, attention, mask = pad_rows(
            [(e.token_ids, e.loss_mask) for e in episodes], trainer.rollout.pad_id, trainer.policy.device
        )
        advantages = torch.tensor([episode.advantage for episode in episodes], dtype=torch.float32, device=ids.device)
        minibatches = _split(list(range(len(episodes))), config.data.train_batch_size // actor.ppo_mini_batch_size)
        # With one update per batch the policy that sampled is the policy being scored, so the "old" log-probs
        # are the current ones, detached (the ratio is 1, as in verl); a separate no-grad pass would only
        # recompute them. With several updates they are recorded once before the first.
        on_policy = actor.ppo_epochs == 1 and len(minibatches) == 1
        old_logprobs, ref_logprobs, entropy_sum = self.reference_passes(ids, attention, mask, not on_policy)
        totals: dict[str, float] = defaultdict(float)
        trainer.policy.train()
        for _ in range(actor.ppo_epochs):
            for minibatch in minibatches:
                global_tokens = int(mask[minibatch].sum())
                for start in range(0, len(minibatch), actor.ppo_micro_batch_size):
                    rows = minibatch[start : start + actor.ppo_micro_batch_size]
                    logprobs, entropy = trainer.logprobs(
                        ids[rows], attention[rows], mask[rows], temperature, with_entropy=on_policy
                    )
                    if on_policy:
                        old = logprobs.detach()
                        entropy_sum += float((entropy * mask[rows]).sum())
                    else:
                        old = old_logprobs[rows]
                    loss, stats = policy_loss(
                        logprobs,
                        old,
                        advantages[rows],
                        mask[rows],
                        clip_ratio_low=actor.clip_ratio_low,
                        clip_ratio_high=actor.clip_ratio_high,
                        clip_ratio_c=actor.clip_ratio_c,
                        ref_logprobs=ref_logprobs[rows] if ref_logprobs is not None else None,
                        kl_coef=actor.kl_loss_coef if actor.use_kl_loss else 0.0,
                        loss_agg_mode=actor.loss_agg_mode,
                        global_tokens=max(global_tokens, 1),
                        global_sequences=len(minibatch),
                    )
                    loss.backward()
                    totals["loss"] += float(loss.detach())
                    totals["clipped"] += stats.pg_clipfrac
                    totals["kl"] += stats.kl
                    totals["ratio"] += stats.ratio
                    totals["tokens"] += stats.tokens
                totals["grad_norm"] += trainer.optimizer_step()
                totals["updates"] += 1
        trainer.policy.eval()
        tokens = max(totals["tokens"], 1)
        train_tokens = int(mask.sum())
        return {
            "actor/pg_loss": totals["loss"] / max(totals["updates"], 1),
            "actor/pg_clipfrac": totals["clipped"] / tokens,
            "actor/kl": totals["kl"] / tokens if ref_logprobs is not None else 0.0,
            "actor/ratio_mean": totals["ratio"] / tokens,
            "actor/grad_norm": totals["grad_norm"] / max(totals["updates"], 1),
            "actor/entropy": entropy_sum / max(train_tokens, 1),
            "train_tokens": train_tokens * actor.ppo_epochs,
            "train_episodes": len(episodes),
        }

    def reference_passes(self, ids: Any, attention: Any, mask: Any, record_old: bool) -> tuple[Any, Any, float]:
        """Log-probs of the policy before the update (and entropy) if `record_old`, and of the reference
        (adapter disabled) if the KL loss is on."""
        import torch

        trainer, config = self.trainer, self.trainer.config
        micro, temperature = config.actor.ppo_micro_batch_size, config.rollout.temperature
        old_parts, ref_parts = [], []
        entropy_sum = 0.0
        with torch.no_grad():
            for start in range(0, ids.shape[0], micro):
                rows = slice(start, start + micro)
                if record_old:
                    logprobs, entropy = trainer.logprobs(
                        ids[rows], attention[rows], mask[rows], temperature, with_entropy=True
                    )
                    old_parts.append(logprobs)
                    entropy_sum += float((entropy * mask[rows]).sum())
                if config.actor.use_kl_loss:
                    with trainer.policy.disable_adapter():
                        ref, _ = trainer.logprobs(ids[rows], attention[rows], mask[rows], temperature)
                    ref_parts.append(ref)
        old = torch.cat(old_parts) if old_parts else None
        return old, (torch.cat(ref_parts) if ref_parts else None), entropy_sum

    def close(self) -> None:
        pass


def filter_episodes(
    groups: list[list[Episode]], rewards: list[list[float]], min_reward_std: float, drop_invalid: bool
) -> tuple[list[Episode], dict[str, float]]:
    """Drop groups whose reward std is below `min_reward_std` (no learning signal), then, if `drop_invalid`,
    episodes without a valid final answer or with malformed calls. Returns the kept episodes and the
    fraction of all episodes each filter dropped."""
    total = sum(len(group) for group in groups)
    varied = [
        group
        for group, group_rewards_ in zip(groups, rewards, strict=True)
        if reward_std(group_rewards_) >= min_reward_std
    ]
    after_std = [episode for group in varied for episode in group]
    kept = [episode for episode in after_std if episode.valid] if drop_invalid else after_std
    return kept, {
        "filter/low_std_dropped_frac": (total - len(after_std)) / max(total, 1),
        "filter/invalid_dropped_frac": (len(after_std) - len(kept)) / max(total, 1),
        "filter/kept_frac": len(kept) / max(total, 1),
        "filter/groups_kept": float(len(varied)),
    }


def _episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    count = len(episodes)
    rewards = [episode.reward for episode in episodes]
    mean = sum(rewards) / count
    metrics = {
        "reward/mean": mean,
        "reward/std": (sum((r - mean) ** 2 for r in rewards) / count) ** 0.5,
        "accuracy": sum(episode.correct for episode in episodes) / count,
        "valid_frac": sum(episode.valid for episode in episodes) / count,
        "malformed_frac": sum(episode.trajectory.malformed_calls() > 0 for episode in episodes) / count,
        "cost_usd": sum(episode.trajectory.cost_usd for episode in episodes) / count,
        "latency_s": sum(episode.trajectory.latency_s for episode in episodes) / count,
        "turns": sum(len(episode.policy_turns) for episode in episodes) / count,
        "episode_tokens": sum(len(episode.token_ids) for episode in episodes) / count,
    }
    calls_per_tool: Counter[str] = Counter()
    calls_per_model: Counter[str] = Counter()
    for episode in episodes:
        calls_per_tool.update(episode.trajectory.calls_per_tool())
        calls_per_model.update(episode.trajectory.calls_per_model())
    metrics.update({f"calls/tool/{name}": value / count for name, value in sorted(calls_per_tool.items())})
    metrics.update({f"calls/model/{name}": value / count for name, value in sorted(calls_per_model.items())})
    return metrics


def _split(items: list[int], parts: int) -> list[list[int]]:
    """`items` in `parts` contiguous chunks of near-equal size (empty chunks dropped)."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for index in range(parts):
        end = start + size + (index < extra)
        chunks.append(items[start:end])
        start = end
    return [chunk for chunk in chunks if chunk]
