"""Which baselines dominate each orchestrator point of a results dir (results/<world>/, see export-results).

    python scripts/check_pareto.py results/routerbench

A point (accuracy a, total cost c) is dominated by a baseline (a', c') when a' >= a and c' <= c: an equal
point counts as dominated. The oracle (it reads the gold answers) is left out. Each orchestrator preference
is checked on its own; exits 1 when a point under the accuracy preference is dominated.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def points(results: Path) -> tuple[dict[str, tuple[float, float, int]], dict[str, dict[str, tuple[float, float, int]]]]:
    """(baseline -> (accuracy, cost, n)), (orchestrator -> preference -> (accuracy, cost, n))."""
    baselines, orchestrators = {}, {}
    for metrics_path in sorted(results.glob("*/metrics.json")):
        metrics = json.loads(metrics_path.read_text())
        name = metrics_path.parent.name
        if metrics.get("kind") == "by_preference":
            by_pref = {pref: (m["accuracy"], m["cost_usd"], m["n"]) for pref, m in metrics["by_preference"].items()}
            if name.startswith("orchestrator"):
                orchestrators[name] = by_pref
            elif "none" in by_pref:
                baselines[name] = by_pref["none"]
        elif name.startswith("orchestrator"):
            orchestrators[name] = {"default": (metrics["accuracy"], metrics["cost_usd"], metrics["n"])}
        else:
            baselines[name] = (metrics["accuracy"], metrics["cost_usd"], metrics["n"])
    baselines.pop("oracle", None)
    return baselines, orchestrators


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    baselines, orchestrators = points(Path(argv[0]))
    if not orchestrators:
        print(f"{argv[0]}: no orchestrator-* dir with metrics.json", file=sys.stderr)
        return 2
    failed = False
    for name, by_pref in sorted(orchestrators.items()):
        for pref, (accuracy, cost, n) in sorted(by_pref.items()):
            same_tasks = {b: p for b, p in baselines.items() if p[2] == n}
            if not same_tasks:
                print(f"{name} --prefer {pref}: accuracy {accuracy:.4f}, cost ${cost:.4f}, n={n}: no baseline ran "
                      "on the same number of tasks; not checked")
                continue
            dominating = sorted((b for b, (a, c, _) in same_tasks.items() if a >= accuracy and c <= cost),
                                key=lambda b: -same_tasks[b][0])
            verdict = "nondominated" if not dominating else "dominated by " + ", ".join(
                f"{b} ({same_tasks[b][0]:.4f}, ${same_tasks[b][1]:.4f})" for b in dominating[:5])
            print(f"{name} --prefer {pref}: accuracy {accuracy:.4f}, cost ${cost:.4f}, n={n}, "
                  f"{len(same_tasks)} baselines on the same n: {verdict}")
            failed |= pref == "accuracy" and bool(dominating)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
