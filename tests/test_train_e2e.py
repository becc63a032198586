"""End-to-end training on a tiny randomly initialized llama built in the test (no download)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import FakeRoutingEnv, tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.errors import ConfigError  # noqa: E402
from toolorchestra.train.checkpoint import latest_checkpoint  # noqa: E402
from toolorchestra.train.config import TrainConfig, load_train_config  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def tiny_config(run_dir: Path, **overrides) -> TrainConfig:
    config = {
        "seed": 0,
        "data": {"env": "fake-routing", "train_batch_size": 2},
        "model": {"lora_rank": 4, "lora_alpha": 8},
        "actor": {"ppo_mini_batch_size": 1, "ppo_micro_batch_size": 2, "use_kl_loss": True, "kl_loss_coef": 0.01,
                  "optim": {"lr": 1e-2}},
        "rollout": {"n": 3, "response_length": 16, "max_assistant_turns": 2, "generation_batch_size": 6},
        "sampler": {"label_style": "numbered"},
        "trainer": {"total_training_steps": 2, "save_freq": 1, "default_local_dir": str(run_dir),
                    "torch_threads": 1},
    }
    for section, values in overrides.items():
        config.setdefault(section, {}).update(values) if isinstance(values, dict) else config.update({section: values})
    return TrainConfig.model_validate(config)


def make_trainer(run_dir: Path, **overrides) -> Trainer:
    tokenizer = tiny_tokenizer()
    return Trainer(tiny_config(run_dir, **overrides), env=FakeRoutingEnv(), model=tiny_llama(tokenizer),
                   tokenizer=tokenizer)


def test_two_steps_write_metrics_checkpoints_and_tensorboard(tmp_path) -> None:
    trainer = make_trainer(tmp_path / "run")
    history = trainer.fit(show_progress=False)
    assert [m["step"] for m in history] == [1, 2]
    for key in ("reward/mean", "reward/std", "accuracy", "cost_usd", "latency_s", "filter/low_std_dropped_frac",
                "filter/invalid_dropped_frac", "tokens_per_s", "step_time_s", "valid_frac"):
        assert key in history[-1] and math.isfinite(history[-1][key])
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert latest_checkpoint(tmp_path / "run").name == "step_2"
    assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
    merged = tmp_path / "run" / "checkpoints" / "step_2" / "model"
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(merged)
    assert not any("lora" in name for name, _ in reloaded.named_parameters())
    # The merged dir is the policy: same logits as the LoRA model.
    ids = torch.tensor([[1, 5, 9, 12]])
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, trainer.policy(input_ids=ids).logits, atol=1e-5)
    assert (tmp_path / "run" / "trajectories" / "step_2.jsonl").exists()


def test_update_moves_the_weights_for_nonzero_advantages_and_reports_kl(tmp_path) -> None:
    trainer = make_trainer(tmp_path / "run")
    episodes = trainer.rollout.run(trainer.sampler.next_batch(2))
    for index, episode in enumerate(episodes):
        episode.advantage = 1.0 if index % 2 else -1.0
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
    metrics = trainer.recipe().update(episodes)
    after = dict(trainer.policy.named_parameters())
    assert any(not torch.equal(before[name], after[name]) for name in before)
    assert metrics["train_episodes"] == len(episodes)
    assert metrics["actor/grad_norm"] > 0 and math.isfinite(metrics["actor/pg_loss"])
    # Two mini-batches: the second is scored against the log-probs recorded before the first update.
    assert metrics["actor/kl"] >= 0 and metrics["actor/ratio_mean"] != 1.0


def test_sft_warm_start_learns_the_oracle_call(tmp_path) -> None:
    trainer = make_trainer(tmp_path / "run", sft={"steps": 12, "batch_size": 4, "lr": 1e-2, "max_tasks": 6})
    metrics = trainer.warm_start()
    # A task gives an example when its drawn label subset holds one of the two 'good' models.
    assert 3 <= metrics["sft_examples"] <= 6
    assert metrics["sft_loss_last"] < metrics["sft_loss_first"]


def test_config_errors_name_file_and_field(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("actor:\n  clip_ratio_low: -1\nrollout:\n  n: 4\n  temprature: 1.0\n")
    with pytest.raises(ConfigError) as error:
        load_train_config(path)
    message = str(error.value)
    assert str(path) in message and "actor.clip_ratio_low" in message and "rollout.temprature" in message
    path.write_text("data:\n  train_batch_size: 4\nactor:\n  ppo_mini_batch_size: 3\n")
    with pytest.raises(ConfigError, match="ppo_mini_batch_size"):
        load_train_config(path)
    with pytest.raises(ConfigError, match="not found"):
        load_train_config(tmp_path / "missing.yaml")


def test_shipped_config_validates() -> None:
    config = load_train_config(REPO / "configs" / "train" / "routerbench-smollm2.yaml")
    assert config.rollout.n >= 2 and config.actor.clip_ratio_high == 0.28


def test_lora_on_the_last_layers_only(tmp_path) -> None:
    trainer = make_trainer(tmp_path / "run", model={"lora_rank": 4, "lora_alpha": 8, "lora_layers": 1})
    trainable = [name for name, param in trainer.policy.named_parameters() if param.requires_grad]
    assert trainable and all(".layers.1." in name for name in trainable)
    assert {name.split(".")[-4] for name in trainable} >= {"q_proj", "down_proj"}
