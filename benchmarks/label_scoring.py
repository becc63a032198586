"""What does scoring every answer label in one pass cost? SmolLM2-135M + LoRA on replay:frames-typed prompts.

The counterfactual estimator (train/counterfactual.py) needs log p(call_l | prompt) for all 28 FRAMES labels of
each prompt, with gradients. `SharedPrefix.score` (train/prefix.py) runs the common system message once, each
prompt's remainder once, and packs the prompt's 28 label calls into one row behind its KV cache. The baseline,
measured in the same run: every (prompt, label) sequence as its own row, a full forward each (4 rows per batch).
Both do forward + backward on the same LoRA weights; the script prints wall times, the ratio, the tokens each
computes and the largest difference between the two sets of log-probabilities.

Run: .venv/bin/python benchmarks/label_scoring.py [--prompts 2] [--threads 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch
    from peft import LoraConfig, get_peft_model

    from toolorchestra.agent.prompt import initial_messages
    from toolorchestra.agent.preference import Preference
    from toolorchestra.backends.local import load_hf_model
    from toolorchestra.backends.toolcalls import ToolCall, render_tool_call
    from toolorchestra.envs.registry import make_env
    from toolorchestra.train.prefix import SharedPrefix
    from toolorchestra.train.rollout import TurnRenderer, question_text

    torch.set_num_threads(args.threads)
    env = make_env("replay:frames-typed")
    base, tokenizer = load_hf_model("smollm2-135m")
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    renderer = TurnRenderer(tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tasks = env.tasks("train")[:args.prompts]
    answer = next(tool for tool in env.tools_for(tasks[0]) if tool.name == "answer")
    tools = [answer]
    prompts = [renderer.prompt_ids(initial_messages(tools, question_text(task, None), Preference.parse("cost")),
                                   [tool.schema() for tool in tools]) for task in tasks]
    labels = list(answer.labels)
    calls = [renderer.encode(render_tool_call(ToolCall(id="c", name="answer", arguments={"model": label})))
             + [renderer.end_of_turn_id] for label in labels]

    def packed() -> torch.Tensor:
        shared = SharedPrefix(model, prompts, pad_id)
        scores = torch.stack(shared.score(list(range(len(prompts))), [calls] * len(prompts)))
        scores.sum().backward()
        shared.backward()
        return scores.detach()

    def separate(chunk: int = 4) -> torch.Tensor:
        # every (prompt, label) row in full, `chunk` rows per forward (backward per chunk bounds memory); only
        # the call positions go through the vocabulary projection, as in the packed pass
        base = model.get_base_model()
        decoder, head = base.get_decoder(), base.get_output_embeddings()
        rows = [(prompt, call) for prompt in prompts for call in calls]
        scores = []
        for start in range(0, len(rows), chunk):
            part = rows[start:start + chunk]
            width = max(len(prompt) + len(call) for prompt, call in part)
            ids = torch.full((len(part), width), pad_id)
            mask = torch.zeros((len(part), width), dtype=torch.long)
            for index, (prompt, call) in enumerate(part):
                ids[index, :len(prompt) + len(call)], mask[index, :len(prompt) + len(call)] = \
                    torch.tensor(prompt + call), 1
            hidden = decoder(input_ids=ids, attention_mask=mask)[0]
            part_scores = []
            for index, (prompt, call) in enumerate(part):
                logits = head(hidden[index, len(prompt) - 1:len(prompt) + len(call) - 1]).float()
                part_scores.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(call)[:, None]).sum())
            stacked = torch.stack(part_scores)
            stacked.sum().backward()
            scores.append(stacked.detach())
        return torch.cat(scores).view(len(prompts), len(calls))

    timings: dict[str, list[float]] = {"separate": [], "packed": []}
    results = {}
    for _ in range(args.repeats):
        for name, run in (("separate", separate), ("packed", packed)):
            model.zero_grad(set_to_none=True)
            started = time.perf_counter()
            results[name] = run()
            timings[name].append(time.perf_counter() - started)
    baseline, ours = min(timings["separate"]), min(timings["packed"])
    prompt_tokens = [len(prompt) for prompt in prompts]
    call_tokens = sum(len(call) for call in calls)
    print(f"{len(prompts)} prompts ({prompt_tokens} tokens) x {len(labels)} label calls ({call_tokens} tokens in "
          f"all), forward + backward, {args.threads} threads, best of {args.repeats}")
    print(f"  separate rows: {baseline:.2f} s  ({sum(prompt_tokens) * len(labels) + call_tokens * len(prompts)} tokens)")
    print(f"  packed:        {ours:.2f} s  (at most {sum(prompt_tokens) + call_tokens * len(prompts)} tokens)")
    print(f"  ratio separate/packed = {baseline / ours:.1f}x; "
          f"max |log p difference| = {float((results['separate'] - results['packed']).abs().max()):.2e}")


if __name__ == "__main__":
    main()
