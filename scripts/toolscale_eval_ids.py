"""The ToolScale test tasks the trained SmolLM2 runs are evaluated on (docs/results.md, "ToolScale"): two per
domain, the families rotated over the domains so that each of the seven families appears two or three times,
each the first test task of its domain/family in split order (with more per domain than families, the rotation
comes round again and takes each family's next task). Prints them comma-separated for `eval --task-ids`, or one
per line for a file (`eval --task-ids @FILE`).

    python scripts/toolscale_eval_ids.py            # 20 ids: 10 domains x 2
    python scripts/toolscale_eval_ids.py --per-domain 20 --lines > configs/eval/toolscale-test-200.txt
"""

from __future__ import annotations

import argparse
import sys

from toolorchestra.envs.registry import make_env

FAMILIES = ("lookup", "single_write", "refusal", "action_write", "multi_write", "error_first", "action_refusal")


def pick(per_domain: int) -> list[str]:
    tasks = make_env("toolscale:all").tasks("test")
    by_family: dict[tuple[str, str], list[str]] = {}
    for task in tasks:
        by_family.setdefault((task.meta["domain"], task.meta["family"]), []).append(task.id)
    domains = sorted({domain for domain, _ in by_family})
    ids, slot = [], 0
    for domain in domains:
        chosen: list[str] = []
        taken: dict[str, int] = {}  # tasks of each family taken in this domain: the next is the following one
        # the next families in the rotation; a family the domain lacks (weather has no plain writes) is skipped
        while len(chosen) < per_domain and slot < len(FAMILIES) * (len(domains) + 1) * per_domain:
            family = FAMILIES[slot % len(FAMILIES)]
            slot += 1
            pool = by_family.get((domain, family), [])
            if taken.get(family, 0) < len(pool):
                chosen.append(pool[taken.get(family, 0)])
                taken[family] = taken.get(family, 0) + 1
        ids += chosen
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-domain", type=int, default=2)
    parser.add_argument("--lines", action="store_true", help="one id per line (a file for --task-ids @FILE)")
    args = parser.parse_args()
    print(("\n" if args.lines else ",").join(pick(args.per_domain)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
