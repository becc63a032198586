"""Trained orchestrators shipped with the package, loaded by name, and the export that produces them.

A shipped orchestrator is a folder under `toolorchestra/data/orchestrators/NAME/` holding a LoRA adapter in
peft's format (`adapter_config.json`, `adapter_model.safetensors`), `orchestrator.json` (the base model
reference and how the adapter was trained) and a model card (`README.md`). `resolve_model_dir` in
backends/local.py turns the name into an HF model dir: the base model with the adapter merged in, built
once into the cache dir like the GGUF conversion, so every consumer (eval, run, training from it) sees an
ordinary model.

`export_adapter` writes such a folder from a training checkpoint (`toolorchestra export-orchestrator`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from toolorchestra.errors import UserError

META_FILE = "orchestrator.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class ShippedOrchestrator:
    name: str
    folder: Path
    base: str  # the base model reference, e.g. smollm2-135m

    def cache_name(self) -> str:
        """A cache dir name that changes when the adapter does."""
        digest = hashlib.sha256((self.folder / ADAPTER_FILES[1]).read_bytes()).hexdigest()[:12]
        return f"{self.name}-{digest}"


def orchestrators_root() -> Path:
    return Path(str(resources.files("toolorchestra") / "data" / "orchestrators"))


def shipped_orchestrators() -> dict[str, ShippedOrchestrator]:
    """Every shipped orchestrator by name."""
    root = orchestrators_root()
    found = {}
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        meta_path = folder / META_FILE
        if not meta_path.is_file() or not all((folder / name).is_file() for name in ADAPTER_FILES):
            continue
        meta = json.loads(meta_path.read_text())
        found[folder.name] = ShippedOrchestrator(folder.name, folder, str(meta["base_model"]))
    return found


def merge_adapter(orchestrator: ShippedOrchestrator, out_dir: Path) -> None:
    """Write the base model with the adapter merged into `out_dir` (an HF dir with its tokenizer)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError(f"the trained orchestrator {orchestrator.name!r} is a LoRA adapter and loading it needs "
                        "peft: pip install 'toolorchestra[local]'") from None

    from toolorchestra.backends.local import load_hf_model

    model, tokenizer = load_hf_model(orchestrator.base)
    merged = PeftModel.from_pretrained(model, str(orchestrator.folder)).merge_and_unload()
    merged.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def export_adapter(checkpoint: Path, out_dir: Path, *, card: str | None = None,
                   extra: dict[str, Any] | None = None) -> Path:
    """A shipped-orchestrator folder from a training checkpoint (its `state.json` holds the config)."""
    import torch

    from toolorchestra.train.checkpoint import load_trainable
    from toolorchestra.train.config import TrainConfig
    from toolorchestra.train.trainer import load_policy, wrap_lora

    state_path = checkpoint / "state.json"
    if not state_path.is_file():
        raise UserError(f"{checkpoint}: not a training checkpoint (no state.json)")
    state = json.loads(state_path.read_text())
    config = TrainConfig.model_validate(state["config"])
    if config.model.lora_rank == 0:
        raise UserError(f"{checkpoint}: trained without LoRA (model.lora_rank 0); there is no adapter to export")
    model, _ = load_policy(config.model.path, config.model.dtype, "cpu")
    model = wrap_lora(model, config.model.lora_rank, config.model.lora_alpha, config.model.target_modules,
                      config.model.lora_layers)
    load_trainable(checkpoint, model)
    staging = out_dir.with_name(f".{out_dir.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    with torch.no_grad():
        model.save_pretrained(str(staging))
    # peft records the base model's resolved local path (a cache dir on this machine); the reference is what
    # loads it anywhere
    adapter_config = staging / ADAPTER_FILES[0]
    adapter_config.write_text(json.dumps({**json.loads(adapter_config.read_text()),
                                          "base_model_name_or_path": config.model.path}, indent=2) + "\n")
    meta = {"base_model": config.model.path, "checkpoint_step": state["step"],
            "env": config.data.env, "estimator": config.recipe, **(extra or {})}
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
