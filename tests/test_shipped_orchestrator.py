"""Shipped trained orchestrators (backends/adapters.py, train/export.py): a checkpoint's LoRA adapter exported with
`export_adapter` loads by name through the local backend's resolver and computes what the trained policy did.
Runs on the tiny randomly initialized llama of _tiny_policy (saved as an HF dir, as the base model) and its
fake routing env; the real shipped adapter is checked in test_eval.py's orchestrator tests."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from _tiny_policy import FakeRoutingEnv, save_tiny_policy  # noqa: E402

from toolorchestra.backends import adapters  # noqa: E402
from toolorchestra.backends.local import load_hf_model, resolve_model_dir  # noqa: E402
from toolorchestra.errors import UserError  # noqa: E402
from toolorchestra.train import export  # noqa: E402
from toolorchestra.train.config import TrainConfig  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402


def trained_checkpoint(tmp_path, lora_rank: int = 8):
    base = save_tiny_policy(tmp_path / "base")
    config = TrainConfig.model_validate({
        "seed": 0,
        "data": {"env": "fake-routing", "train_batch_size": 2},
        "model": {"path": str(base), "lora_rank": lora_rank, "lora_alpha": 16},
        "actor": {"ppo_micro_batch_size": 2, "optim": {"lr": 5e-2}},
        "recipe": "counterfactual",
        "counterfactual": {"targets": "outcome_model"},
        "sampler": {"min_labels": 4, "max_labels": 4, "price_scale": [1.0, 1.0], "tool_keep_prob": 0.0},
        "trainer": {"total_training_steps": 2, "save_freq": 2, "default_local_dir": str(tmp_path / "run"),
                    "torch_threads": 1, "save_merged_model": False},
    })
    trainer = Trainer(config, env=FakeRoutingEnv())
    trainer.fit(show_progress=False)
    return trainer, tmp_path / "run" / "checkpoints" / "step_2"


def test_exported_adapter_loads_by_name_and_matches_the_trained_policy(tmp_path, monkeypatch) -> None:
    trainer, checkpoint = trained_checkpoint(tmp_path)
    root = tmp_path / "orchestrators"
    written = export.export_adapter(checkpoint, root / "tiny-orchestrator", card="# tiny orchestrator\n")
    assert sorted(path.name for path in written.iterdir()) == [
        "README.md", "adapter_config.json", "adapter_model.safetensors", "orchestrator.json"]
    meta = json.loads((written / "orchestrator.json").read_text())
    assert meta["checkpoint_step"] == 2 and meta["estimator"] == "counterfactual"
    training = meta["training"]  # the trainer's recipe.json: the recipe, its settings, the data, the commit
    assert training["recipe"]["name"] == "counterfactual" and training["recipe"]["targets"] == "outcome_model"
    assert training["data"]["env"] == "fake-routing" and training["config"]["trainer"]["total_training_steps"] == 2
    assert training["git_commit"] is None or len(training["git_commit"]) == 40

    monkeypatch.setattr(adapters, "orchestrators_root", lambda: root)
    monkeypatch.setenv("TOOLORCHESTRA_CACHE", str(tmp_path / "cache"))
    assert list(adapters.shipped_orchestrators()) == ["tiny-orchestrator"]
    merged_dir = resolve_model_dir("tiny-orchestrator")
    assert resolve_model_dir("tiny-orchestrator") == merged_dir  # built once, then reused
    merged, _ = load_hf_model(str(merged_dir))
    base, _ = load_hf_model(str(tmp_path / "base"))
    ids = torch.tensor([[1, 5, 9, 13, 2, 7]])
    with torch.no_grad():
        expected = trainer.policy.eval()(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        untrained = base(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, untrained, atol=1e-4), "the adapter changed nothing: the test proves nothing"

    # an exported folder that is not shipped loads by its path (evaluate before shipping), merged the same way
    monkeypatch.setattr(adapters, "orchestrators_root", lambda: tmp_path / "nothing-shipped")
    assert adapters.find_orchestrator("tiny-orchestrator") is None
    assert adapters.find_orchestrator(str(tmp_path)) is None  # a folder without an adapter
    by_path, _ = load_hf_model(str(resolve_model_dir(str(written))))
    with torch.no_grad():
        torch.testing.assert_close(by_path(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-4)


def test_export_errors_name_the_checkpoint(tmp_path) -> None:
    with pytest.raises(UserError, match="not a training checkpoint"):
        export.export_adapter(tmp_path, tmp_path / "out")
    _, checkpoint = trained_checkpoint(tmp_path, lora_rank=0)
    with pytest.raises(UserError, match="without LoRA"):
        export.export_adapter(checkpoint, tmp_path / "out")


def test_init_checkpoint_starts_from_trained_weights(tmp_path) -> None:
    from toolorchestra.errors import ConfigError

    trainer, checkpoint = trained_checkpoint(tmp_path)
    config = trainer.config.model_copy(deep=True)
    config.model.init_checkpoint = str(checkpoint)
    config.trainer.default_local_dir = str(tmp_path / "second")
    second = Trainer(config, env=FakeRoutingEnv())
    trained = dict(trainer.policy.named_parameters())
    for name, param in second.policy.named_parameters():
        if param.requires_grad:
            torch.testing.assert_close(param, trained[name], msg=name)
    config.model.init_checkpoint = str(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="init_checkpoint"):
        Trainer(config, env=FakeRoutingEnv())


def test_init_checkpoint_takes_an_exported_adapter_by_path_or_name(tmp_path, monkeypatch) -> None:
    """A run can continue from what users run: the shipped adapter, by its folder or its name."""
    from toolorchestra.errors import ConfigError

    trainer, checkpoint = trained_checkpoint(tmp_path)
    root = tmp_path / "orchestrators"
    exported = export.export_adapter(checkpoint, root / "tiny-orchestrator")
    monkeypatch.setattr(adapters, "orchestrators_root", lambda: root)
    trained = {name: param for name, param in trainer.policy.named_parameters() if param.requires_grad}
    for reference in (str(exported), "tiny-orchestrator"):
        config = trainer.config.model_copy(deep=True)
        config.model.init_checkpoint = reference
        config.trainer.default_local_dir = str(tmp_path / "from-adapter")
        second = Trainer(config, env=FakeRoutingEnv())
        started = {name: param for name, param in second.policy.named_parameters() if param.requires_grad}
        assert started.keys() == trained.keys()
        for name, param in started.items():
            torch.testing.assert_close(param, trained[name], msg=name)
    config.model.init_checkpoint = "no-such-orchestrator"
    with pytest.raises(ConfigError, match="shipped orchestrator name .*tiny-orchestrator"):
        Trainer(config, env=FakeRoutingEnv())
    config.model.init_checkpoint = str(exported)
    config.model.lora_rank = 4  # another adapter shape must not load half the weights
    with pytest.raises(ConfigError, match="does not fit"):
        Trainer(config, env=FakeRoutingEnv())


def test_loading_an_adapter_without_peft_names_the_package(tmp_path, monkeypatch) -> None:
    import sys

    _, checkpoint = trained_checkpoint(tmp_path)
    root = tmp_path / "orchestrators"
    export.export_adapter(checkpoint, root / "tiny-orchestrator")
    monkeypatch.setattr(adapters, "orchestrators_root", lambda: root)
    monkeypatch.setenv("TOOLORCHESTRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "peft", None)  # as if the optional package were not installed
    with pytest.raises(UserError, match="needs peft"):
        resolve_model_dir("tiny-orchestrator")


def test_averaged_checkpoint_holds_the_mean_weights_and_exports(tmp_path) -> None:
    from toolorchestra.train.checkpoint import average_checkpoints, save_checkpoint

    trainer, checkpoint = trained_checkpoint(tmp_path)
    first = torch.load(checkpoint / "trainable.pt")
    shifted = {name: value + 1.0 for name, value in first.items()}
    with torch.no_grad():
        for name, param in trainer.policy.named_parameters():
            if name in shifted:
                param.copy_(shifted[name])
    second = save_checkpoint(tmp_path / "run", 4, model=trainer.policy, optimizer=trainer.optimizer,
                             sampler_state={}, config=trainer.config.model_dump(mode="json"))
    averaged = average_checkpoints([checkpoint, second], tmp_path / "averaged")
    mean = torch.load(averaged / "trainable.pt")
    for name, value in first.items():
        torch.testing.assert_close(mean[name], value + 0.5, msg=name)
    assert json.loads((averaged / "state.json").read_text())["averaged_from"] == [str(checkpoint), str(second)]
    exported = export.export_adapter(averaged, tmp_path / "orchestrators" / "averaged")
    assert (exported / "adapter_model.safetensors").is_file()
    with pytest.raises(ValueError, match="average_checkpoints: no checkpoint"):
        average_checkpoints([], tmp_path / "none")


def test_a_malformed_orchestrator_json_names_the_file(tmp_path) -> None:
    folder = tmp_path / "exported"
    folder.mkdir()
    for name in adapters.ADAPTER_FILES:
        (folder / name).write_text("{}")
    (folder / adapters.META_FILE).write_text("{not json")
    with pytest.raises(UserError, match=r"orchestrator\.json: not an orchestrator\.json"):
        adapters.find_orchestrator(str(folder))
    (folder / adapters.META_FILE).write_text('{"checkpoint_step": 3}')
    with pytest.raises(UserError, match="base_model"):
        adapters.find_orchestrator(str(folder))


def test_every_shipped_orchestrator_has_a_card_and_its_stages_configs_are_pinned() -> None:
    """Each folder under data/orchestrators is found by name with its base model and model card, and the train
    configs its orchestrator.json names as stages are pinned in tests/fixtures/shipped_train_configs.json (which
    test_train_configs.py resolves against the settings of the run)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pinned = json.loads((root / "tests/fixtures/shipped_train_configs.json").read_text())["configs"]
    shipped = adapters.shipped_orchestrators()
    assert {"smollm2-135m-orchestrator", "smollm2-135m-frames-escalation", "smollm2-135m-toolscale"} <= set(shipped)
    for name, orchestrator in shipped.items():
        assert orchestrator.base == "smollm2-135m", name
        assert (orchestrator.folder / "README.md").read_text().startswith(f"# {name}"), name
        meta = json.loads((orchestrator.folder / adapters.META_FILE).read_text())
        for stage in (meta.get("training") or {}).get("stages", []):
            assert stage["config_file"] in pinned, (name, stage["config_file"])
            assert (root / stage["config_file"]).is_file()


def test_an_adapter_trained_on_unconstrained_calls_is_loaded_that_way(tmp_path) -> None:
    """orchestrator.json `decoding` sets how an adapter loaded by name writes calls; a catalog setting wins."""
    from toolorchestra.backends.local import LocalBackend
    from toolorchestra.catalog.schema import LocalBackendSpec

    assert adapters.find_orchestrator("smollm2-135m-toolscale").guided_tool_calls is False
    assert adapters.find_orchestrator("smollm2-135m-orchestrator").guided_tool_calls is True  # no `decoding`: guided
    assert LocalBackend(LocalBackendSpec(path="smollm2-135m-toolscale")).guided_tool_calls is False
    assert LocalBackend(LocalBackendSpec(path="smollm2-135m-toolscale", guided_tool_calls=True)).guided_tool_calls
    assert LocalBackend(LocalBackendSpec(path="smollm2-135m")).guided_tool_calls  # a base model: guided
    folder = tmp_path / "exported"
    folder.mkdir()
    for name in adapters.ADAPTER_FILES:
        (folder / name).write_text("{}")
    (folder / adapters.META_FILE).write_text('{"base_model": "smollm2-135m", "decoding": {"guided_tool_calls": false}}')
    assert adapters.guided_tool_calls(str(folder), None) is False
    assert adapters.guided_tool_calls(str(folder), True) is True
