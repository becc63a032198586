"""One-turn routing latency of the shipped orchestrator: plain guided decoding vs jump-forward decoding.

The shipped `smollm2-135m-orchestrator` routes the first N replay:routerbench test tasks (the `make demo`
setting: `--tools answer --max-turns 1 --max-tokens 40`, greedy), one request at a time, first with
`jump_forward: false` (one forward pass per generated token, the path before jump-forward) and then with
`jump_forward: true` (backends/jump_forward.py), on one loaded model and prefix cache. Prints each path's
median and mean decision latency (the orchestrator call's own seconds), forward passes per decision, the
ratio plain/jump of the medians, and whether the two named the same label on every task. The paths run in
alternating blocks, so a neighbour's load on this shared machine falls on both.

Run: .venv/bin/python benchmarks/routing_latency.py [--tasks 100] [--prefer accuracy] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ORCHESTRATOR = "smollm2-135m-orchestrator"
BLOCK = 10  # tasks per block; the paths alternate block by block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--prefer", default="accuracy")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from toolorchestra.backends.local import LocalBackend
    from toolorchestra.bench.request import EvalRequest, build_env, orchestrator_factory

    torch.set_num_threads(args.threads)
    request = EvalRequest(
        env="replay:routerbench",
        policy=f"orchestrator:{ORCHESTRATOR}",
        out=Path(tempfile.mkdtemp()),
        prefer=args.prefer,
        max_turns=1,
        max_tokens=40,
        tools=["answer"],
    )
    env = build_env(request)
    policy: Any = orchestrator_factory(request)(ORCHESTRATOR)
    shipped: LocalBackend = policy.backend
    # both on the one-request paths this benchmark measured (not the continuous decoder, which has its own)
    backends = {
        jump: LocalBackend(shipped.spec.model_copy(update={"jump_forward": jump, "continuous_batching": False}))
        for jump in (False, True)
    }
    tasks = env.tasks("test")[: args.tasks]
    # One loaded model serves both paths: a hook counts its forward passes under the path running now.
    running = {"jump": False}
    passes = {False: 0, True: 0}

    def count_pass(*_: Any) -> None:
        passes[running["jump"]] += 1

    backends[True].loaded.model.register_forward_hook(count_pass)
    for jump in (False, True):  # warm up: weights, the grammar, the system prompt's KV in the prefix cache
        policy.backend = backends[jump]
        asyncio.run(policy.run(tasks[0], env.tools_for(tasks[0])))
    passes.update({False: 0, True: 0})
    latency: dict[bool, list[float]] = {False: [], True: []}
    labels: dict[bool, dict[str, str | None]] = {False: {}, True: {}}
    started = time.perf_counter()
    for start in range(0, len(tasks), BLOCK):
        for jump in (False, True):
            running["jump"] = jump
            policy.backend = backends[jump]
            for task in tasks[start : start + BLOCK]:
                trajectory = asyncio.run(policy.run(task, env.tools_for(task)))
                turn = next(step for step in trajectory.steps if step.kind == "orchestrator")
                latency[jump].append(turn.latency_s)
                labels[jump][task.id] = next((step.label for step in trajectory.steps if step.kind == "tool"), None)
    wall = time.perf_counter() - started
    same = sum(labels[False][task.id] == labels[True][task.id] for task in tasks)
    print(
        f"{len(tasks)} replay:routerbench test tasks, {ORCHESTRATOR}, --prefer {args.prefer}, one request at a "
        f"time, greedy, max_tokens 40, {args.threads} torch thread(s); {wall:.0f} s in all"
    )
    for jump, name in ((False, "plain decoding"), (True, "jump-forward")):
        values = latency[jump]
        median_ms, mean_ms = statistics.median(values) * 1000, statistics.mean(values) * 1000
        print(f"  {name:15s} median {median_ms:7.1f} ms  mean {mean_ms:7.1f} ms  "
              f"forward passes per decision {passes[jump] / len(tasks):.1f}")
    ratio = statistics.median(latency[False]) / statistics.median(latency[True])
    print(f"  ratio plain/jump-forward (medians): {ratio:.2f}x")
    print(f"  same label on {same}/{len(tasks)} tasks")


if __name__ == "__main__":
    main()
