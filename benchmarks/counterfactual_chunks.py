"""Update time of the counterfactual recipe with several tasks per forward and backward pass.

With `sampler.preference_contrast`, the recipe (train/recipes/counterfactual.py) scores each task's preference
variants on their own: a pass over the task's question, a pass over each variant's remainder, one over the
packed label calls, and a backward for each. That is the least arithmetic, and the right shape for a CPU. A
GPU would rather run a few large passes than many small ones. `counterfactual.tasks_per_chunk: K` scores K whole
tasks in one batch over the system message. The questions then run once per variant, which is more
arithmetic, and the gradient stays the same (tests/test_counterfactual.py).

Both ways run in this process, on one trainer with fixed LoRA weights (the optimizer does not step) and the
same drawn batch of the pool-reader recipe, in alternating order after a warm-up of each:
- **baseline**: `tasks_per_chunk: 1`, the default;
- **batched-K**: `tasks_per_chunk: K`, for each K given.

The script prints each way's median update time and tokens/s, the ratio of medians, and the largest
difference between the two losses. On CUDA it also prints the peak memory, as a share of the card's.

`--random-init DIR` builds a model of DIR's config.json and tokenizer with random weights. Use it on a
machine that has no SmolLM2 GGUF: the step time does not depend on the weights' values.

Run: .venv/bin/python benchmarks/counterfactual_chunks.py [--tasks 8] [--per-chunk 8[,32]] [--repeats 3]
     [--device cpu|cuda] [--threads 2] [--random-init DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from typing import Any

CONFIG = "configs/train/pool-reader/routerbench.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--tasks", type=int, default=8, help="tasks in the drawn batch")
    parser.add_argument("--per-chunk", default="8", help="K, tasks per pass of the batched way (several: 8,32)")
    parser.add_argument("--repeats", type=int, default=3, help="timed updates of each way")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--random-init", default=None, help="a model dir whose config and tokenizer to use")
    args = parser.parse_args()

    trainer = build_trainer(args)
    recipe = trainer.recipe()
    draws = trainer.sampler.next_batch(args.tasks)
    ways = {"baseline": 1, **{f"batched-{k}": int(k) for k in args.per_chunk.split(",")}}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    tokens: dict[str, int] = {}
    losses: dict[str, float] = {}
    for round_index in range(args.repeats + 1):  # round 0 warms up each way (and fits the outcome model)
        order = list(ways) if round_index % 2 == 0 else list(reversed(ways))
        for way in order:
            trainer.config.counterfactual.tasks_per_chunk = ways[way]
            metrics, _ = recipe.step(draws)
            if round_index > 0:
                seconds[way].append(metrics["update_time_s"])
            tokens[way], losses[way] = metrics["train_tokens"], metrics["actor/pg_loss"]
    report(args, trainer, ways, seconds, tokens, losses)


def build_trainer(args: argparse.Namespace) -> Any:
    import torch

    from toolorchestra.train.config import load_train_config
    from toolorchestra.train.trainer import Trainer

    config = load_train_config(args.config)
    config.data.train_batch_size = args.tasks
    config.model.device = args.device
    config.trainer.torch_threads = args.threads
    config.trainer.default_local_dir = tempfile.mkdtemp(prefix="counterfactual-chunks-")
    model = tokenizer = None
    if args.random_init:
        from pathlib import Path

        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        from toolorchestra.backends.local import check_device
        from toolorchestra.errors import UserError

        if not (Path(args.random_init) / "config.json").is_file():
            raise UserError(f"--random-init {args.random_init}: expected a model dir with config.json and a tokenizer")
        check_device(args.device, "--device")

        config.model.init_checkpoint = None  # an adapter trained on other weights means nothing here
        tokenizer = AutoTokenizer.from_pretrained(args.random_init)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(args.random_init)).to(args.device)
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    trainer.optimizer.step = lambda: None  # the same weights for every update, so the losses compare
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    return trainer


def report(
    args: argparse.Namespace,
    trainer: Any,
    ways: dict[str, int],
    seconds: dict[str, list[float]],
    tokens: dict[str, int],
    losses: dict[str, float],
) -> None:
    import torch

    model_name = f"random init of {args.random_init}" if args.random_init else trainer.config.model.path
    print(
        f"{args.tasks} tasks of {args.config}, {model_name}, {args.device}, {args.threads} threads, "
        f"{args.repeats} timed updates each"
    )
    print("| way | tasks per pass | median update s | mean s | scored tokens | tokens/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for way, per_chunk in ways.items():
        median = statistics.median(seconds[way])
        print(
            f"| {way} | {per_chunk} | {median:.3f} | {statistics.mean(seconds[way]):.3f} | {tokens[way]} | "
            f"{tokens[way] / median:,.0f} |"
        )
    for way in list(ways)[1:]:
        ratio = statistics.median(seconds["baseline"]) / statistics.median(seconds[way])
        print(
            f"{way} is {ratio:.2f}x the baseline's speed (ratio of median update times); loss "
            f"{losses[way]:.6f} against {losses['baseline']:.6f}, difference "
            f"{abs(losses['baseline'] - losses[way]):.2e}"
        )
    if args.device.startswith("cuda"):
        peak, total = torch.cuda.max_memory_allocated(), torch.cuda.get_device_properties(0).total_memory
        print(f"peak GPU memory {peak / 2**30:.2f} GiB of {total / 2**30:.1f} GiB ({peak / total:.1%})")


if __name__ == "__main__":
    from toolorchestra.errors import UserError

    try:
        main()
    except UserError as error:  # a device this machine lacks, a missing model dir: one line, not a traceback
        raise SystemExit(f"error: {error}") from None
