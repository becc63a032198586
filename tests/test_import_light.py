"""`import toolorchestra` (and the verl adapter's verl-free modules) import neither verl, ray nor torch."""

from __future__ import annotations

import subprocess
import sys

CHECK = ("import sys, {modules}; heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {{'verl', 'ray', 'torch'}}); "
         "assert not heavy, heavy")


def _run(modules: str) -> None:
    result = subprocess.run([sys.executable, "-c", CHECK.format(modules=modules)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_import_toolorchestra_is_light() -> None:
    _run("toolorchestra")


def test_the_cli_and_the_adapters_config_data_and_reward_are_light() -> None:
    _run("toolorchestra.cli.main, toolorchestra.integrations.verl.config, toolorchestra.integrations.verl.data, "
         "toolorchestra.integrations.verl.reward, toolorchestra.integrations.verl.episode, toolorchestra.bench.ray_eval")
