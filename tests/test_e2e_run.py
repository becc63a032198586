"""End to end: `toolorchestra run` with the real embedded SmolLM2 orchestrator and the default pool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.slow
def test_run_with_the_default_pool_prints_tokens_and_dollars_per_step(tmp_path):
    saved = tmp_path / "trajectories.jsonl"
    result = subprocess.run(
        [str(BIN / "toolorchestra"), "run", "What is 17*23? Use the python tool.", "--max-turns", "3",
         "--save", str(saved)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "turn 0" in result.stdout and "tok" in result.stdout and "$" in result.stdout
    assert "summary" in result.stdout
    record = json.loads(saved.read_text().splitlines()[-1])
    orchestrator_steps = [s for s in record["steps"] if s["kind"] == "orchestrator"]
    assert orchestrator_steps and all(s["prompt_tokens"] > 0 and s["completion_tokens"] > 0 for s in orchestrator_steps)
    assert record["stop_reason"] in ("answer", "max_turns")
    # With schema-guided decoding every orchestrator turn yields a well-formed call of a known tool.
    tool_steps = [s for s in record["steps"] if s["kind"] == "tool"]
    assert tool_steps, "the orchestrator made no tool call"
    assert all(s["name"] in ("python", "search", "expert", "answer") for s in tool_steps)
