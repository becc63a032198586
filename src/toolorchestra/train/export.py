"""Export a training checkpoint as a shipped orchestrator folder (`toolorchestra export-orchestrator`).

The folder layout (LoRA adapter in peft's format, `orchestrator.json`, model card) is what
backends/adapters.py finds by name; building the model to export is training's business, so it lives here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from toolorchestra.backends.adapters import ADAPTER_FILES, META_FILE
from toolorchestra.errors import UserError
from toolorchestra.train.checkpoint import load_trainable
from toolorchestra.train.config import TrainConfig
from toolorchestra.train.trainer import load_policy, wrap_lora


def export_adapter(
    checkpoint: Path, out_dir: Path, *, card: str | None = None, extra: dict[str, Any] | None = None
) -> Path:
    """A shipped-orchestrator folder from a training checkpoint (its `state.json` holds the config)."""
    import torch

    state_path = checkpoint / "state.json"
    if not state_path.is_file():
        raise UserError(f"{checkpoint}: not a training checkpoint (no state.json)")
    state = json.loads(state_path.read_text())
    config = TrainConfig.model_validate(state["config"])
    if config.model.lora_rank == 0:
        raise UserError(f"{checkpoint}: trained without LoRA (model.lora_rank 0); there is no adapter to export")
    model, _ = load_policy(config.model.path, config.model.dtype, "cpu")
    model = wrap_lora(
        model, config.model.lora_rank, config.model.lora_alpha, config.model.target_modules, config.model.lora_layers
    )
    load_trainable(checkpoint, model)
    staging = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    with torch.no_grad():
        model.save_pretrained(str(staging))
    # peft records the base model's resolved local path (a cache dir on this machine); the reference is what
    # loads it anywhere
    adapter_config = staging / ADAPTER_FILES[0]
    adapter_config.write_text(
        json.dumps({**json.loads(adapter_config.read_text()), "base_model_name_or_path": config.model.path}, indent=2)
        + "\n"
    )
    meta = {
        "base_model": config.model.path,
        "checkpoint_step": state["step"],
        "env": config.data.env,
        "estimator": config.recipe,
        # what evaluation must show in the prompt for this adapter (bench/request.py `shown_profiles`)
        "prompt": {"profiles": config.sampler.profiles},
        **(extra or {}),
    }
    recipe = checkpoint / "recipe.json"  # written by the trainer beside each checkpoint (train/trainer.py)
    if recipe.is_file():
        meta["training"] = json.loads(recipe.read_text())
    (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    if card:
        (staging / "README.md").write_text(card)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    return out_dir
