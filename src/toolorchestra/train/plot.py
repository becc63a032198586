"""Plot a training run's curves from its metrics.jsonl.

Run: python -m toolorchestra.train.plot RUN_DIR [RUN_DIR ...] OUT.png

Several run dirs are drawn in one figure, one line each (e.g. an SFT-only run and the GRPO run started from
it); a run with an SFT warm start adds a first panel with its loss per SFT step.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

PANELS = (
    ("reward/mean", "reward (mean over episodes)"),
    ("accuracy", "accuracy"),
    ("valid_frac", "valid final answer"),
    ("cost_usd", "cost per episode (USD)"),
)


def _records(run_dir: Path) -> Iterator[dict]:
    """The records of metrics.jsonl (torn lines are skipped)."""
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


def read_steps(run_dir: Path) -> list[dict]:
    """The per-step records of metrics.jsonl (the SFT record and torn lines are skipped)."""
    return [record for record in _records(run_dir) if "step" in record]


def read_sft_losses(run_dir: Path) -> list[float]:
    """The SFT loss per step from the warm start's record (empty without one)."""
    for record in _records(run_dir):
        if record.get("stage") == "sft":
            return [float(loss) for loss in record.get("sft_losses", [])]
    return []


def plot(run_dirs: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {run_dir.name: (read_sft_losses(run_dir), read_steps(run_dir)) for run_dir in run_dirs}
    colors = {name: f"C{index}" for index, name in enumerate(runs)}  # one color per run in every panel
    if not any(losses or records for losses, records in runs.values()):
        raise SystemExit(f"{', '.join(str(d / 'metrics.jsonl') for d in run_dirs)}: no SFT or step records to plot")
    with_sft = any(losses for losses, _ in runs.values())
    panels = len(PANELS) + with_sft
    figure, axes = plt.subplots(1, panels, figsize=(4 * panels, 3.2))
    if with_sft:
        sft_axis, axes = axes[0], axes[1:]
        for name, (losses, _) in runs.items():
            if losses:
                sft_axis.plot(range(1, len(losses) + 1), losses, label=name, color=colors[name])
        sft_axis.set_title("SFT loss (policy tokens)", fontsize=10)
        sft_axis.set_xlabel("SFT step")
        sft_axis.grid(alpha=0.3)
    for axis, (key, title) in zip(axes, PANELS, strict=True):
        for name, (_, records) in runs.items():
            if records:
                axis.plot(
                    [record["step"] for record in records],
                    [record.get(key, float("nan")) for record in records],
                    marker="o",
                    label=name,
                    color=colors[name],
                )
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("GRPO step")
        axis.grid(alpha=0.3)
    if len(runs) > 1:
        handles = {
            label: handle
            for axis in figure.axes
            for handle, label in zip(*axis.get_legend_handles_labels(), strict=True)
        }
        figure.legend(list(handles.values()), list(handles), loc="lower right", fontsize=8)
    figure.suptitle(" + ".join(runs), fontsize=11)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: python -m toolorchestra.train.plot RUN_DIR [RUN_DIR ...] OUT.png")
    plot([Path(arg) for arg in sys.argv[1:-1]], Path(sys.argv[-1]))
