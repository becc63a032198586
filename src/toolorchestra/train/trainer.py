"""The GRPO trainer: sample prompts, play B x G episodes, reward, filter, update, log, checkpoint.

`Trainer(config).step()` runs one step and returns its metrics, so benchmarks can time a step; `fit()` runs
the whole schedule with a progress bar, TensorBoard and metrics.jsonl logging and periodic checkpoints.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from toolorchestra.envs.base import Env, Task
from toolorchestra.reward import batch_advantages, group_rewards, reward_std, with_cost_floor
from toolorchestra.train.checkpoint import load_trainable, latest_checkpoint, load_checkpoint, save_checkpoint
from toolorchestra.train.config import TrainConfig
from toolorchestra.train.health import check_rollouts
from toolorchestra.train.rollout import Episode, RolloutEngine
from toolorchestra.train.sampler import TaskSampler

TIMING_KEYS = ("step_time_s", "rollout_time_s", "update_time_s", "tokens_per_s", "train_tokens_per_s")


def load_env(name: str) -> Env:
    """An environment by registry name (e.g. replay:routerbench)."""
    from toolorchestra.envs import registry

    return registry.make_env(name)


def load_policy(path: str, dtype: str, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) through the local backend's resolver (SmolLM2 GGUF conversion, HF dirs)."""
    from toolorchestra.backends.local import load_hf_model

    return load_hf_model(path, dtype=dtype, device=device)


def wrap_lora(model: Any, rank: int, alpha: int, target_modules: Any, last_layers: int | None = None) -> Any:
    """The model with a LoRA adapter (on the last `last_layers` decoder layers when given)."""
    from peft import LoraConfig, get_peft_model

    layers = None
    if last_layers is not None:
        total = int(model.config.num_hidden_layers)
        layers = list(range(max(0, total - last_layers), total))
        if target_modules == "all-linear":  # peft wants explicit names with layers_to_transform
            target_modules = _decoder_linear_names(model)
    lora = LoraConfig(r=rank, lora_alpha=alpha, target_modules=target_modules, lora_dropout=0.0,
                      task_type="CAUSAL_LM", layers_to_transform=layers)
    return get_peft_model(model, lora)


def _decoder_linear_names(model: Any) -> list[str]:
    """Names (last path part) of the Linear layers inside the decoder layers, e.g. q_proj ... down_proj."""
    import torch

    output = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and module is not output and ".layers." in name})


def _init_from(reference: str, model: Any) -> None:
    """Load start weights from a training checkpoint dir, or from a shipped orchestrator (its name or an
    exported adapter dir with adapter_model.safetensors), so a run can continue from what users run."""
    from toolorchestra.backends.adapters import ADAPTER_FILES, shipped_orchestrators
    from toolorchestra.errors import ConfigError

    checkpoint = Path(reference)
    shipped = shipped_orchestrators().get(reference)
    if shipped is not None and not checkpoint.exists():
        checkpoint = shipped.folder
    adapter = checkpoint / ADAPTER_FILES[1]
    if not (checkpoint / "trainable.pt").is_file() and not adapter.is_file():
        raise ConfigError(f"model.init_checkpoint: {reference} is not a checkpoint (no trainable.pt), an exported "
                          f"adapter (no {ADAPTER_FILES[1]}) or a shipped orchestrator name "
                          f"({', '.join(sorted(shipped_orchestrators())) or 'none shipped'})")
    try:
        if adapter.is_file():
            _load_adapter_weights(adapter, model)
        else:
            load_trainable(checkpoint, model)
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"model.init_checkpoint: {reference} does not fit this model and adapter: {error}") from None


def _load_adapter_weights(adapter: Path, model: Any) -> None:
    """Copy a peft adapter file's LoRA weights into the policy's (same rank and layers); every trainable
    parameter must be covered, so a shape or layer mismatch fails instead of training half an adapter."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = load_file(str(adapter))
    result = set_peft_model_state_dict(model, weights)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"adapter has weights the policy lacks, e.g. {unexpected[:3]}")
    loaded = {key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
              for key in weights}
    uncovered = [name for name, param in model.named_parameters() if param.requires_grad and name not in loaded]
    if uncovered:
        raise ValueError(f"adapter lacks trainable weights of the policy, e.g. {uncovered[:3]}")


class Trainer:
    def __init__(self, config: TrainConfig, *, env: Env | None = None, model: Any = None, tokenizer: Any = None,
                 run_dir: Path | str | None = None, resume: bool = False) -> None:
        import torch

        self.config = config
        if config.trainer.torch_threads:
            torch.set_num_threads(config.trainer.torch_threads)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.run_dir = Path(run_dir or config.trainer.default_local_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = env if env is not None else load_env(config.data.env)
        self.tasks = self._tasks()
        if model is None:
            model, tokenizer = load_policy(config.model.path, config.model.dtype, config.model.device)
        self.tokenizer = tokenizer
        if config.model.lora_rank > 0:
            model = wrap_lora(model, config.model.lora_rank, config.model.lora_alpha, config.model.target_modules,
                              config.model.lora_layers)
        if config.model.init_checkpoint:
            _init_from(config.model.init_checkpoint, model)
        if config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.policy = model
        trainable = [param for param in self.policy.parameters() if param.requires_grad]
        optim = config.actor.optim
        self.optimizer = torch.optim.AdamW(trainable, lr=optim.lr, weight_decay=optim.weight_decay,
                                           betas=tuple(optim.betas))
        self.sampler = TaskSampler(self.env, self.tasks, config.sampler, config.seed)
        self.rollout = RolloutEngine(self.policy, tokenizer, self.env, config.rollout,
                                     max_question_chars=config.data.max_question_chars)
        self.global_step = 0
        self._counterfactual: Any = None
        self._writer: Any = None
        self.metrics_path = self.run_dir / "metrics.jsonl"
        if resume:
            self.resume()

    def _tasks(self) -> list[Task]:
        tasks = self.env.tasks(self.config.data.split)
        if self.config.data.max_tasks is not None:
            tasks = tasks[:self.config.data.max_tasks]
        if not tasks:
            from toolorchestra.errors import ConfigError

            raise ConfigError(f"data.split: env {self.config.data.env!r} has no tasks in split "
                              f"{self.config.data.split!r}")
        return tasks

    # ---- one step -------------------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """One GRPO step: rollouts, rewards, filters, policy update. Returns the step's metrics."""
        import torch

        started = time.perf_counter()
        draws = self.sampler.next_batch(self.config.data.train_batch_size)
        if self.config.algorithm.adv_estimator == "counterfactual":
            return self._counterfactual_step(draws, started)
        self.policy.eval()
        saved_before = self.rollout.prefill_stats["prefill_tokens_saved"]
        with torch.no_grad():
            episodes = self.rollout.run(draws)
        check_rollouts(episodes, self.global_step + 1)  # a broken env stops the run with its errors
        rollout_time = time.perf_counter() - started
        groups = [[episode for episode in episodes if episode.group == index] for index in range(len(draws))]
        rewards = [group_rewards([e.features() for e in group], [e.correct for e in group],
                                 with_cost_floor(draws[index].preference.weights(), self.config.algorithm.cost_floor,
                                                 self.config.algorithm.cost_scale))
                   for index, group in enumerate(groups)]
        advantages = batch_advantages(rewards, self.config.algorithm.norm_adv_by_std)
        for group, group_rewards_, group_advantages_ in zip(groups, rewards, advantages):
            for episode, reward, advantage in zip(group, group_rewards_, group_advantages_):
                episode.reward, episode.advantage = reward, advantage
        algorithm = self.config.algorithm
        kept, filter_metrics = filter_episodes(groups, rewards, algorithm.filter_min_reward_std,
                                               algorithm.filter_invalid)
        update_started = time.perf_counter()
        update_metrics = self._update(kept) if kept else {}
        update_time = time.perf_counter() - update_started
        self.global_step += 1
        metrics: dict[str, Any] = {"step": self.global_step}
        metrics.update(_episode_metrics(episodes))
        metrics.update(filter_metrics)
        metrics.update(update_metrics)
        generated = sum(sum(episode.loss_mask) for episode in episodes)
        metrics.update({
            "generated_tokens": generated,
            "prefill_tokens_saved": self.rollout.prefill_stats["prefill_tokens_saved"] - saved_before,
            "rollout_time_s": rollout_time, "update_time_s": update_time,
            "tokens_per_s": generated / rollout_time if rollout_time > 0 else 0.0,
            "step_time_s": time.perf_counter() - started,
        })
        if update_metrics.get("train_tokens"):
            metrics["train_tokens_per_s"] = update_metrics["train_tokens"] / max(update_time, 1e-9)
        self._log(metrics, episodes)
        return metrics

    def _counterfactual_step(self, draws: list[Any], started: float) -> dict[str, Any]:
        """One step of the counterfactual estimator (train/counterfactual.py): no rollouts; every label's
        recorded outcome and the exact expected reward under the policy."""
        if self._counterfactual is None:
            from toolorchestra.train.counterfactual import CounterfactualLearner

            self._counterfactual = CounterfactualLearner(self)
        self.global_step += 1
        metrics: dict[str, Any] = {"step": self.global_step, **self._counterfactual.step(draws)}
        metrics["step_time_s"] = time.perf_counter() - started
        metrics["train_tokens_per_s"] = metrics["train_tokens"] / max(metrics["update_time_s"], 1e-9)
        self._log(metrics, [])
        return metrics

    def _update(self, episodes: list[Episode]) -> dict[str, float]:
        import torch

        from toolorchestra.train.grpo import policy_loss

        actor = self.config.actor
        temperature = self.config.rollout.temperature
        batch = _pad_batch(episodes, self.rollout.pad_id, self.policy.device)
        advantages = torch.tensor([episode.advantage for episode in episodes], dtype=torch.float32,
                                  device=batch["ids"].device)
        minibatches = _split(list(range(len(episodes))), self.config.data.train_batch_size // actor.ppo_mini_batch_size)
        # With one update per batch the policy that sampled is the policy being scored, so the "old" log-probs
        # are the current ones, detached (the ratio is 1, as in verl); a separate no-grad pass would only
        # recompute them. With several updates they are recorded once before the first.
        on_policy = actor.ppo_epochs == 1 and len(minibatches) == 1
        old_logprobs, ref_logprobs, entropy_sum = self._reference_passes(batch, temperature, not on_policy)
        totals = Counter()
        self.policy.train()
        for _ in range(actor.ppo_epochs):
            for minibatch in minibatches:
                global_tokens = int(batch["mask"][minibatch].sum())
                for start in range(0, len(minibatch), actor.ppo_micro_batch_size):
                    rows = minibatch[start:start + actor.ppo_micro_batch_size]
                    logprobs, entropy = self._logprobs(batch["ids"][rows], batch["attention"][rows],
                                                       batch["mask"][rows], temperature, with_entropy=on_policy)
                    if on_policy:
                        old = logprobs.detach()
                        entropy_sum += float((entropy * batch["mask"][rows]).sum())
                    else:
                        old = old_logprobs[rows]
                    loss, stats = policy_loss(
                        logprobs, old, advantages[rows], batch["mask"][rows],
                        clip_ratio_low=actor.clip_ratio_low, clip_ratio_high=actor.clip_ratio_high,
                        clip_ratio_c=actor.clip_ratio_c,
                        ref_logprobs=ref_logprobs[rows] if ref_logprobs is not None else None,
                        kl_coef=actor.kl_loss_coef if actor.use_kl_loss else 0.0,
                        loss_agg_mode=actor.loss_agg_mode, global_tokens=max(global_tokens, 1),
                        global_sequences=len(minibatch),
                    )
                    loss.backward()
                    totals["loss"] += float(loss.detach())
                    totals["clipped"] += stats.pg_clipfrac
                    totals["kl"] += stats.kl
                    totals["ratio"] += stats.ratio
                    totals["tokens"] += stats.tokens
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    [p for p in self.policy.parameters() if p.requires_grad], actor.grad_clip)
                totals["grad_norm"] += float(grad_norm)
                totals["updates"] += 1
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
        self.policy.eval()
        tokens = max(totals["tokens"], 1)
        train_tokens = int(batch["mask"].sum())
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

    def _logprobs(self, ids: Any, attention: Any, mask: Any, temperature: float,
                  with_entropy: bool = False) -> tuple[Any, Any]:
        """Per-token log-probs of the policy tokens, over a shared prompt prefix run once when
        actor.stop_gradient_prefix is set (train/prefix.py), with the matmuls in model.compute_dtype."""
        import torch

        bfloat16 = self.config.model.compute_dtype == "bfloat16"
        with torch.autocast(device_type=self.policy.device.type, dtype=torch.bfloat16, enabled=bfloat16):
            if self.config.actor.stop_gradient_prefix:
                from toolorchestra.train.prefix import prefix_token_logprobs

                return prefix_token_logprobs(self.policy, ids, attention, mask, temperature, with_entropy)
            from toolorchestra.train.grpo import token_logprobs

            return token_logprobs(self.policy, ids, attention, temperature, with_entropy=with_entropy, mask=mask)

    def _reference_passes(self, batch: dict[str, Any], temperature: float,
                          record_old: bool) -> tuple[Any, Any, float]:
        """Log-probs of the policy before the update (and entropy) if `record_old`, and of the reference
        (adapter disabled) if the KL loss is on."""
        import torch

        micro = self.config.actor.ppo_micro_batch_size
        old_parts, ref_parts = [], []
        entropy_sum = 0.0
        with torch.no_grad():
            for start in range(0, batch["ids"].shape[0], micro):
                rows = slice(start, start + micro)
                if record_old:
                    logprobs, entropy = self._logprobs(batch["ids"][rows], batch["attention"][rows],
                                                       batch["mask"][rows], temperature, with_entropy=True)
                    old_parts.append(logprobs)
                    entropy_sum += float((entropy * batch["mask"][rows]).sum())
                if self.config.actor.use_kl_loss:
                    with self.policy.disable_adapter():
                        ref, _ = self._logprobs(batch["ids"][rows], batch["attention"][rows],
                                                batch["mask"][rows], temperature)
                    ref_parts.append(ref)
        old = torch.cat(old_parts) if old_parts else None
        return old, (torch.cat(ref_parts) if ref_parts else None), entropy_sum

    # ---- the schedule ---------------------------------------------------------------------------
    def fit(self, show_progress: bool = True) -> list[dict[str, Any]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        total = self.config.trainer.total_training_steps
        history: list[dict[str, Any]] = []
        columns = [TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[status]}")]
        with Progress(*columns, disable=not show_progress) as progress:
            bar = progress.add_task("train", total=total, completed=self.global_step, status="")
            # Redirected to a file (nohup, SLURM) the bar draws nothing until the end: write each status as a line.
            as_lines = show_progress and not progress.console.is_terminal

            def show(status: str, **fields: Any) -> None:
                progress.update(bar, status=status, **fields)
                if as_lines:
                    progress.console.print(f"train {self.global_step}/{total}: {status}", highlight=False)

            if self.global_step == 0 and self.config.sft.steps > 0:
                show("SFT warm start: building examples")
                self.warm_start(lambda step, loss: show(f"SFT warm start {step}/{self.config.sft.steps} "
                                                        f"loss {loss:.3f}"))
                if total == 0:
                    self.save()  # SFT only: its weights as checkpoint step_0
            while self.global_step < total:
                metrics = self.step()
                history.append(metrics)
                show(f"reward {metrics['reward/mean']:.3f} acc {metrics['accuracy']:.2f} "
                     f"valid {metrics['valid_frac']:.2f} {metrics['step_time_s']:.0f}s/step",
                     completed=self.global_step)
                if self.global_step % self.config.trainer.save_freq == 0 or self.global_step == total:
                    self.save()
        self.close()
        return history

    def warm_start(self, on_step: Any = None) -> dict[str, float]:
        """The optional SFT stage (docs/training.md); its metrics go to metrics.jsonl with stage=sft."""
        from toolorchestra.train.sft import run_sft

        metrics = run_sft(self, on_step)
        self._append_jsonl({"stage": "sft", **metrics})  # sft_losses: the loss of every step, the SFT curve
        writer = self.writer()
        for step, loss in enumerate(metrics["sft_losses"], start=1):
            writer.add_scalar("sft/loss", loss, step)
        writer.flush()
        return metrics

    # ---- checkpoints ----------------------------------------------------------------------------
    def save(self) -> Path:
        merged = None
        if self.config.trainer.save_merged_model:
            merged = self.merged_model()
        return save_checkpoint(self.run_dir, self.global_step, model=self.policy, optimizer=self.optimizer,
                               sampler_state=self.sampler.state_dict(),
                               config=self.config.model_dump(mode="json"), merged_model=merged,
                               tokenizer=self.tokenizer)

    def merged_model(self) -> Any:
        """A copy of the policy with the LoRA adapter merged in (the training copy is left untouched)."""
        duplicate = copy.deepcopy(self.policy)
        if hasattr(duplicate, "merge_and_unload"):
            duplicate = duplicate.merge_and_unload()
        return duplicate

    def resume(self) -> bool:
        """Continue from the latest complete checkpoint; the metrics log is cut back to its step."""
        checkpoint = latest_checkpoint(self.run_dir)
        if checkpoint is None:
            return False
        state = load_checkpoint(checkpoint, model=self.policy, optimizer=self.optimizer)
        self.global_step = int(state["step"])
        self.sampler.load_state_dict(state["sampler"])
        self._truncate_metrics(self.global_step)
        return True

    def _truncate_metrics(self, step: int) -> None:
        if not self.metrics_path.exists():
            return
        kept = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by the kill
            if record.get("stage") == "sft" or record.get("step", 0) <= step:
                kept.append(line)
        self.metrics_path.write_text("".join(line + "\n" for line in kept))

    # ---- logging --------------------------------------------------------------------------------
    def _log(self, metrics: dict[str, Any], episodes: list[Episode]) -> None:
        self._append_jsonl(metrics)
        writer = self.writer()
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and key != "step":
                writer.add_scalar(key, value, self.global_step)
        writer.flush()
        if self.config.trainer.log_trajectories:
            from toolorchestra.agent.trajectory import write_trajectory

            folder = self.run_dir / "trajectories"
            folder.mkdir(exist_ok=True)
            path = folder / f"step_{self.global_step}.jsonl"
            path.unlink(missing_ok=True)
            for episode in episodes:
                episode.trajectory.score_details.update({"reward": episode.reward, "advantage": episode.advantage})
                write_trajectory(path, episode.trajectory)

    def writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tensorboard"), purge_step=self.global_step + 1)
        return self._writer

    def _append_jsonl(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    def close(self) -> None:
        """Flush and close the TensorBoard writer (the trainer can still step; a new writer opens on demand)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def filter_episodes(groups: list[list[Episode]], rewards: list[list[float]], min_reward_std: float,
                    drop_invalid: bool) -> tuple[list[Episode], dict[str, float]]:
    """Drop groups whose reward std is below `min_reward_std` (no learning signal), then, if `drop_invalid`,
    episodes without a valid final answer or with malformed calls. Returns the kept episodes and the
    fraction of all episodes each filter dropped."""
    total = sum(len(group) for group in groups)
    varied = [group for group, group_rewards_ in zip(groups, rewards) if reward_std(group_rewards_) >= min_reward_std]
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


def _pad_batch(episodes: list[Episode], pad_id: int, device: Any) -> dict[str, Any]:
    """Right-padded ids, attention and the loss mask aligned to next-token log-probs ([B, T-1])."""
    import torch

    width = max(len(episode.token_ids) for episode in episodes)
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(episodes), width), dtype=torch.long)
    mask = torch.zeros((len(episodes), width), dtype=torch.float32)
    for row, episode in enumerate(episodes):
        length = len(episode.token_ids)
        ids[row, :length] = torch.tensor(episode.token_ids)
        attention[row, :length] = 1
        mask[row, :length] = torch.tensor(episode.loss_mask, dtype=torch.float32)
    return {"ids": ids.to(device), "attention": attention.to(device), "mask": mask[:, 1:].to(device)}


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
