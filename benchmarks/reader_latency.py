"""Decision latency of the reader (`run`/`serve --policy reader`) against the shipped LM orchestrator.

The first N replay:routerbench test tasks go through two policies, one request at a time, in alternating blocks
of 10 (a neighbour's load on this shared machine falls on both):
- **baseline**: the shipped `smollm2-135m-orchestrator` (the default of `run` and `serve`) in the `make demo`
  setting (`--tools answer --max-turns 1 --max-tokens 40`, greedy, jump-forward decoding);
- **reader**: the reader as `run --policy reader` builds it over a live pool (`bench.policies.live_reader`: no
  env, `--calibration replay:routerbench`), profiles from the whole train split. Every question is read cold:
  the benchmark hides the on-disk vector cache, so each decision pays one forward pass of SmolLM2 over the
  question (the calibration questions are read once, before timing).

Each decision is timed as the wall time of the whole one-call episode (the recorded answer it ends with costs no
wall time). Prints each policy's median and mean, the ratio of medians, the share of one core the reader's
decisions used, and each policy's accuracy and dollars on the same tasks under the same preference.

Run: .venv/bin/python benchmarks/reader_latency.py [--tasks 100] [--prefer accuracy] [--threads 1]
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
BLOCK = 10  # tasks per block; the policies alternate block by block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--prefer", default="accuracy")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.tasks < 1:
        parser.error("--tasks must be at least 1")

    import torch

    from toolorchestra.agent.preference import Preference
    from toolorchestra.bench.policies import ReaderPolicy
    from toolorchestra.bench.request import EvalRequest, build_env, orchestrator_factory, run_episode

    torch.set_num_threads(args.threads)
    out = Path(tempfile.mkdtemp())
    orchestrator_request = EvalRequest(
        env="replay:routerbench",
        policy=f"orchestrator:{ORCHESTRATOR}",
        out=out / "orchestrator",
        prefer=args.prefer,
        max_turns=1,
        max_tokens=40,
        tools=["answer"],
    )
    reader_request = EvalRequest(env="replay:routerbench", policy="reader", out=out / "reader", prefer=args.prefer)
    worlds = {"baseline": build_env(orchestrator_request), "reader": build_env(reader_request)}
    reader = ReaderPolicy("reader", None, Preference.parse(args.prefer), calibration=worlds["reader"])
    # Cold reads: no vector on disk is used, and the cache on disk is left as it was.
    reader.reader._read_cache = dict  # type: ignore[method-assign]
    reader.reader._write_cache = lambda cache: None  # type: ignore[method-assign]
    policies: dict[str, Any] = {"baseline": orchestrator_factory(orchestrator_request)(ORCHESTRATOR), "reader": reader}
    tasks = worlds["reader"].tasks("test")[: args.tasks]
    reader.check_pool(worlds["reader"].tools_for(tasks[0]))  # calibration questions read here, untimed
    for name, policy in policies.items():  # warm up: weights, the grammar, the system prompt's KV
        asyncio.run(run_episode(worlds[name], policy, tasks[0]))

    wall: dict[str, list[float]] = {"baseline": [], "reader": []}
    right: dict[str, int] = {"baseline": 0, "reader": 0}
    dollars: dict[str, float] = {"baseline": 0.0, "reader": 0.0}
    reader_cpu = 0.0
    started = time.perf_counter()
    for start in range(0, len(tasks), BLOCK):
        for name, policy in policies.items():
            for task in tasks[start : start + BLOCK]:
                cpu, began = time.process_time(), time.perf_counter()
                trajectory = asyncio.run(run_episode(worlds[name], policy, task))
                wall[name].append(time.perf_counter() - began)
                if name == "reader":
                    reader_cpu += time.process_time() - cpu
                right[name] += bool(trajectory.correct)
                dollars[name] += trajectory.cost_usd
    total = time.perf_counter() - started

    print(
        f"{len(tasks)} replay:routerbench test tasks, --prefer {args.prefer}, one request at a time, "
        f"{args.threads} torch thread(s); {total:.0f} s in all"
    )
    for name, label in (("baseline", f"{ORCHESTRATOR} (LM)"), ("reader", "reader (cold question reads)")):
        values = wall[name]
        print(
            f"  {label:32s} median {statistics.median(values) * 1000:7.1f} ms  mean "
            f"{statistics.mean(values) * 1000:7.1f} ms  accuracy {right[name] / len(tasks):.4f}  "
            f"${dollars[name]:.4f}"
        )
    ratio = statistics.median(wall["baseline"]) / statistics.median(wall["reader"])
    print(f"  ratio LM orchestrator / reader (medians): {ratio:.1f}x")
    print(f"  the reader's decisions used {reader_cpu / sum(wall['reader']):.2f} of one core while they ran")


if __name__ == "__main__":
    main()
