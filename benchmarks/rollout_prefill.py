"""Does sharing the prompt prefill across a GRPO group pay? SmolLM2-135M on replay:routerbench train prompts.

The same B prompts x G episodes, first turn only, sampled with the same seed: once with each prompt's KV cache
computed once and repeated G times (`rollout.share_prompt_prefill: true`), once with every episode prefilling its
own copy (the baseline, measured in the same run). Prints wall times, prefill tokens and the speed-up ratio.

Run: .venv/bin/python benchmarks/rollout_prefill.py [--prompts 2] [--group 4] [--new-tokens 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from toolorchestra.backends.local import load_hf_model
    from toolorchestra.envs.registry import make_env
    from toolorchestra.train.config import RolloutConfig, SamplerConfig
    from toolorchestra.train.rollout import RolloutEngine
    from toolorchestra.train.sampler import TaskSampler

    torch.set_num_threads(args.threads)
    env = make_env("replay:routerbench")
    model, tokenizer = load_hf_model("smollm2-135m")
    sampler = TaskSampler(env, env.tasks("train"), SamplerConfig(min_labels=2, max_labels=3, tool_keep_prob=0.0), 0)
    draws = sampler.next_batch(args.prompts)
    timings: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, list] = {}
    prefill: dict[bool, tuple[int, int]] = {}
    for _ in range(args.repeats):
        for share in (False, True):
            config = RolloutConfig(n=args.group, response_length=args.new_tokens, max_assistant_turns=1,
                                   generation_batch_size=args.prompts * args.group, share_prompt_prefill=share)
            engine = RolloutEngine(model, tokenizer, env, config, max_question_chars=200)
            episodes = engine.start(draws)
            torch.manual_seed(0)
            started = time.perf_counter()
            generated = engine.generate(episodes, share_prefill=share)
            timings[share].append(time.perf_counter() - started)
            outputs[share] = generated
            computed = engine.prefill_stats["prefill_tokens"] - engine.prefill_stats["prefill_tokens_saved"]
            prefill[share] = (computed, engine.prefill_stats["prefill_tokens_saved"])
            engine.close()
    prompt_tokens = [episode.prompt_length for episode in engine.start(draws)][::args.group]
    baseline, shared = min(timings[False]), min(timings[True])
    print(f"{args.prompts} prompts x {args.group} episodes, prompt tokens {prompt_tokens}, "
          f"{args.new_tokens} new tokens, {args.threads} threads, best of {args.repeats}")
    print(f"  separate prefill: {baseline:.2f} s  (prefill tokens computed {prefill[False][0]})")
    print(f"  shared prefill:   {shared:.2f} s  (prefill tokens computed {prefill[True][0]}, "
          f"saved {prefill[True][1]})")
    print(f"  speed-up: {baseline / shared:.2f}x; same samples: {outputs[True] == outputs[False]}")


if __name__ == "__main__":
    main()
