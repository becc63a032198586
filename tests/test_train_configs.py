"""configs/train: every YAML loads, `defaults:` overlays merge in order, a knob the recipe does not read is an
error naming it, and the configs behind the shipped adapters resolve to the settings that trained them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from toolorchestra.errors import ConfigError
from toolorchestra.train.config import TrainConfig, load_train_config

ROOT = Path(__file__).resolve().parents[1]
TRAIN_CONFIGS = sorted((ROOT / "configs/train").rglob("*.yaml"))
SHIPPED = json.loads((ROOT / "tests/fixtures/shipped_train_configs.json").read_text())["configs"]


@pytest.mark.parametrize("path", TRAIN_CONFIGS, ids=lambda path: str(path.relative_to(ROOT / "configs/train")))
def test_every_train_config_loads(path: Path) -> None:
    config = load_train_config(path)
    assert config.recipe in ("grpo", "counterfactual", "sft")


def test_the_glob_sees_the_train_configs_and_no_catalog() -> None:
    names = {str(path.relative_to(ROOT / "configs/train")) for path in TRAIN_CONFIGS}
    assert {"routerbench-smollm2.yaml", "frames-escalation.yaml", "toolscale-smollm2/sft.yaml"} <= names
    assert not any(line.startswith("orchestrator:") for path in TRAIN_CONFIGS for line in path.read_text().splitlines())


@pytest.mark.parametrize("relative", sorted(SHIPPED))
def test_shipped_adapter_configs_resolve_to_the_settings_that_trained_them(relative: str) -> None:
    got = load_train_config(ROOT / relative).model_dump(mode="json")
    assert got == SHIPPED[relative]["effective"], SHIPPED[relative]["adapter"]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_merge_in_order_with_the_files_own_keys_last(tmp_path) -> None:
    _write(tmp_path / "bases/a.yaml", "seed: 1\ndata: {train_batch_size: 8, split: train}\nsampler: {max_labels: 6}\n")
    _write(tmp_path / "bases/b.yaml", "seed: 2\ndata: {split: test}\n")
    config = load_train_config(_write(tmp_path / "run.yaml",
                                      "defaults: [bases/a.yaml, bases/b.yaml]\ndata: {max_tasks: 3}\n"))
    assert config.seed == 2  # b after a
    assert (config.data.train_batch_size, config.data.split, config.data.max_tasks) == (8, "test", 3)
    assert config.sampler.max_labels == 6


def test_defaults_errors_name_the_file(tmp_path) -> None:
    missing = _write(tmp_path / "run.yaml", "defaults: [nope.yaml]\n")
    with pytest.raises(ConfigError, match=r"run.yaml: field defaults: nope.yaml: file not found"):
        load_train_config(missing)
    loop = _write(tmp_path / "loop.yaml", "defaults: [loop.yaml]\n")
    with pytest.raises(ConfigError, match="includes itself"):
        load_train_config(loop)
    with pytest.raises(ConfigError, match="expected a list"):
        load_train_config(_write(tmp_path / "bad.yaml", "defaults: base.yaml\n"))


@pytest.mark.parametrize("text, field, reader", [
    ("recipe: grpo\ncounterfactual: {targets: escalation}\n", "counterfactual", "counterfactual"),
    ("recipe: counterfactual\nactor: {clip_ratio_high: 0.3}\n", "actor.clip_ratio_high", "grpo"),
    ("recipe: counterfactual\ngrpo: {filter_invalid: false}\n", "grpo", "grpo"),
    ("recipe: sft\nsft: {steps: 2}\ntrainer: {total_training_steps: 3}\n", "trainer.total_training_steps",
     "grpo or counterfactual"),
])
def test_a_knob_the_recipe_does_not_read_is_an_error_naming_it(tmp_path, text, field, reader) -> None:
    path = _write(tmp_path / "run.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_train_config(path)
    message = str(error.value)
    assert str(path) in message and f"{field} is read only by recipe {reader}" in message


def test_the_cli_prints_the_unread_knob_in_one_error_without_a_traceback(tmp_path, monkeypatch, capsys) -> None:
    from toolorchestra.cli.main import main

    path = _write(tmp_path / "run.yaml", "recipe: grpo\ncounterfactual: {tau: 0.1}\n")
    monkeypatch.setattr(sys, "argv", ["toolorchestra", "train", "--config", str(path), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and "counterfactual is read only by recipe counterfactual" in stderr


def test_recipe_section_is_what_orchestrator_json_records() -> None:
    config = TrainConfig.model_validate({"recipe": "counterfactual", "counterfactual": {"targets": "escalation"}})
    section = config.recipe_section()
    assert section["name"] == "counterfactual" and section["targets"] == "escalation"
    assert section["escalation"]["max_consults"] == 2
