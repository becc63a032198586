"""The training config: a YAML file validated with pydantic, using verl's knob names where verl has them.

Sections mirror verl's (data, actor_rollout_ref.{model,actor,rollout}, algorithm, trainer) one level
flatter: `actor.clip_ratio_low` here is `actor_rollout_ref.actor.clip_ratio_low` in verl. docs/training.md
lists the mapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataConfig(_Strict):
    env: str = Field("replay:routerbench", description="environment name from the env registry")
    split: str = "train"
    train_batch_size: int = Field(4, ge=1, description="tasks (prompts) per step; each gets rollout.n episodes")
    max_tasks: int | None = Field(None, ge=1, description="use only the first N tasks of the split")
    max_question_chars: int | None = Field(
        None, ge=16, description="cut the question shown to the orchestrator (tools still see the full task)"
    )


class ModelConfig(_Strict):
    path: str = Field("smollm2-135m", description="'smollm2-135m' or an HF model dir")
    dtype: Literal["float32", "bfloat16"] = "float32"
    compute_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="dtype of the loss passes (SFT steps, GRPO updates and their reference passes) under "
        "torch.autocast; the weights, the adapter and the optimizer stay in `dtype`. bfloat16 is about 1.4x faster "
        "on a CPU with AVX512-BF16 (benchmarks/autocast_sft_step.py) at a loss within 1e-3 of float32",
    )
    device: str = "cpu"
    lora_rank: int = Field(16, ge=0, description="0 = full fine-tuning")
    lora_alpha: int = Field(32, ge=1)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    lora_layers: int | None = Field(
        None,
        ge=1,
        description="put the adapter on the last N decoder layers only: the backward pass then stops "
        "there (much cheaper on a CPU); None = every layer",
    )
    init_checkpoint: str | None = Field(
        None,
        description="start from this checkpoint's trainable weights (runs/NAME/checkpoints/step_N, an "
        "exported adapter dir, or a shipped orchestrator's name; same adapter shape) with a fresh optimizer, e.g. "
        "to continue under other settings; --resume takes precedence",
    )
    gradient_checkpointing: bool = False


class OptimConfig(_Strict):
    lr: float = Field(1e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)


class ActorConfig(_Strict):
    ppo_mini_batch_size: int = Field(4, ge=1, description="tasks per optimizer step (x rollout.n episodes)")
    ppo_micro_batch_size: int = Field(4, ge=1, description="episodes per forward/backward (accumulated)")
    ppo_epochs: int = Field(1, ge=1)
    clip_ratio_low: float = Field(0.2, ge=0)
    clip_ratio_high: float = Field(0.28, ge=0)
    clip_ratio_c: float = Field(3.0, gt=1.0, description="dual-clip bound for negative advantages")
    use_kl_loss: bool = False
    kl_loss_coef: float = Field(0.001, ge=0)
    kl_loss_type: Literal["low_var_kl"] = "low_var_kl"
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    entropy_coeff: float = 0.0
    grad_clip: float = Field(1.0, gt=0)
    stop_gradient_prefix: bool = Field(
        False,
        description="score each micro-batch over its rows' shared prompt prefix, run once without gradient "
        "(train/prefix.py): the same log-probs, no gradient into the prompt's keys/values; for long fixed "
        "prompts such as a ToolScale policy and its tool schemas (set ppo_micro_batch_size to rollout.n)",
    )
    optim: OptimConfig = Field(default_factory=OptimConfig)


class LatencyConfig(_Strict):
    """The orchestrator's own simulated latency (batched generation has no per-episode wall time)."""

    overhead_s: float = Field(0.05, ge=0)
    output_tokens_per_s: float = Field(50.0, gt=0)


class RolloutConfig(_Strict):
    n: int = Field(4, ge=1, description="episodes per task (the GRPO group size G)")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    response_length: int = Field(96, ge=1, description="max new tokens per orchestrator turn")
    max_assistant_turns: int = Field(3, ge=1)
    max_episode_tokens: int = Field(2048, ge=16, description="cap on prompt + all turns of one episode")
    generation_batch_size: int = Field(16, ge=1, description="episodes generated together per forward")
    share_prompt_prefill: bool = Field(
        True, description="prefill each task's prompt once and copy its KV cache to the group's n episodes"
    )
    cache_prompt_prefix: bool = Field(
        False,
        description="keep the KV cache of the prompt prefix a generation batch shares, and of each "
        "episode's earlier turns, for the rest of the step's rollouts (weights do not change during them)",
    )
    orchestrator_latency: LatencyConfig = Field(default_factory=LatencyConfig)


class AlgorithmConfig(_Strict):
    """The reward every RL recipe shapes its advantages with (grpo, counterfactual; sft reads the cost terms)."""

    norm_adv_by_std: Literal["group", "batch", "none"] = Field(
        "group",
        description="divide advantages by the reward std of the group, of the batch, or not at all; for "
        "the counterfactual regression, 'none' makes the greedy label the one with the best expected reward (a "
        "group std weights questions where almost every label is right far more)",
    )
    cost_floor: float = Field(
        0.0,
        ge=0,
        description="raise every preference's cost weight in the reward to at least this (0 = the "
        "paper's vectors): ties among correct answers then go to the cheaper model, which the accuracy "
        "preference's reward otherwise ignores",
    )
    cost_scale: float = Field(
        1.0,
        gt=0,
        description="multiply every preference's cost weight in the reward by this before cost_floor "
        "applies (1 = the paper's vectors); with a pool whose dearest label costs 100x the others, the normalized "
        "cost differences among the rest are tiny and only a larger weight makes 'low cost' prefer the cheaper",
    )


class GRPOConfig(_Strict):
    """The grpo recipe (train/recipes/grpo.py): sampled episodes, group-normalized advantages, the clipped
    policy loss of `actor` (the paper's path). Its sampling knobs are `rollout`'s."""

    filter_min_reward_std: float = Field(0.1, ge=0, description="drop groups whose reward std is below this")
    filter_invalid: bool = Field(True, description="drop episodes without a valid final answer or with malformed calls")


class EscalationConfig(_Strict):
    """counterfactual.targets escalation: consult models one at a time (train/escalation.py)."""

    max_consults: int = Field(2, ge=1, le=4, description="most expert consultations before the answer")
    top_k: int | None = Field(None, ge=2, description="score only the k best actions of each state (None: all)")
    siblings: int = Field(
        0,
        ge=0,
        description="also train on the states after the root's next best this many consultations (each "
        "model's real answer to the question: more answers to read per question)",
    )
    prior_strength: float = Field(
        20.0,
        ge=0,
        description="pseudo-questions of the parent state's estimates added at every state (shrinks "
        "the estimates of states that few train questions reach)",
    )


class CounterfactualConfig(_Strict):
    """The counterfactual recipe (train/recipes/counterfactual.py): the exact expected reward over every answer
    label of a replay world, no sampling."""

    targets: Literal["recorded", "outcome_model", "escalation", "profiles"] = Field(
        "recorded",
        description="learn from each label's recorded reward on the question ('recorded'), or from its "
        "expected reward when each model is right with the probability an outcome model fitted on the train "
        "split gives ('outcome_model': train/outcome_model.py; costs and latencies stay the recorded ones), or "
        "('escalation') consult models one at a time and learn every action's value at each state a question "
        "passes through (train/escalation.py; needs the expert tool: sampler.tool_keep_prob 1), or "
        "('profiles') each label's expected reward computed from exactly what the prompt shows: its price "
        "and its profile's accuracy on the question's task type (agent/reader.expected_rewards; needs "
        "sampler.profiles), so the prompt alone determines the target",
    )
    loss: Literal["expected", "regression", "cross_entropy"] = Field(
        "regression",
        description="'expected' maximizes the exact expected advantage sum_l q_l A_l (its gradient "
        "vanishes once q collapses onto one label); 'regression' fits the label log-probs, centered over the "
        "labels, to A / tau by least squares, whose optimum is q ∝ exp(E[A | prompt] / tau); 'cross_entropy' "
        "distills q onto softmax(A / tau) (same optimum, bounded gradient)",
    )
    tau: float = Field(0.5, gt=0, description="temperature of the target policy exp(A / tau)")
    score: Literal["call", "label"] = Field(
        "call",
        description="score each label's whole answer call ('call', exact) or only up to the first token "
        "after the label ('label': the rest of the call is the same for every label and forced by the schema "
        "under guided decoding; about half the compute)",
    )
    format_coef: float = Field(
        1.0, ge=0, description="weight of log p(some valid answer call), which teaches the format"
    )
    contrast_weight: float = Field(
        1.0,
        ge=0,
        description="regression with sampler.preference_contrast: weight of each preference's "
        "deviation from the task's mean regression error (1 = plain least squares)",
    )
    tasks_per_chunk: int = Field(
        1,
        ge=1,
        description="tasks scored in one forward and backward pass when a chunk holds whole tasks "
        "(sampler.preference_contrast, or several rows per state). 1: each task's question runs once as its own "
        "prefix, the least compute (a CPU's choice); more: that many tasks' prompts in one batched pass over "
        "the system message, so a GPU runs a few large passes instead of many small ones. The gradient is the "
        "same",
    )
    escalation: EscalationConfig = Field(default_factory=EscalationConfig)


class SamplerConfig(_Strict):
    """Per-prompt variation: which tools/labels are offered, the model behind each label, prices, preference."""

    min_labels: int = Field(2, ge=1)
    max_labels: int = Field(4, ge=1)
    price_scale: tuple[float, float] = (0.5, 2.0)
    price_draw: Literal["uniform", "log_uniform"] = Field(
        "uniform",
        description="how each offered model's price factor is drawn from price_scale: uniform, or log-uniform "
        "(as likely 10x dearer as 10x cheaper over [0.1, 10])",
    )
    shuffle_labels: bool = True
    label_style: Literal["env", "numbered", "random"] = Field(
        "env",
        description="env: keep the env's label for each model (what evaluation shows); numbered: relabel "
        "as TOOL-1..k in a random order; random: a freshly drawn random name per model and prompt. The last "
        "two make a label carry no model identity: only its price and profile columns tell models apart",
    )
    profiles: bool = Field(
        False,
        description="show every label's capability profile (accuracy per subset, decline rate, output "
        "tokens), measured on a calibration sample of the env's train split (replay worlds)",
    )
    profile_per_subset: int = Field(50, ge=1, description="calibration questions per subset for profiles")
    tool_keep_prob: float = Field(1.0, ge=0, le=1, description="chance each non-answer tool is offered")
    random_wording: bool = Field(
        True,
        description="state the preference in a randomly drawn one of its wordings (evaluation picks one "
        "per task id), so the policy learns the meaning rather than one phrase",
    )
    preference_contrast: bool = Field(
        False,
        description="draw each task once per preference kind with weight > 0 (same tools and prices, "
        "its own wording), so one step sees how the same question should be routed under every preference; "
        "data.train_batch_size then counts tasks",
    )
    preferences: dict[str, float] = Field(
        default_factory=lambda: {"accuracy": 1.0, "cost": 1.0, "latency": 0.5, "tool": 0.5},
        description="relative frequency of each preference kind: accuracy, cost, latency, tool",
    )
    hold_out_models: list[str] = Field(
        default_factory=list,
        description="models (names or env tool labels) never offered in training, to "
        "evaluate later with them in the pool (eval --hold-out-models): the unseen-models generalization test",
    )

    @model_validator(mode="after")
    def _check(self) -> SamplerConfig:
        if self.min_labels > self.max_labels:
            raise ValueError(f"min_labels ({self.min_labels}) must be <= max_labels ({self.max_labels})")
        if not 0 < self.price_scale[0] <= self.price_scale[1]:
            raise ValueError(f"price_scale must be [low, high] with 0 < low <= high; got {list(self.price_scale)}")
        unknown = set(self.preferences) - {"accuracy", "cost", "latency", "tool"}
        if unknown:
            raise ValueError(f"unknown preference kinds {sorted(unknown)}; expected accuracy, cost, latency, tool")
        if not any(weight > 0 for weight in self.preferences.values()):
            raise ValueError("preferences needs at least one kind with a positive frequency")
        return self


class SFTConfig(_Strict):
    """The sft recipe (train/recipes/sft.py), and the optional warm start of grpo and counterfactual runs:
    supervised steps on valid episodes found by trying every answer label, or on gold actions."""

    steps: int = Field(0, ge=0, description="supervised steps; under grpo/counterfactual 0 = no warm start")
    batch_size: int = Field(8, ge=1)
    lr: float = Field(1e-4, gt=0)
    max_tasks: int = Field(64, ge=1, description="train tasks used to build examples")
    targets: Literal["answer_labels", "gold_actions"] = Field(
        "answer_labels",
        description="answer_labels: the best answer call found by trying every label (replay "
        "worlds); gold_actions: whole multi-turn episodes replaying the task's gold actions as tool calls, then "
        "the gold answer (toolscale), tool outputs masked out of the loss",
    )
    sample: Literal["random", "by_subtask"] = Field(
        "random",
        description="gold_actions: which max_tasks train tasks give examples. random: a seeded sample "
        "(families in the split's proportions: toolscale is 63% lookups); by_subtask: an equal share of each "
        "task subtask (toolscale: domain/family) as far as it has tasks, seeded",
    )
    tie_break: Literal["random", "first"] = Field(
        "random",
        description="among equally rewarded correct labels, the target is a random one (first: the "
        "first in the offered order, which teaches 'pick the first label')",
    )


class TrainerConfig(_Strict):
    total_training_steps: int = Field(
        10,
        ge=1,
        description="steps of the grpo or counterfactual recipe (the sft "
        "recipe runs sft.steps and saves checkpoint step_0)",
    )
    save_freq: int = Field(5, ge=1, description="checkpoint every N steps (and at the end)")
    default_local_dir: str = Field("runs/train", description="checkpoints, metrics.jsonl, tensorboard/")
    experiment_name: str = "routerbench-smollm2"
    save_merged_model: bool = Field(True, description="also write an HF model dir (LoRA merged) per checkpoint")
    torch_threads: int | None = Field(None, ge=1)
    log_trajectories: bool = True


# Knobs that only some recipes read, by dotted name (a section name covers all its fields). Setting one under
# another recipe is an error naming it, so no knob is silently ignored. Everything else is read by every recipe.
READ_ONLY_BY: dict[str, tuple[str, ...]] = {
    "grpo": ("grpo",),
    "counterfactual": ("counterfactual",),
    # every rollout knob but the temperature is the grpo sampler's
    **{f"rollout.{name}": ("grpo",) for name in RolloutConfig.model_fields if name != "temperature"},
    "rollout.temperature": ("grpo", "counterfactual"),
    **{
        f"actor.{name}": ("grpo",)
        for name in ("ppo_mini_batch_size", "ppo_epochs", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c")
    },
    **{f"actor.{name}": ("grpo",) for name in ("use_kl_loss", "kl_loss_coef", "kl_loss_type", "loss_agg_mode")},
    "actor.entropy_coeff": ("grpo", "counterfactual"),
    "actor.ppo_micro_batch_size": ("grpo", "counterfactual"),
    "actor.optim": ("grpo", "counterfactual"),  # the sft recipe steps its own AdamW at sft.lr
    "algorithm.norm_adv_by_std": ("grpo", "counterfactual"),
    "data.train_batch_size": ("grpo", "counterfactual"),  # sft draws sft.batch_size examples per step
    "trainer.total_training_steps": ("grpo", "counterfactual"),  # sft runs sft.steps
    "trainer.save_freq": ("grpo", "counterfactual"),
}


class TrainConfig(_Strict):
    """One training run: `recipe` picks how the policy learns; the other sections are the trainer's (data,
    model, optimizer, sampler, checkpoints) or a recipe's own (grpo, counterfactual, sft)."""

    recipe: Literal["grpo", "counterfactual", "sft"] = Field(
        "grpo",
        description="grpo: sampled episodes in a live env (train/recipes/grpo.py); counterfactual: every "
        "answer label of a replay world scored exactly (train/recipes/counterfactual.py); sft: supervised steps "
        "only, saved as checkpoint step_0 (train/recipes/sft.py; under the others, sft.steps > 0 is a warm start)",
    )
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    actor: ActorConfig = Field(default_factory=ActorConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    counterfactual: CounterfactualConfig = Field(default_factory=CounterfactualConfig)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        unread = [(name, readers) for name, readers in knobs_set(self) if self.recipe not in readers]
        if unread:
            name, readers = unread[0]
            raise ValueError(
                f"{name} is read only by recipe {' or '.join(readers)}, and this config's recipe is "
                f"{self.recipe}: remove it (or set recipe: {readers[0]})"
            )
        if self.actor.use_kl_loss and self.model.lora_rank == 0:
            raise ValueError(
                "actor.use_kl_loss needs LoRA (model.lora_rank > 0): the reference policy is the model with its "
                "adapter disabled, so full fine-tuning has no reference without a second copy"
            )
        if self.recipe == "counterfactual" and self.counterfactual.targets == "profiles" and not self.sampler.profiles:
            raise ValueError(
                "counterfactual.targets profiles computes each label's target from the profile its prompt shows: "
                "set sampler.profiles: true"
            )
        if self.recipe == "sft" and self.sft.steps == 0:
            raise ValueError("recipe sft needs sft.steps > 0")
        if self.recipe == "grpo" and self.data.train_batch_size % self.actor.ppo_mini_batch_size:
            raise ValueError(
                f"actor.ppo_mini_batch_size ({self.actor.ppo_mini_batch_size}) must divide "
                f"data.train_batch_size ({self.data.train_batch_size})"
            )
        return self

    def recipe_section(self) -> dict[str, Any]:
        """The chosen recipe's own settings, as orchestrator.json records them."""
        return {"name": self.recipe, **getattr(self, self.recipe).model_dump(mode="json")}


def knobs_set(config: BaseModel, prefix: str = "") -> list[tuple[str, tuple[str, ...]]]:
    """(dotted name, recipes that read it) for every knob that only some recipes read and that is set (in the
    YAML or the dict) to other than its default. A default is harmless: a saved checkpoint's full config dump
    names every knob."""
    found = []
    for name in sorted(config.model_fields_set):
        dotted = f"{prefix}{name}"
        value = getattr(config, name)
        if dotted in READ_ONLY_BY:
            if value != type(config).model_fields[name].get_default(call_default_factory=True):
                found.append((dotted, READ_ONLY_BY[dotted]))
        elif isinstance(value, BaseModel):
            found += knobs_set(value, dotted + ".")
    return found


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overlay`'s keys on top; mappings merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve_defaults(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The YAML at `path` with its `defaults:` list applied: each listed file (relative to this one, itself
    resolved the same way) merged in order, then this file's own keys last."""
    from toolorchestra.errors import ConfigError
    from toolorchestra.files import read_yaml

    data = read_yaml(path)
    if data is None:  # an empty (or truncated-to-nothing) file would otherwise train with every default
        raise ConfigError(
            f"{path}: empty file; expected a training config (recipe, data, model, ...; see docs/training.md)"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config sections; got {type(data).__name__}")
    defaults = data.pop("defaults", [])
    if not isinstance(defaults, list) or not all(isinstance(item, str) for item in defaults):
        raise ConfigError(f"{path}: field defaults: expected a list of YAML paths relative to this file")
    merged: dict[str, Any] = {}
    for item in defaults:
        base = (path.parent / item).resolve()
        if base in seen or base == path.resolve():
            raise ConfigError(f"{path}: field defaults: {item} includes itself")
        if not base.is_file():
            raise ConfigError(f"{path}: field defaults: {item}: file not found ({base})")
        merged = merge(merged, resolve_defaults(base, seen + (path.resolve(),)))
    return merge(merged, data)


def load_train_config(path: Path | str) -> TrainConfig:
    """Read and validate a training YAML (with its `defaults:` bases); errors name the file and the field."""
    from pydantic import ValidationError

    from toolorchestra.errors import ConfigError
    from toolorchestra.files import format_validation_error

    data = resolve_defaults(Path(path))
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, exc)) from None
