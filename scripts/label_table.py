"""Accuracy, cost and label counts of every eval dir under a folder (one row each), as Markdown.

    python scripts/label_table.py out/generalization

Reads each dir's metrics.json and decisions.csv (written by `toolorchestra eval`).
"""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path


def row(run: Path) -> str | None:
    metrics_path, decisions_path = run / "metrics.json", run / "decisions.csv"
    if not metrics_path.is_file() or not decisions_path.is_file():
        return None
    metrics = json.loads(metrics_path.read_text())
    with decisions_path.open() as handle:
        labels = Counter(record["label"] or "-" for record in csv.DictReader(handle))
    top = ", ".join(f"{label} {count}" for label, count in labels.most_common())
    return (f"| {run.name} | {metrics['n']} | {metrics['accuracy']:.4f} | {metrics['cost_usd']:.4f} | "
            f"{metrics.get('errors', 0)} | {top} |")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print("| run | n | accuracy | total $ | errors | labels |")
    print("| --- | --- | --- | --- | --- | --- |")
    for run in sorted(Path(argv[0]).iterdir()):
        line = row(run) if run.is_dir() else None
        if line:
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
