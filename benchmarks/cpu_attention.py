"""Grouped-query attention on the CPU: SmolLM2-135M decoding a left-padded batch, with the KV heads handed to
torch's SDPA as they are (`local.CPU_ATTENTION`, what the local backend loads on the CPU) vs transformers' stock
"sdpa", which copies every layer's KV cache per query group at each step when a mask is passed (the baseline,
measured in the same run on the same model, prompts and greedy tokens).

The batch imitates a multi-turn FRAMES eval step: `--rows` prompts of about `--prompt-tokens` tokens with a
few dozen tokens of padding between them, `--new-tokens` greedy tokens each. Prints both wall times split into
prefill (a 1-token run) and decoding, the decoding ratio and whether the generated tokens are identical. In the
eval the prompt's shared prefix comes from the prefix cache, so decoding is most of each turn.

Run: .venv/bin/python benchmarks/cpu_attention.py [--rows 8] [--prompt-tokens 1000] [--new-tokens 40]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from toolorchestra.backends.local import load_hf_model

    torch.set_num_threads(args.threads)
    model, tokenizer = load_hf_model("smollm2-135m")
    tokenizer.padding_side = "left"
    sentence = "The committee met in the spring of that year to settle the question of the new bridge. "
    repeats = max(1, args.prompt_tokens // len(tokenizer(sentence)["input_ids"]))
    prompts = [sentence * (repeats - row % 3) + f"Question {row}: who chaired it?" for row in range(args.rows)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    implementations = {"stock sdpa (baseline)": "sdpa", "grouped (ours)": model.config._attn_implementation}
    timings: dict[tuple[str, int], list[float]] = {}
    tokens: dict[str, torch.Tensor] = {}
    for _ in range(args.repeats):
        for name, implementation in implementations.items():
            model.set_attn_implementation(implementation)
            for new_tokens in (1, args.new_tokens):  # 1 token: the prefill alone, subtracted below
                started = time.perf_counter()
                with torch.inference_mode():
                    tokens[name] = model.generate(**batch, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                                  do_sample=False, pad_token_id=tokenizer.pad_token_id)
                timings.setdefault((name, new_tokens), []).append(time.perf_counter() - started)
    print(f"{args.rows} rows x ~{batch['input_ids'].shape[1]} prompt tokens (padded), {args.new_tokens} new tokens, "
          f"{args.threads} thread(s), best of {args.repeats}")
    decode = {}
    for name in implementations:
        total, prefill = min(timings[name, args.new_tokens]), min(timings[name, 1])
        decode[name] = total - prefill
        print(f"  {name:22s} total {total:.2f} s = prefill {prefill:.2f} s + decoding {decode[name]:.2f} s")
    baseline, ours = decode.values()
    print(f"  decoding ratio stock/grouped = {baseline / ours:.2f}x; identical tokens: {torch.equal(*tokens.values())}")


if __name__ == "__main__":
    main()
