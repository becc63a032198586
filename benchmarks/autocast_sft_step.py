"""One ToolScale SFT step (loss pass + backward) with `model.compute_dtype: bfloat16` (torch.autocast) vs the
float32 baseline, measured in the same run on the same batch: `--batch` gold episodes of one domain (a
domain's policy and tool schemas are a prefix of 3-7k tokens, run once without gradient). Prints both wall
times, their ratio and the two losses (they should agree to about 1e-3).

The speed-up needs a CPU with AVX512-BF16 (or a GPU); without it bfloat16 can be slower than float32.

Run: .venv/bin/python benchmarks/autocast_sft_step.py [--domain bank] [--batch 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="bank")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from toolorchestra.train.grpo import pad_rows
    from toolorchestra.train.recipes import sft
    from toolorchestra.train.config import TrainConfig
    from toolorchestra.train.trainer import Trainer

    torch.set_num_threads(args.threads)
    config = TrainConfig.model_validate({
        "data": {"env": f"toolscale:{args.domain}", "split": "train", "max_question_chars": None},
        "model": {"lora_rank": 16, "lora_alpha": 32, "lora_layers": 12},
        "actor": {"stop_gradient_prefix": True},
        "sft": {"targets": "gold_actions", "steps": 1, "max_tasks": args.batch, "sample": "by_subtask"},
        "recipe": "sft", "trainer": {"torch_threads": args.threads}})
    trainer = Trainer(config)
    examples = sft.build_examples(trainer)
    ids, attention, mask = pad_rows(examples[:args.batch], trainer.rollout.pad_id, trainer.policy.device)
    print(f"{args.domain}: {ids.shape[0]} episodes, {ids.shape[1]} tokens wide (padded), "
          f"{int(mask.sum())} policy tokens")
    trainer.policy.train()
    seconds, losses = {}, {}
    for dtype in ("float32", "bfloat16"):
        trainer.config.model.compute_dtype = dtype
        start = time.perf_counter()
        logprobs, _ = trainer.logprobs(ids, attention, mask, 1.0)
        loss = -(logprobs * mask).sum() / mask.sum()
        loss.backward()
        seconds[dtype], losses[dtype] = time.perf_counter() - start, float(loss)
        trainer.policy.zero_grad(set_to_none=True)
        print(f"  compute_dtype {dtype:9s} {seconds[dtype]:6.1f} s   loss {losses[dtype]:.4f}"
              + ("   (baseline)" if dtype == "float32" else ""))
    print(f"  speed-up bfloat16 / float32: {seconds['float32'] / seconds['bfloat16']:.2f}x; "
          f"loss difference {abs(losses['float32'] - losses['bfloat16']):.4f}")


if __name__ == "__main__":
    main()
