"""Plot a training run's curves from its metrics.jsonl.

Run: python -m toolorchestra.train.plot RUN_DIR OUT.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PANELS = (("reward/mean", "reward (mean over episodes)"), ("accuracy", "accuracy"),
          ("valid_frac", "valid final answer"), ("cost_usd", "cost per episode (USD)"))


def read_steps(run_dir: Path) -> list[dict]:
    """The per-step records of metrics.jsonl (the SFT record and torn lines are skipped)."""
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "step" in record:
            records.append(record)
    return records


def plot(run_dir: Path, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_steps(run_dir)
    if not records:
        raise SystemExit(f"{run_dir / 'metrics.jsonl'}: no step records to plot")
    steps = [record["step"] for record in records]
    figure, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    for axis, (key, title) in zip(axes, PANELS):
        axis.plot(steps, [record.get(key, float("nan")) for record in records], marker="o")
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("GRPO step")
        axis.grid(alpha=0.3)
    figure.suptitle(f"{run_dir.name}", fontsize=11)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m toolorchestra.train.plot RUN_DIR OUT.png")
    plot(Path(sys.argv[1]), Path(sys.argv[2]))
