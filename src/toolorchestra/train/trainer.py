"""The trainer: it owns the model, optimizer, sampler, checkpoints and logging; a recipe (train/recipes/)
says how one step learns.

`Trainer(config).step()` draws a batch, hands it to the config's recipe (grpo or counterfactual) and logs the
step's metrics, so benchmarks can time a step; `fit()` runs the whole schedule (the sft recipe or warm start
first) with a progress bar, TensorBoard and metrics.jsonl logging and periodic checkpoints. Recipes use the
trainer only through its public interface: `config`, `env`, `tasks`, `policy`, `rollout`, `renderer`,
`global_step`, `logprobs()`, `trainable_parameters()`, `optimizer_step()`.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.registry import make_env
from toolorchestra.errors import ConfigError
from toolorchestra.memory import return_freed_memory
from toolorchestra.train.checkpoint import latest_checkpoint, load_checkpoint, load_trainable, save_checkpoint
from toolorchestra.train.config import ModelConfig, TrainConfig
from toolorchestra.train.rollout import Episode, RolloutEngine
from toolorchestra.train.sampler import TaskSampler

RECIPE_FILE = "recipe.json"
TIMING_KEYS = ("step_time_s", "rollout_time_s", "update_time_s", "tokens_per_s", "train_tokens_per_s")


def recipe_record(config: TrainConfig, step: int) -> dict[str, Any]:
    """The recipe, its settings, the data and the code commit behind a checkpoint (RECIPE_FILE)."""
    import subprocess

    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None  # an installed package outside a git checkout
    return {
        "recipe": config.recipe_section(),
        "warm_start": config.sft.model_dump(mode="json") if config.recipe != "sft" and config.sft.steps > 0 else None,
        "data": config.data.model_dump(mode="json"),
        "steps": step,
        "git_commit": commit,
        "config": config.model_dump(mode="json"),
    }


def show_train_profiles(env: Env, per_subset: int) -> None:
    """sampler.profiles: every label's capability profile, measured on the train split as evaluation measures
    it (eval --profiles train), in every training prompt."""
    from toolorchestra.envs.replay.base import ReplayEnv
    from toolorchestra.envs.replay.profiles import measure_profiles

    if not isinstance(env, ReplayEnv):
        raise ConfigError(f"sampler.profiles: profiles are measured on replay worlds; {env.name} is not one")
    env.show_profiles(measure_profiles(env, "train", per_subset))


def wrap_lora(model: Any, settings: ModelConfig) -> Any:
    """The model with the LoRA adapter of `settings` (on the last `lora_layers` decoder layers when given)."""
    from peft import LoraConfig, get_peft_model

    layers, target_modules = None, settings.target_modules
    if settings.lora_layers is not None:
        total = int(model.config.num_hidden_layers)
        layers = list(range(max(0, total - settings.lora_layers), total))
        if target_modules == "all-linear":  # peft wants explicit names with layers_to_transform
            target_modules = _decoder_linear_names(model)
    lora = LoraConfig(
        r=settings.lora_rank,
        lora_alpha=settings.lora_alpha,
        target_modules=target_modules,
        lora_dropout=0.0,
        task_type="CAUSAL_LM",
        layers_to_transform=layers,
    )
    return get_peft_model(model, lora)


def _decoder_linear_names(model: Any) -> list[str]:
    """Names (last path part) of the Linear layers inside the decoder layers, e.g. q_proj ... down_proj."""
    import torch

    output = model.get_output_embeddings()
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and module is not output and ".layers." in name
        }
    )


def _init_from(reference: str, model: Any) -> None:
    """Load start weights from a training checkpoint dir, or from a shipped orchestrator (its name or an
    exported adapter dir with adapter_model.safetensors), so a run can continue from what users run."""
    from toolorchestra.backends.adapters import ADAPTER_FILES, shipped_orchestrators

    checkpoint = Path(reference)
    shipped = shipped_orchestrators().get(reference)
    if shipped is not None and not checkpoint.exists():
        checkpoint = shipped.folder
    adapter = checkpoint / ADAPTER_FILES[1]
    if not (checkpoint / "trainable.pt").is_file() and not adapter.is_file():
        raise ConfigError(
            f"model.init_checkpoint: {reference} is not a checkpoint (no trainable.pt), an exported "
            f"adapter (no {ADAPTER_FILES[1]}) or a shipped orchestrator name "
            f"({', '.join(sorted(shipped_orchestrators())) or 'none shipped'})"
        )
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
    loaded = {
        key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        for key in weights
    }
    uncovered = [name for name, param in model.named_parameters() if param.requires_grad and name not in loaded]
    if uncovered:
        raise ValueError(f"adapter lacks trainable weights of the policy, e.g. {uncovered[:3]}")


class Trainer:
    def __init__(
        self,
        config: TrainConfig,
        *,
        env: Env | None = None,
        model: Any = None,
        tokenizer: Any = None,
        run_dir: Path | str | None = None,
        resume: bool = False,
    ) -> None:
        import torch

        self.config = config
        if model is None:  # before the env and profiles load, so a GPU config on a CPU machine fails at once
            from toolorchestra.backends.local import check_device

            check_device(config.model.device, "model.device")
        if config.trainer.torch_threads:
            torch.set_num_threads(config.trainer.torch_threads)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.run_dir = Path(run_dir or config.trainer.default_local_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = env if env is not None else make_env(config.data.env)
        if config.sampler.profiles:
            show_train_profiles(self.env, config.sampler.profile_per_subset)
        self.tasks = self._tasks()
        if model is None:  # through the local backend's resolver (SmolLM2 GGUF conversion, HF dirs)
            from toolorchestra.backends.local import load_hf_model

            model, tokenizer = load_hf_model(config.model.path, dtype=config.model.dtype, device=config.model.device)
        self.tokenizer = tokenizer
        if config.model.lora_rank > 0:
            model = wrap_lora(model, config.model)
        if config.model.init_checkpoint:
            _init_from(config.model.init_checkpoint, model)
        if config.model.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        self.policy = model
        optim = config.actor.optim
        self.optimizer = torch.optim.AdamW(
            self.trainable_parameters(), lr=optim.lr, weight_decay=optim.weight_decay, betas=optim.betas
        )
        self.sampler = TaskSampler(self.env, self.tasks, config.sampler, config.seed)
        self.rollout = RolloutEngine(
            self.policy, tokenizer, self.env, config.rollout, max_question_chars=config.data.max_question_chars
        )
        self.global_step = 0
        self._recipe: Any = None
        self._writer: Any = None
        self.metrics_path = self.run_dir / "metrics.jsonl"
        if resume:
            self.resume()

    def _tasks(self) -> list[Task]:
        tasks = self.env.tasks(self.config.data.split)
        if self.config.data.max_tasks is not None:
            tasks = tasks[: self.config.data.max_tasks]
        if not tasks:
            raise ConfigError(
                f"data.split: env {self.config.data.env!r} has no tasks in split {self.config.data.split!r}"
            )
        return tasks

    # ---- the public interface recipes use ------------------------------------------------------
    @property
    def renderer(self) -> Any:
        """Token-in/token-out chat rendering of the policy (prompts, calls, turns)."""
        return self.rollout.renderer

    def trainable_parameters(self) -> list[Any]:
        return [param for param in self.policy.parameters() if param.requires_grad]

    def logprobs(
        self, ids: Any, attention: Any, mask: Any, temperature: float, with_entropy: bool = False
    ) -> tuple[Any, Any]:
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

    def optimizer_step(self, optimizer: Any = None) -> float:
        """Clip the accumulated gradient at actor.grad_clip, step `optimizer` (default: the run's AdamW) and
        clear the gradient; returns the gradient norm before clipping."""
        import torch

        grad_norm = torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), self.config.actor.grad_clip)
        optimizer = optimizer if optimizer is not None else self.optimizer
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return_freed_memory()
        return float(grad_norm)

    # ---- one step -------------------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        """One step of the config's recipe on a drawn batch. Returns the step's metrics."""
        started = time.perf_counter()
        draws = self.sampler.next_batch(self.config.data.train_batch_size)
        recipe_metrics, episodes = self.recipe().step(draws)
        self.global_step += 1
        metrics: dict[str, Any] = {
            "step": self.global_step,
            **recipe_metrics,
            "step_time_s": time.perf_counter() - started,
        }
        self.log(metrics, episodes)
        return metrics

    def recipe(self) -> Any:
        """The config's step recipe, made at the first step (an outcome model is fitted then)."""
        if self._recipe is None:
            from toolorchestra.train.recipes import make_recipe

            self._recipe = make_recipe(self)
        return self._recipe

    # ---- the schedule ---------------------------------------------------------------------------
    def fit(self, show_progress: bool = True) -> list[dict[str, Any]]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        total = self.config.trainer.total_training_steps
        history: list[dict[str, Any]] = []
        columns = [
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
        ]
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
                self.warm_start(
                    lambda step, loss: show(f"SFT warm start {step}/{self.config.sft.steps} loss {loss:.3f}")
                )
            if self.config.recipe == "sft":
                if self.global_step == 0:
                    self.save()  # its weights as checkpoint step_0, a start for model.init_checkpoint
                self.close()
                return history
            while self.global_step < total:
                metrics = self.step()
                history.append(metrics)
                show(
                    f"reward {metrics['reward/mean']:.3f} acc {metrics['accuracy']:.2f} "
                    f"valid {metrics['valid_frac']:.2f} {metrics['step_time_s']:.0f}s/step",
                    completed=self.global_step,
                )
                if self.global_step % self.config.trainer.save_freq == 0 or self.global_step == total:
                    self.save()
        self.close()
        return history

    def warm_start(self, on_step: Any = None) -> dict[str, float]:
        """The sft recipe, or the warm start of another (docs/training.md); its metrics go to metrics.jsonl
        with stage=sft."""
        from toolorchestra.train.recipes.sft import run_sft

        metrics = run_sft(self, on_step)
        self.append_jsonl({"stage": "sft", **metrics})  # sft_losses: the loss of every step, the SFT curve
        writer = self.writer()
        for step, loss in enumerate(metrics["sft_losses"], start=1):
            writer.add_scalar("sft/loss", loss, step)
        writer.flush()
        return metrics

    # ---- checkpoints ----------------------------------------------------------------------------
    def save(self) -> Path:
        checkpoint = save_checkpoint(
            self.run_dir,
            self.global_step,
            model=self.policy,
            optimizer=self.optimizer,
            sampler_state=self.sampler.state_dict(),
            config=self.config.model_dump(mode="json"),
            merged_model=self.merged_model() if self.config.trainer.save_merged_model else None,
            tokenizer=self.tokenizer,
        )
        # what export-orchestrator copies into orchestrator.json: how these weights were trained
        (checkpoint / RECIPE_FILE).write_text(json.dumps(recipe_record(self.config, self.global_step), indent=2) + "\n")
        return checkpoint

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
    def log(self, metrics: dict[str, Any], episodes: list[Episode]) -> None:
        """One step's metrics to metrics.jsonl and TensorBoard, its episodes to trajectories/step_N.jsonl."""
        self.append_jsonl(metrics)
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

    def append_jsonl(self, record: dict[str, Any]) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    def close(self) -> None:
        """Flush and close the TensorBoard writer (the trainer can still step; a new writer opens on demand)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
