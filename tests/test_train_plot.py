"""The training-curve plot: an SFT-only run and the GRPO run started from it in one figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from toolorchestra.train.plot import plot, read_sft_losses, read_steps  # noqa: E402


def write_run(run_dir: Path, records: list[dict]) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records) + '{"step": 9')
    return run_dir


def test_sft_run_and_grpo_run_share_one_figure(tmp_path) -> None:
    sft = write_run(tmp_path / "sft", [{"stage": "sft", "sft_losses": [0.9, 0.5, 0.2]}])
    grpo = write_run(tmp_path / "grpo", [{"step": step, "reward/mean": 0.1 * step, "accuracy": 0.2, "valid_frac": 1.0,
                                          "cost_usd": 0.0} for step in (1, 2)])
    assert read_sft_losses(sft) == [0.9, 0.5, 0.2] and read_sft_losses(grpo) == []
    assert [record["step"] for record in read_steps(grpo)] == [1, 2]  # the torn last line is skipped
    out = tmp_path / "curve.png"
    plot([sft, grpo], out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_to_plot_names_the_files(tmp_path) -> None:
    empty = write_run(tmp_path / "empty", [])
    with pytest.raises(SystemExit, match="empty/metrics.jsonl"):
        plot([empty], tmp_path / "curve.png")
