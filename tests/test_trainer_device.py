"""The whole GRPO update path on the policy's device: SFT batches, the padded batch, advantages, reference
passes, the loss and the optimizer step, on CPU and (where there is one) on CUDA, with the tiny llama."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import FakeRoutingEnv, tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.train.config import TrainConfig  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def device_config(run_dir: Path, device: str) -> TrainConfig:
    return TrainConfig.model_validate({
        "seed": 0,
        "data": {"env": "fake-routing", "train_batch_size": 2},
        "model": {"device": device, "lora_rank": 4, "lora_alpha": 8},
        # Two mini-batches: the old log-probs come from the reference pass, and the KL pass runs too.
        "actor": {"ppo_mini_batch_size": 1, "ppo_micro_batch_size": 2, "use_kl_loss": True, "kl_loss_coef": 0.01,
                  "optim": {"lr": 1e-2}},
        "grpo": {"filter_min_reward_std": 0.0, "filter_invalid": False},
        "rollout": {"n": 3, "response_length": 24, "max_assistant_turns": 2, "generation_batch_size": 6},
        "sampler": {"label_style": "numbered"},
        "sft": {"steps": 12, "batch_size": 4, "lr": 1e-2, "max_tasks": 6},
        "trainer": {"total_training_steps": 1, "save_freq": 1, "default_local_dir": str(run_dir), "torch_threads": 1},
    })


@pytest.mark.parametrize("device", DEVICES)
def test_warm_start_and_a_step_with_an_update_run_on_the_policy_device(tmp_path, device) -> None:
    config = device_config(tmp_path / "run", device)
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer).to(config.model.device)
    trainer = Trainer(config, env=FakeRoutingEnv(), model=model, tokenizer=tokenizer)
    assert trainer.policy.device.type == device

    sft = trainer.warm_start()  # SFT batches (grpo.pad_rows) on the device; teaches the answer call
    assert sft["sft_examples"] > 0 and math.isfinite(sft["sft_loss_last"])
    before = {name: param.detach().clone() for name, param in trainer.policy.named_parameters()
              if param.requires_grad}
    metrics = trainer.step()

    assert metrics["train_episodes"] > 0, "the step must perform an update"
    assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["actor/kl"])
    assert math.isfinite(metrics["actor/grad_norm"]) and metrics["actor/grad_norm"] > 0
    after = dict(trainer.policy.named_parameters())
    assert any(not torch.equal(before[name], after[name]) for name in before)
    assert all(param.device.type == device for param in trainer.policy.parameters())
    trainer.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_config_on_a_machine_without_one_is_one_clear_error_before_any_loading(tmp_path) -> None:
    from toolorchestra.backends.local import check_device
    from toolorchestra.errors import UserError

    config = device_config(tmp_path / "run", "cuda")
    config.data.env = "no-such-env"  # never reached: the device is checked first
    with pytest.raises(UserError, match=r"model.device 'cuda': this torch .* set model.device to cpu"):
        Trainer(config)
    assert not (tmp_path / "run").exists()
    with pytest.raises(UserError, match=r"device 'gpu': expected cpu, cuda, cuda:N or mps"):
        check_device("gpu")
    check_device("cpu")
