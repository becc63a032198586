"""Offline end to end: HLE and FRAMES questions with the embedded SmolLM2 as orchestrator, every expert and the
judge, all behind a real `toolorchestra serve` on 127.0.0.1, with BM25 over the shared Wikipedia passages and
code run in our sandbox. Scores are near 0; what is checked is the pipeline: every question ends scored, each of
the three tools runs somewhere in the run, the judge's verdicts and costs are reported by role, and the bought
answers form a replay world.

Sized for `make test`: 3 short HLE questions, on which SmolLM2 (greedy) opens with search, enhance_reasoning and
answer respectively, and 1 FRAMES question: 47 s on 2 CPU cores (`pytest --durations`, 2026-11-26). `make
test-live` (TOOLORCHESTRA_LIVE_FULL=1) runs all 30 HLE questions and 5 FRAMES questions: 4 min 14 s. SmolLM2 is
prefilled at ~100 tokens/s here, a question costs ~2,000 prompt tokens over its orchestrator turns, tool calls
and judge, and its calls' forced text is decoded by jump-forward (backends/jump_forward.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
FULL = bool(os.environ.get("TOOLORCHESTRA_LIVE_FULL"))
SHORT_HLE = "6721a42269600ecb23a3e623,670e9b885d472377f6c572a2,66ecd3c6e8b95a8f971fb485"  # 1st, 7th, 24th lines
HLE_TASKS = ("--limit", "30") if FULL else ("--task-ids", SHORT_HLE)
HLE_QUESTIONS, FRAMES_QUESTIONS = (30, 5) if FULL else (3, 1)


def _cli(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolorchestra.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def served_smollm2(tmp_path_factory):
    """`toolorchestra serve` in a subprocess, serving the embedded SmolLM2 (schema-guided tool calls)."""
    folder = tmp_path_factory.mktemp("serve")
    config = folder / "serve.yaml"
    config.write_text("orchestrator: smollm2-135m\n"
                      "models: [{name: smollm2-135m, backend: {type: local, path: smollm2-135m, max_batch_size: 8}}]\n"
                      "tools: []\n")
    process = subprocess.Popen([sys.executable, "-m", "toolorchestra.cli.main", "serve", "--config", str(config),
                                "--port", "0", "--request-timeout", "1200"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        banner = process.stdout.readline()
        assert " at http://" in banner, process.stderr.read() if process.poll() is not None else banner
        yield banner.split(" at ")[1].split()[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def _client_catalog(folder: Path, base_url: str, shared: Path) -> Path:
    """Every model of the pool is the served SmolLM2, reached through the OpenAI backend."""
    corpus = shared / "corpus" / "2wikimultihopqa_corpus.json"
    config = folder / "pool.yaml"
    config.write_text(f"""
orchestrator: smollm2-135m
judge: smollm2-135m
models:
  - {{name: smollm2-135m, backend: {{type: openai, base_url: "{base_url}", model: smollm2-135m, timeout_s: 1200}}}}
tools:
  - {{name: search, type: paper_search, models: {{search-1: smollm2-135m}},
      options: {{corpus: "{corpus}", top_k: 2, max_tokens: 16, context_tokens: 600, label_enum: true}}}}
  - {{name: enhance_reasoning, type: paper_reasoning, models: {{reasoner-1: smollm2-135m}},
      options: {{max_tokens: 48, context_tokens: 600, timeout_s: 10, label_enum: true}}}}
  - {{name: answer, type: paper_answer, models: {{answer-1: smollm2-135m}},
      options: {{max_tokens: 24, context_tokens: 600, label_enum: true}}}}
""")
    return config


def _run(env: str, out: Path, config: Path, *extra: str) -> dict:
    result = _cli("eval", "--env", env, "--config", str(config), "--out", str(out), "--no-progress",
                  "--max-turns", "2", "--max-tokens", "48", "--concurrency", "8", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())


def test_hle_and_frames_live_offline_behind_serve(served_smollm2, shared_data, tmp_path):
    config = _client_catalog(tmp_path, served_smollm2, shared_data)
    hle = _run("hle", tmp_path / "hle", config, *HLE_TASKS)
    frames = _run("frames-live", tmp_path / "frames", config, "--limit", str(FRAMES_QUESTIONS))

    assert (hle["n"], hle["errors"], frames["n"], frames["errors"]) == (HLE_QUESTIONS, 0, FRAMES_QUESTIONS, 0)
    calls = {tool: hle["calls_per_tool"].get(tool, 0) + frames["calls_per_tool"].get(tool, 0)
             for tool in ("search", "enhance_reasoning", "answer")}
    assert all(calls.values()), calls
    assert frames["calls_per_tool"].get("search", 0) > 0  # BM25 over the shared corpus ran on FRAMES
    for metrics in (hle, frames):
        answered = metrics["n"] - metrics["no_answer"]
        assert answered > 0  # the last turn offers only `answer`
        assert sum(metrics["judge"]["verdicts"].values()) == metrics["n"]
        assert metrics["by_role"]["orchestrator"]["calls"] >= metrics["n"]
        assert metrics["by_role"]["tool:answer"]["calls"] >= answered
        assert metrics["stop_reasons"].get("answer", 0) == answered
        llm_verdicts = sum(count for key, count in metrics["judge"]["verdicts"].items() if key.startswith("llm_judge"))
        assert metrics["by_role"].get("judge", {}).get("calls", 0) == llm_verdicts == metrics["judge"]["llm_calls"]
    trajectories = [json.loads(line) for line in (tmp_path / "hle" / "trajectories.jsonl").read_text().splitlines()]
    assert all(t["messages"][0] == {"role": "system", "content": "You are good at using tools."} for t in trajectories)
    if hle["n"] - hle["no_answer"]:
        check = _cli("replay", "check", str(tmp_path / "hle" / "replay"), timeout=300)
        assert check.returncode == 0, check.stderr[-2000:]
