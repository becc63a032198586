"""The verl training config (configs/verl/*.yaml) and its translation into verl's Hydra overrides.

Every knob that configs/train/ also has is *the same pydantic field* (copied from train/config.py's section
models with its type, default, bounds and description), so a shared name cannot drift in meaning; `KNOBS`
says which verl key carries it. Knobs the single-machine trainer has but verl cannot honour the same way
(generation_batch_size, share_prompt_prefill, filter_min_reward_std, filter_invalid, the counterfactual
estimator, norm_adv_by_std=batch) are not accepted here. verl-only settings live in the `verl` section.
Episode knobs that verl has no key for (per-turn tokens, the latency prior, the cost floor, the question cut)
go to a `toolorchestra` section of verl's config, which the agent loop reads.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, create_model, model_validator

from toolorchestra.integrations.verl import AGENT_NAME
from toolorchestra.train import config as train

AGENT_LOOP_CLASS = "toolorchestra.integrations.verl.agent_loop.OrchestratorAgentLoop"
MANAGER_CLASS = "toolorchestra.integrations.verl.agent_loop.GroupRewardAgentLoopManager"


def _subset(model: type[BaseModel], names: tuple[str, ...], name: str, **extra: Any) -> type[BaseModel]:
    """A model with `names` of `model`'s fields (the same FieldInfo: type, default, bounds, description)."""
    fields: dict[str, Any] = {
        field: (model.model_fields[field].annotation, model.model_fields[field]) for field in names
    }
    return create_model(name, __base__=train._Strict, **fields, **extra)


if TYPE_CHECKING:
    # mypy cannot see the fields of create_model's classes: each section is typed as the train section it copies
    # its fields from (those fields keep their types; the section accepts only the names listed below).
    VerlData = train.DataConfig
    VerlModel = train.ModelConfig
    VerlActor = train.ActorConfig
    VerlRollout = train.RolloutConfig
    VerlAlgorithm = train.AlgorithmConfig
    VerlTrainer = train.TrainerConfig
else:
    VerlData = _subset(
        train.DataConfig, ("env", "split", "train_batch_size", "max_tasks", "max_question_chars"), "VerlData"
    )
    VerlModel = _subset(
        train.ModelConfig, ("path", "lora_rank", "lora_alpha", "target_modules", "gradient_checkpointing"), "VerlModel"
    )
    VerlActor = _subset(
        train.ActorConfig,
        (
            "ppo_mini_batch_size",
            "ppo_micro_batch_size",
            "ppo_epochs",
            "clip_ratio_low",
            "clip_ratio_high",
            "clip_ratio_c",
            "use_kl_loss",
            "kl_loss_coef",
            "kl_loss_type",
            "loss_agg_mode",
            "entropy_coeff",
            "grad_clip",
            "optim",
        ),
        "VerlActor",
    )
    VerlRollout = _subset(
        train.RolloutConfig,
        (
            "n",
            "temperature",
            "top_p",
            "response_length",
            "max_assistant_turns",
            "max_episode_tokens",
            "orchestrator_latency",
        ),
        "VerlRollout",
    )
    VerlAlgorithm = _subset(
        train.AlgorithmConfig,
        ("cost_floor",),
        "VerlAlgorithm",
        adv_estimator=(Literal["grpo"], Field("grpo", description="verl runs the paper's GRPO")),
        norm_adv_by_std=(
            Literal["group", "none"],
            Field(
                "group",
                description="divide advantages by the reward std of the group, or not at all "
                "(verl's algorithm.norm_adv_by_std_in_grpo)",
            ),
        ),
    )
    VerlTrainer = _subset(
        train.TrainerConfig,
        ("total_training_steps", "save_freq", "default_local_dir", "experiment_name"),
        "VerlTrainer",
    )


class VerlSettings(train._Strict):
    """verl-only settings: cluster shape, rollout engine, lengths verl pads to, logging, raw overrides."""

    nnodes: int = Field(1, ge=1)
    n_gpus_per_node: int = Field(1, ge=1)
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    tensor_model_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    max_prompt_length: int = Field(2048, ge=16, description="verl pads and filters prompts to this many tokens")
    agent_num_workers: int = Field(8, ge=1, description="agent loop workers (Ray actors) playing episodes")
    param_offload: bool = False
    optimizer_offload: bool = False
    project_name: str = "toolorchestra"
    logger: list[str] = Field(default_factory=lambda: ["console"])
    total_epochs: int = Field(1000, ge=1, description="an upper bound; total_training_steps stops the run")
    test_freq: int = Field(-1, description="validate every N steps (-1: never)")
    overrides: list[str] = Field(default_factory=list, description="raw Hydra overrides appended last")


class VerlConfig(train._Strict):
    seed: int = 0  # the sampler's seed in `verl prepare`, and verl's data shuffling seed
    data: VerlData = Field(default_factory=VerlData)
    model: VerlModel = Field(default_factory=VerlModel)
    actor: VerlActor = Field(default_factory=VerlActor)
    rollout: VerlRollout = Field(default_factory=VerlRollout)
    algorithm: VerlAlgorithm = Field(default_factory=VerlAlgorithm)
    sampler: train.SamplerConfig = Field(default_factory=train.SamplerConfig)
    trainer: VerlTrainer = Field(default_factory=VerlTrainer)
    verl: VerlSettings = Field(default_factory=VerlSettings)

    @model_validator(mode="after")
    def _check(self) -> VerlConfig:
        if self.data.train_batch_size % self.actor.ppo_mini_batch_size:
            raise ValueError(
                f"actor.ppo_mini_batch_size ({self.actor.ppo_mini_batch_size}) must divide "
                f"data.train_batch_size ({self.data.train_batch_size})"
            )
        if self.sampler.preference_contrast:
            raise ValueError(
                "sampler.preference_contrast is not supported on verl: verl's batch counts prompts, "
                "and one row is one draw"
            )
        return self


# Shared knob (our dotted name) -> the verl key that carries it, with the same meaning. A value of None means
# the knob is used outside verl's config: by `verl prepare` (data, sampler) or by the agent loop and reward
# (the `toolorchestra.` keys).
KNOBS: dict[str, str | None] = {
    "seed": "data.seed",
    "data.env": None,
    "data.split": None,
    "data.max_tasks": None,
    "data.train_batch_size": "data.train_batch_size",
    "data.max_question_chars": "toolorchestra.max_question_chars",
    "model.path": "actor_rollout_ref.model.path",
    "model.lora_rank": "actor_rollout_ref.model.lora_rank",
    "model.lora_alpha": "actor_rollout_ref.model.lora_alpha",
    "model.target_modules": "actor_rollout_ref.model.target_modules",
    "model.gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "actor.ppo_mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor.ppo_micro_batch_size": "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor.ppo_epochs": "actor_rollout_ref.actor.ppo_epochs",
    "actor.clip_ratio_low": "actor_rollout_ref.actor.clip_ratio_low",
    "actor.clip_ratio_high": "actor_rollout_ref.actor.clip_ratio_high",
    "actor.clip_ratio_c": "actor_rollout_ref.actor.clip_ratio_c",
    "actor.use_kl_loss": "actor_rollout_ref.actor.use_kl_loss",
    "actor.kl_loss_coef": "actor_rollout_ref.actor.kl_loss_coef",
    "actor.kl_loss_type": "actor_rollout_ref.actor.kl_loss_type",
    "actor.loss_agg_mode": "actor_rollout_ref.actor.loss_agg_mode",
    "actor.entropy_coeff": "actor_rollout_ref.actor.entropy_coeff",
    "actor.grad_clip": "actor_rollout_ref.actor.grad_clip",
    "actor.optim.lr": "actor_rollout_ref.actor.optim.lr",
    "actor.optim.weight_decay": "actor_rollout_ref.actor.optim.weight_decay",
    "actor.optim.betas": "actor_rollout_ref.actor.optim.betas",
    "rollout.n": "actor_rollout_ref.rollout.n",
    "rollout.temperature": "actor_rollout_ref.rollout.temperature",
    "rollout.top_p": "actor_rollout_ref.rollout.top_p",
    "rollout.response_length": "toolorchestra.response_length",
    "rollout.max_assistant_turns": "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
    "rollout.max_episode_tokens": "toolorchestra.max_episode_tokens",
    "rollout.orchestrator_latency.overhead_s": "toolorchestra.orchestrator_latency.overhead_s",
    "rollout.orchestrator_latency.output_tokens_per_s": "toolorchestra.orchestrator_latency.output_tokens_per_s",
    "algorithm.adv_estimator": "algorithm.adv_estimator",
    "algorithm.norm_adv_by_std": "algorithm.norm_adv_by_std_in_grpo",
    "algorithm.cost_floor": "toolorchestra.cost_floor",
    "trainer.total_training_steps": "trainer.total_training_steps",
    "trainer.save_freq": "trainer.save_freq",
    "trainer.default_local_dir": "trainer.default_local_dir",
    "trainer.experiment_name": "trainer.experiment_name",
}


def load_verl_config(path: Path | str) -> VerlConfig:
    """Read and validate a verl training YAML; errors name the file and the field."""
    from toolorchestra.files import load_yaml_model

    return load_yaml_model(path, VerlConfig, "a mapping of config sections", empty_ok=True)


def knob_values(config: VerlConfig) -> dict[str, Any]:
    """Every shared knob's value, by our dotted name."""
    values = {}
    dumped = config.model_dump(mode="json")
    for name in KNOBS:
        value: Any = dumped
        for part in name.split("."):
            value = value[part]
        values[name] = value
    return values


def hydra_overrides(
    config: VerlConfig, data_dir: Path, *, model_path: str | None = None, env_data_dir: Path | None = None
) -> list[str]:
    """verl's `key=value` overrides for this config, reading the parquet files `verl prepare` wrote to
    `data_dir`. `model_path` replaces model.path (e.g. the HF dir our resolver converted SmolLM2 to)."""
    values = knob_values(config)
    if model_path is not None:
        values["model.path"] = model_path
    values["algorithm.norm_adv_by_std"] = values["algorithm.norm_adv_by_std"] == "group"
    settings = config.verl
    out: list[str] = []
    for name, key in KNOBS.items():
        if key is None:
            continue
        value = values[name]
        if key.startswith("toolorchestra."):
            key = "+" + key  # a section verl's schema does not have
        elif value is None:
            continue
        out.append(f"{key}={_hydra_value(value)}")
    episode = config.rollout.max_episode_tokens
    out += [
        f"data.train_files={data_dir / 'train.parquet'}",
        f"data.val_files={data_dir / 'test.parquet'}",
        "data.return_raw_chat=True",
        f"data.max_prompt_length={settings.max_prompt_length}",
        f"data.max_response_length={episode}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        "algorithm.use_kl_in_reward=False",
        f"actor_rollout_ref.actor.strategy={settings.strategy}",
        f"critic.strategy={settings.strategy}",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={_hydra_value(settings.param_offload)}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={_hydra_value(settings.optimizer_offload)}",
        f"actor_rollout_ref.rollout.name={settings.rollout_engine}",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.top_k=-1",
        f"actor_rollout_ref.rollout.prompt_length={settings.max_prompt_length}",
        f"actor_rollout_ref.rollout.response_length={episode}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={settings.tensor_model_parallel_size}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={settings.gpu_memory_utilization}",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.agent.num_workers={settings.agent_num_workers}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        f"+actor_rollout_ref.rollout.agent.agent_loop_manager_class={MANAGER_CLASS}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={config.actor.ppo_micro_batch_size}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={config.actor.ppo_micro_batch_size}",
        f"trainer.nnodes={settings.nnodes}",
        f"trainer.n_gpus_per_node={settings.n_gpus_per_node}",
        f"trainer.project_name={settings.project_name}",
        f"trainer.logger={_hydra_value(settings.logger)}",
        f"trainer.total_epochs={settings.total_epochs}",
        f"trainer.test_freq={settings.test_freq}",
        "trainer.val_before_train=False",
        "critic.enable=False",
    ]
    if env_data_dir is not None:
        out.append(f"+toolorchestra.data_dir={env_data_dir}")
    out.append(f"+toolorchestra.model_name={_hydra_value(Path(str(values['model.path'])).name or 'orchestrator')}")
    return out + list(settings.overrides)


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(item) for item in value) + "]"
    if value is None:
        return "null"
    return str(value)


def command_line(
    config: VerlConfig,
    data_dir: Path,
    *,
    python: str = "python3",
    model_path: str | None = None,
    env_data_dir: Path | None = None,
) -> list[str]:
    """The verl launch command (verl's own PPO entry point with our overrides)."""
    return [
        python,
        "-m",
        "verl.trainer.main_ppo",
        *hydra_overrides(config, data_dir, model_path=model_path, env_data_dir=env_data_dir),
    ]


def shell_command(argv: list[str]) -> str:
    """`argv` as one copy-pasteable shell line."""
    return " ".join(shlex.quote(part) for part in argv)
