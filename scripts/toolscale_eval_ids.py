"""The ToolScale test tasks the trained SmolLM2 runs are evaluated on (docs/results.md, "ToolScale"): two per
domain, the families rotated over the domains so that each of the seven families appears two or three times,
each the first test task of its domain/family in split order. Prints them comma-separated for `eval --task-ids`.

    python scripts/toolscale_eval_ids.py            # 20 ids: 10 domains x 2
    python scripts/toolscale_eval_ids.py --per-domain 3
"""

from __future__ import annotations

import argparse
import sys

from toolorchestra.envs.registry import make_env

FAMILIES = ("lookup", "single_write", "refusal", "action_write", "multi_write", "error_first", "action_refusal")


def pick(per_domain: int) -> list[str]:
    tasks = make_env("toolscale:all").tasks("test")
    first: dict[tuple[str, str], str] = {}
    for task in tasks:
        first.setdefault((task.meta["domain"], task.meta["family"]), task.id)
    domains = sorted({domain for domain, _ in first})
    ids, slot = [], 0
    for domain in domains:
        chosen: list[str] = []
        # the next families in the rotation; a family the domain lacks (weather has no plain writes) is skipped
        while len(chosen) < per_domain and slot < len(FAMILIES) * (len(domains) + 1) * per_domain:
            family = FAMILIES[slot % len(FAMILIES)]
            slot += 1
            if (domain, family) in first and first[domain, family] not in chosen:
                chosen.append(first[domain, family])
        ids += chosen
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-domain", type=int, default=2)
    args = parser.parse_args()
    print(",".join(pick(args.per_domain)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
