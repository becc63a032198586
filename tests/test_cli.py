"""CLI start-up: cheap import, fast help, clear errors for user mistakes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def test_import_does_not_load_torch():
    code = "import sys, toolorchestra, toolorchestra.cli.main; print('torch' in sys.modules, 'transformers' in sys.modules)"
    assert run(sys.executable, "-c", code).stdout.strip() == "False False"


def test_help_lists_commands():
    result = run(str(BIN / "toolorchestra"), "--help")
    assert result.returncode == 0
    for command in ("run", "eval", "report", "train"):
        assert command in result.stdout


def test_bad_config_is_one_clear_message(tmp_path):
    config = tmp_path / "pool.yaml"
    config.write_text("orchestrator: a\nmodels: [{name: a, backend: {type: openai, model: m}}]\ntools: []\n")
    result = run(str(BIN / "toolorchestra"), "run", "hi", "--config", str(config))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"{config}: invalid configuration" in result.stderr
    assert "models.0.backend.openai.base_url: Field required" in result.stderr
    debug = run(str(BIN / "toolorchestra"), "--debug", "run", "hi", "--config", str(config))
    assert "Traceback" in debug.stderr


def test_bad_preference_is_reported(tmp_path):
    result = run(str(BIN / "toolorchestra"), "run", "hi", "--prefer", "speed", "--corpus", str(tmp_path / "none.json"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--corpus" in result.stderr and "file not found" in result.stderr


def test_a_piped_results_table_keeps_every_column(tmp_path):
    """Printed to a pipe (CI logs, `| tee`), rich would default to 80 columns and cut the eval table's headers
    and figures to ellipses; the CLI prints it wide enough instead."""
    import os

    from conftest import SHARED_DATA

    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    result = subprocess.run(
        [str(BIN / "toolorchestra"), "eval", "--env", "replay:routerbench", "--data-dir", str(SHARED_DATA),
         "--policy", "cheapest", "--limit", "3", "--no-progress", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    for header in ("accuracy", "latency mean s", "calls/task", "errors"):
        assert header in result.stdout, result.stdout
