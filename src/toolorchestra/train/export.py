"""Export a training checkpoint as a shipped orchestrator folder (`toolorchestra export-orchestrator`).

The folder layout (LoRA adapter in peft's format, `orchestrator.json`, model card) is what
backends/adapters.py finds by name; building the model to export is training's business, so it lives here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolorchestra.backends.adapters import ADAPTER_FILES, META_FILE
from toolorchestra.errors import UserError
from toolorchestra.files import format_validation_error, read_json_object
from toolorchestra.train.checkpoint import load_trainable, read_state
from toolorchestra.train.config import TrainConfig
from toolorchestra.train.trainer import wrap_lora


def export_adapter(
    checkpoint: Path, out_dir: Path, *, card: str | None = None, extra: dict[str, Any] | None = None
) -> Path:
    """A shipped-orchestrator folder from a training checkpoint (its `state.json` holds the config)."""
    import torch

    state_path = checkpoint / "state.json"
    if not state_path.is_file():
        hint = " (a run dir: name one of its checkpoints/step_N)" if (checkpoint / "checkpoints").is_dir() else ""
        raise UserError(f"{checkpoint}: not a training checkpoint (no state.json){hint}")
    check_out_dir(out_dir)  # before the model loads, and before anything is written
    state = read_state(checkpoint)
    config = checkpoint_config(state_path, state)
    if config.model.lora_rank == 0:
        raise UserError(f"{checkpoint}: trained without LoRA (model.lora_rank 0); there is no adapter to export")
    from toolorchestra.backends.local import load_hf_model

    model, _ = load_hf_model(config.model.path, dtype=config.model.dtype, device="cpu")
    model = wrap_lora(model, config.model)
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
        meta["training"] = read_json_object(recipe, "the recipe record the trainer writes beside a checkpoint")
    (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    if card:
        (staging / "README.md").write_text(card)
    if out_dir.exists():
        shutil.rmtree(out_dir)  # a previous export (check_out_dir refused anything else)
    staging.rename(out_dir)
    return out_dir


EXPORT_FILES = frozenset((*ADAPTER_FILES, META_FILE, "README.md"))
"""What export_adapter writes: an --out holding only these is a previous export, which a new one replaces."""


def check_out_dir(out_dir: Path) -> None:
    """Refuse an --out that is a file or a folder holding anything but a previous export: replacing the folder
    would delete what the user keeps there (e.g. an eval run given by mistake)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: is a file; expected a new folder, or a previous export to replace")
    others = sorted(path.name for path in out_dir.iterdir() if path.name not in EXPORT_FILES)
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise UserError(
            f"--out {out_dir}: holds {shown}, so it is not a previous export (expected a new folder, or one that "
            f"export-orchestrator wrote: {', '.join(sorted(EXPORT_FILES))}); nothing was changed"
        )


def checkpoint_config(state_path: Path, state: dict[str, Any]) -> TrainConfig:
    """The training config a checkpoint's state.json records, as a UserError naming the field if it does not
    validate (an edited file, or one from an incompatible version)."""
    try:
        return TrainConfig.model_validate(state.get("config"))
    except ValidationError as exc:
        raise UserError(format_validation_error(f"{state_path} (field config)", exc)) from None
