"""Exact resume: 4 steps straight == 2 steps, kill -9, resume for 2 (weights and metrics), through the CLI
on the real replay:routerbench env with a tiny randomly initialized llama saved as an HF dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import save_tiny_policy  # noqa: E402

from toolorchestra.train.trainer import TIMING_KEYS  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def write_config(tmp_path: Path, model_dir: Path) -> Path:
    config = {
        "seed": 7,
        "data": {"env": "replay:routerbench", "train_batch_size": 2, "max_question_chars": 120, "max_tasks": 40},
        "model": {"path": str(model_dir), "lora_rank": 4, "lora_alpha": 8},
        "actor": {"ppo_mini_batch_size": 1, "ppo_micro_batch_size": 2, "use_kl_loss": True, "optim": {"lr": 1e-2}},
        "rollout": {"n": 2, "response_length": 12, "max_assistant_turns": 2},
        "grpo": {"filter_min_reward_std": 0.0, "filter_invalid": False},
        "sampler": {"min_labels": 2, "max_labels": 2, "tool_keep_prob": 0.5},
        "sft": {"steps": 2, "batch_size": 2, "max_tasks": 4},
        "trainer": {"total_training_steps": 4, "save_freq": 2, "torch_threads": 1, "save_merged_model": False},
    }
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def train(config: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-c", "from toolorchestra.cli.main import main; main()", "train", "--config", str(config),
               "--run-dir", str(run_dir), "--quiet", *extra]
    env = {**os.environ, "TOOLORCHESTRA_DATA": str(REPO / ".." / "shared" / "data")}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(process: subprocess.Popen) -> None:
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output


def metrics(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in record.items() if k not in TIMING_KEYS} for record in records]


def test_kill_9_and_resume_matches_a_straight_run(tmp_path, shared_data) -> None:
    config = write_config(tmp_path, save_tiny_policy(tmp_path / "tiny"))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    finish(train(config, straight))

    # Same config but told to go on for 1000 steps: killed with SIGKILL as soon as step 2 is saved.
    process = train(config, killed, "--steps", "1000")
    marker = killed / "checkpoints" / "step_2" / "state.json"
    deadline = time.monotonic() + 600
    while not marker.exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint at step 2"
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed / "checkpoints" / "step_4").exists()

    finish(train(config, killed, "--resume"))
    final_straight = torch.load(straight / "checkpoints" / "step_4" / "trainable.pt")
    final_resumed = torch.load(killed / "checkpoints" / "step_4" / "trainable.pt")
    assert final_straight.keys() == final_resumed.keys()
    for name in final_straight:
        assert torch.equal(final_straight[name], final_resumed[name]), name
    assert metrics(straight) == metrics(killed)
    assert [record.get("step") for record in metrics(killed)] == [None, 1, 2, 3, 4]  # the SFT record, then steps


def test_progress_goes_to_a_log_file_line_by_line(tmp_path, shared_data) -> None:
    # stdout is a pipe here, as under nohup or SLURM: every SFT step and training step must be a line
    config = write_config(tmp_path, save_tiny_policy(tmp_path / "tiny"))
    command = [sys.executable, "-c", "from toolorchestra.cli.main import main; main()", "train", "--config",
               str(config), "--run-dir", str(tmp_path / "run"), "--steps", "1"]
    env = {**os.environ, "TOOLORCHESTRA_DATA": str(REPO / ".." / "shared" / "data")}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("train 0/1: SFT warm start 2/2 loss ") for line in lines), done.stdout
    assert any(line.startswith("train 1/1: reward ") and "s/step" in line for line in lines), done.stdout
