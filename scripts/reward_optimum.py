"""Which label the reward makes optimal, per RouterBench subset and preference: the mean over a split's questions
of each label's reward minus the question's mean reward (what the counterfactual regression's greedy label
converges to), computed with toolorchestra.reward from the raw CSVs' recorded grades and dollar costs.

    python scripts/reward_optimum.py [--split train] [--floors 0,0.05,0.1,0.2] [--std none|group]

Latency is left out (the accuracy and cost preferences do not weigh it). Reads ../shared/data/routerbench (or
$TOOLORCHESTRA_DATA/routerbench); rows with an empty grade or cost are skipped, as the replay world skips them.
"""

from __future__ import annotations

import argparse
import csv
import os
from pathlib import Path

from toolorchestra.envs.replay.routerbench import LABELS, SUBSETS
from toolorchestra.reward import group_advantages, group_rewards, with_cost_floor

PREFERENCES = {"accuracy": {"accuracy": 1.0}, "cost": {"accuracy": 1.0, "cost": 1.0}}


def load(split: str) -> dict[str, list[tuple[list[bool], list[float]]]]:
    root = Path(os.environ.get("TOOLORCHESTRA_DATA", "../shared/data")) / "routerbench"
    models = list(LABELS)
    rows: dict[str, list[tuple[list[bool], list[float]]]] = {}
    for subset in SUBSETS:
        with open(root / f"{subset}_{split}.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                cells = [row[m] for m in models] + [row[f"{m}|total_cost"] for m in models]
                if any(cell == "" for cell in cells):
                    continue
                rows.setdefault(subset, []).append(([float(row[m]) > 0.5 for m in models],
                                                    [float(row[f"{m}|total_cost"]) for m in models]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="train")
    parser.add_argument("--floors", default="0,0.05,0.1,0.2")
    parser.add_argument("--std", default="none", choices=["none", "group"])
    args = parser.parse_args()
    data, labels = load(args.split), list(LABELS.values())
    for floor in (float(value) for value in args.floors.split(",")):
        print(f"cost_floor {floor}")
        for name, preference in PREFERENCES.items():
            weights = with_cost_floor(preference, floor)
            for subset, questions in data.items():
                totals = [0.0] * len(labels)
                for correct, cost in questions:
                    features = [{"accuracy": float(ok), "cost": dollars} for ok, dollars in zip(correct, cost)]
                    advantages = group_advantages(group_rewards(features, correct, weights), args.std)
                    totals = [total + value for total, value in zip(totals, advantages)]
                ranked = sorted(zip(totals, labels), reverse=True)[:3]
                print(f"  {name:8s} {subset:13s} " + "  ".join(f"{label} {total / len(questions):+.3f}"
                                                          for total, label in ranked))


if __name__ == "__main__":
    main()
