"""configs/verl/: the shared knobs are configs/train/'s own fields, each maps to one verl key, the paper's
values, and (with the verl extra) every override names a key verl's own config has."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolorchestra.integrations.verl.config import KNOBS, VerlConfig, hydra_overrides, knob_values, load_verl_config
from toolorchestra.train.config import TrainConfig, load_train_config

REPO = Path(__file__).resolve().parents[1]
VERL_CONFIGS = sorted((REPO / "configs" / "verl").glob("*.yaml"))
TRAIN_CONFIGS = sorted((REPO / "configs" / "train").glob("*.yaml"))


def _section_fields(model: type, prefix: str = "") -> dict[str, object]:
    """Leaf fields by dotted name (nested models flattened)."""
    from pydantic import BaseModel

    out: dict[str, object] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out.update(_section_fields(annotation, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = info
    return out


def test_both_configs_load_and_name_the_expected_files() -> None:
    assert {path.name for path in VERL_CONFIGS} == {"orchestrator-8b-16gpu.yaml", "smollm2-1gpu.yaml"}
    for path in VERL_CONFIGS:
        load_verl_config(path)


def test_every_shared_knob_is_the_same_field_as_in_configs_train() -> None:
    verl_fields = _section_fields(VerlConfig)
    train_fields = _section_fields(TrainConfig)
    shared = set(verl_fields) & set(train_fields)
    assert len(shared) > 30
    for name in shared:
        ours, theirs = verl_fields[name], train_fields[name]
        if name in ("algorithm.adv_estimator", "algorithm.norm_adv_by_std"):  # subsets of the same values
            assert set(ours.annotation.__args__) <= set(theirs.annotation.__args__), name
            continue
        assert ours.annotation == theirs.annotation, name
        assert ours.description == theirs.description, name
        assert ours.default == theirs.default or ours.default_factory == theirs.default_factory, name
        assert ours.metadata == theirs.metadata, name  # the same bounds
    # every knob a configs/train file sets that the verl configs set too is one of the mapped knobs
    for path in VERL_CONFIGS:
        import yaml

        set_here = _set_keys(yaml.safe_load(path.read_text()))
        for name in set_here & set(train_fields):
            assert name in KNOBS or name.startswith("sampler."), f"{path.name}: {name} has no verl mapping"


def _set_keys(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        if isinstance(value, dict) and key not in ("preferences",):
            keys |= _set_keys(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


def test_the_routerbench_recipe_means_the_same_on_both_trainers() -> None:
    ours = knob_values(load_verl_config(REPO / "configs/verl/smollm2-1gpu.yaml"))
    train = load_train_config(REPO / "configs/train/routerbench-smollm2.yaml").model_dump(mode="json")
    for name, value in ours.items():
        if name.startswith("trainer.") or name == "model.gradient_checkpointing":
            continue
        if name == "algorithm.adv_estimator":  # verl's key for what our `recipe:` names: verl runs the grpo recipe
            assert value == train["recipe"] == "grpo"
            continue
        expected = train
        for part in name.split("."):
            expected = expected[part]
        assert value == expected, name


def test_paper_values_in_the_8b_config() -> None:
    config = load_verl_config(REPO / "configs/verl/orchestrator-8b-16gpu.yaml")
    assert config.model.path == "Qwen/Qwen3-8B"
    assert config.actor.optim.lr == 1e-6 and config.data.train_batch_size == 16 and config.rollout.n == 8
    assert (config.actor.clip_ratio_low, config.actor.clip_ratio_high) == (0.2, 0.28)
    assert config.actor.use_kl_loss and config.actor.kl_loss_coef == 1e-4
    assert config.rollout.max_assistant_turns == 50
    assert config.verl.nnodes * config.verl.n_gpus_per_node == 16


def test_overrides_carry_each_knob_to_its_verl_key(tmp_path) -> None:
    config = load_verl_config(REPO / "configs/verl/orchestrator-8b-16gpu.yaml")
    overrides = dict(item.lstrip("+").split("=", 1) for item in hydra_overrides(config, tmp_path))
    assert overrides["actor_rollout_ref.actor.optim.lr"] == "1e-06"
    assert overrides["actor_rollout_ref.actor.kl_loss_coef"] == "0.0001"
    assert overrides["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == "50"
    assert overrides["toolorchestra.response_length"] == "1024"
    assert overrides["algorithm.norm_adv_by_std_in_grpo"] == "True"
    assert overrides["data.train_files"] == str(tmp_path / "train.parquet")
    for key in KNOBS.values():
        if key is not None:
            assert key in overrides, key


def test_unsupported_knobs_are_refused(tmp_path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        VerlConfig.model_validate({"algorithm": {"norm_adv_by_std": "batch"}})
    with pytest.raises(ValidationError):
        VerlConfig.model_validate({"rollout": {"generation_batch_size": 8}})


def test_every_override_names_a_key_of_verls_own_config(tmp_path) -> None:
    pytest.importorskip("verl")
    import importlib.resources

    from omegaconf import OmegaConf

    defaults = OmegaConf.to_container(OmegaConf.load(
        importlib.resources.files("verl") / "trainer/config/_generated_ppo_trainer.yaml"), resolve=False)

    def has(key: str) -> bool:
        node = defaults
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    for path in VERL_CONFIGS:
        for item in hydra_overrides(load_verl_config(path), tmp_path):
            key = item.split("=", 1)[0]
            present = has(key.lstrip("+"))
            if key.startswith("+"):
                assert not present, f"{key}: verl has it; drop the +"
            else:
                assert present, f"{key}: not a key of verl's ppo_trainer config"
