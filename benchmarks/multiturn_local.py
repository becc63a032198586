"""Multi-turn ToolScale episodes on the local backend: one-request-at-a-time decoding vs the continuous decoder.

The untrained SmolLM2 orchestrator plays the same N ToolScale test tasks of one domain (8 concurrent, greedy,
`--max-turns 5 --max-tokens 128`, the eval defaults otherwise) twice on one loaded model, each run with fresh
caches:
- **old**: `continuous_batching: false`, the path before backends/continuous.py: each guided row decoded alone
  with jump-forward behind the prefix cache (its 4 most recent prompt prefixes);
- **new**: `continuous_batching: true`: rows packed into shared passes as they come and go, the domain prompt's
  KV read once per pass, each episode's own KV kept between its turns;
- with `--filed`, first also **filed**: `continuous_batching: false, jump_forward: false`, the path `eval` ran
  when the issue asking for this decoder was filed: the requests in flight batched together through
  `generate` with schema-guided logits, one forward pass per token, a prompt prefix shared only within a batch.

Prints episodes/s of both and the ratio new/old, whether every turn of every episode is token-identical, the
new run's prefill tokens computed vs taken from caches, decode tokens/s, and the physical limit of the new run
on this machine: the larger of its FLOPs (every token through the weights, every attention score and weighted
sum, the shared prefixes' own prefill included) over a measured matmul rate and its bytes read (weights once per
forward pass, plus the KV each pass attends to) over measured memory bandwidth; then the fraction of that limit
reached (limit time / wall time).

Run: .venv/bin/python benchmarks/multiturn_local.py [--domain bank] [--episodes 8] [--threads 1]   # ~10 min
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL = "smollm2-135m"


def measured_bandwidth(torch: Any) -> float:
    """Bytes per second of a large tensor copy (each byte read once and written once), best of 3."""
    source = torch.ones(64 * 2**20)  # 256 MiB of float32
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.numel() * source.element_size() / best


def measured_matmul_rate(torch: Any, hidden: int) -> float:
    """FLOP/s of a (512 x hidden) @ (hidden x 4 hidden) float32 matmul, the shape of a packed prefill, best of 3."""
    left, right = torch.randn(512, hidden), torch.randn(hidden, 4 * hidden)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(10):
            left @ right
        best = min(best, (time.perf_counter() - started) / 10)
    return 2 * 512 * hidden * 4 * hidden / best


def turns(trajectory: Any) -> list[tuple[Any, ...]]:
    """What the orchestrator wrote each turn, as compared across the two runs."""
    return [
        (step.kind, step.name, json.dumps(step.arguments, sort_keys=True), step.error, step.completion_tokens)
        for step in trajectory.steps
    ]


def play(
    model: Any, tokenizer: Any, env: Any, tasks: list[Any], continuous: bool, args: Any, jump_forward: bool = True
) -> dict[str, Any]:
    from toolorchestra.backends.local import LocalBackend, _LoadedModel
    from toolorchestra.bench.eval import evaluate
    from toolorchestra.bench.request import EvalRequest, orchestrator_factory

    request = EvalRequest(
        env=f"toolscale:{args.domain}",
        policy=f"orchestrator:{MODEL}",
        out=Path(tempfile.mkdtemp()),
        max_turns=args.turns,
        max_tokens=args.max_tokens,
        concurrency=args.episodes,
        progress=False,
    )
    policy: Any = orchestrator_factory(request)(MODEL)
    spec = policy.backend.spec.model_copy(update={"continuous_batching": continuous, "jump_forward": jump_forward})
    backend = LocalBackend(spec)
    backend._loaded = _LoadedModel(model, tokenizer)  # the same weights, fresh caches
    policy.backend = backend
    started = time.perf_counter()
    asyncio.run(evaluate(env, [policy], tasks, request.out, concurrency=args.episodes, progress=False))
    wall = time.perf_counter() - started
    from toolorchestra.agent.trajectory import read_trajectories

    trajectories = {t.task_id: t for t in read_trajectories(request.out / "trajectories.jsonl")}
    return {
        "wall": wall,
        "turns": {task_id: turns(t) for task_id, t in trajectories.items()},
        "orchestrator_turns": sum(s.kind == "orchestrator" for t in trajectories.values() for s in t.steps),
        "stats": backend.loaded.decode_stats,
        "prefix_computed": backend.loaded.prefix_cache.tokens_computed,
        "prefix_flops": backend.loaded.prefix_cache.attention_flops,
        "generated": sum(t.completion_tokens for t in trajectories.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="bank")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--filed", action="store_true", help="also run the path of the issue's filing (slow)")
    args = parser.parse_args()
    for name in ("episodes", "turns", "max_tokens", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    import torch

    from toolorchestra.backends.local import load_hf_model
    from toolorchestra.envs.registry import make_env

    torch.set_num_threads(args.threads)
    model, tokenizer = load_hf_model(MODEL)
    env = make_env(f"toolscale:{args.domain}")
    tasks = env.tasks("test")[: args.episodes]
    filed = play(model, tokenizer, env, tasks, False, args, jump_forward=False) if args.filed else None
    old = play(model, tokenizer, env, tasks, False, args)
    new = play(model, tokenizer, env, tasks, True, args)

    same = sum(old["turns"][task.id] == new["turns"][task.id] for task in tasks)
    runs = [("old", old), ("new", new)] if filed is None else [("filed", filed), ("old", old), ("new", new)]
    stats = new["stats"]
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth, rate = measured_bandwidth(torch), measured_matmul_rate(torch, model.config.hidden_size)
    computed = stats.prefill_computed + new["prefix_computed"]  # own prompt tokens + shared prefixes on a miss
    # compute: every token through the weights (2 FLOPs per parameter) and every attention score and weighted sum
    flops = 2 * params * (stats.packed_tokens + new["prefix_computed"]) + stats.attention_flops + new["prefix_flops"]
    compute_s = flops / rate
    memory_s = (stats.passes * weight_bytes + stats.kv_bytes_read) / bandwidth  # each pass reads weights + KV
    limit_s = max(compute_s, memory_s)
    from_prefix = stats.prefill_from_prefix - new["prefix_computed"]
    taken = stats.prefill_from_episode + from_prefix
    episodes = len(tasks)
    print(
        f"toolscale:{args.domain} test, {episodes} episodes x up to {args.turns} turns, {args.episodes} concurrent, "
        f"greedy, --max-tokens {args.max_tokens}, {args.threads} torch thread(s)"
    )
    for name, run in runs:
        print(
            f"  {name}: {run['wall']:7.1f} s  {episodes / run['wall']:.4f} episodes/s  "
            f"{run['orchestrator_turns']} orchestrator turns, {run['generated']} tokens generated"
        )
    print(f"  ratio new/old: {old['wall'] / new['wall']:.2f}x episodes/s")
    print(f"  token-identical episodes: {same}/{episodes}")
    if filed is not None:
        same_filed = sum(filed["turns"][task.id] == new["turns"][task.id] for task in tasks)
        print(f"  ratio new/filed: {filed['wall'] / new['wall']:.2f}x episodes/s")
        print(f"  token-identical episodes, filed and new: {same_filed}/{episodes}")
    print(
        f"  new prefill: {computed} tokens computed ({new['prefix_computed']} of them shared prefixes), {taken} "
        f"taken from caches ({from_prefix} shared prefix, {stats.prefill_from_episode} the episode's previous turn)"
    )
    print(
        f"  new decode: {stats.decoded} tokens ({stats.drafted} confirmed drafts) in {stats.passes} passes "
        f"of {stats.packed_tokens} packed tokens, "
        f"{new['generated'] / new['wall']:.1f} tokens/s generated"
    )
    print(
        f"  machine: {bandwidth / 1e9:.1f} GB/s copy bandwidth, {rate / 1e9:.1f} GFLOP/s matmul; "
        f"{params / 1e6:.0f}M params, {weight_bytes / 1e6:.0f} MB of weights"
    )
    print(
        f"  limit of the new run: {limit_s:.1f} s, the larger of compute {compute_s:.1f} s ({flops / 1e12:.2f} "
        f"TFLOP) and memory {memory_s:.1f} s ({stats.passes} passes x weights + {stats.kv_bytes_read / 1e9:.1f} GB "
        "of KV)"
    )
    print(f"  fraction of the limit reached: {limit_s / new['wall']:.2f}")


if __name__ == "__main__":
    main()
