"""Re-run every committed replay:frames baseline (results/frames/*/metrics.json) and compare its metrics.

The check behind "replay:frames figures unchanged": each saved metrics.json names its policy, split and
seed; the policy is run again over the current `replay:frames` env (in-process, episodes are replayed so
this takes a minute or two) and every metric is compared with the saved one. Exit 1 on any difference.

    PYTHONPATH=src python scripts/check_frames_baselines.py [--results results/frames] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

HEADER = {"env", "split", "policy", "seed", "limit", "spec", "kind", "per_subtask", "judge", "threshold"}


def rerun(env, spec: str, split: str, seed: int, limit: int | None, out: Path) -> dict:
    from toolorchestra.bench.eval import evaluate
    from toolorchestra.bench.policies import parse_policy

    policies = parse_policy(spec, env, seed=seed)
    tasks = env.tasks(split)[:limit]
    return asyncio.run(evaluate(env, policies, tasks, out, progress=False))


def differences(saved: dict, fresh: dict) -> list[str]:
    keys = (set(saved) | set(fresh)) - HEADER
    return [f"{key}: saved {saved.get(key)!r} != now {fresh.get(key)!r}" for key in sorted(keys)
            if saved.get(key) != fresh.get(key)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/frames"))
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    from toolorchestra.envs.registry import make_env

    env = make_env("replay:frames", args.data_dir)
    failed = 0
    paths = sorted(args.results.glob("*/metrics.json"))
    with tempfile.TemporaryDirectory() as scratch:
        for index, path in enumerate(paths):
            saved = json.loads(path.read_text())
            fresh = rerun(env, saved["policy"], saved["split"], saved["seed"], saved["limit"],
                          Path(scratch) / str(index))
            diff = differences(saved, fresh)
            failed += bool(diff)
            status = "DIFF" if diff else "same"
            print(f"{status} {path.parent.name}: {saved['policy']} {saved['correct']}/{saved['n']} "
                  f"acc {saved['accuracy']:.4f} cost {saved['cost_usd']:.6f}", flush=True)
            for line in diff[:5]:
                print(f"    {line}")
    print(f"{len(paths) - failed} of {len(paths)} baselines identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
