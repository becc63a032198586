"""Trained orchestrators shipped with the package, found by name (or an exported adapter folder, by path).

A shipped orchestrator is a folder under `toolorchestra/data/orchestrators/NAME/` holding a LoRA adapter in
peft's format (`adapter_config.json`, `adapter_model.safetensors`), `orchestrator.json` (the base model
reference and how the adapter was trained) and a model card (`README.md`). `resolve_model_dir` in
backends/local.py turns the name into an HF model dir: the base model with the adapter merged in, built
once into the cache dir like the GGUF conversion, so every consumer (eval, run, training from it) sees an
ordinary model.

This module only finds what is shipped (inference side); `train/export.py` writes such a folder from a training
checkpoint (`toolorchestra export-orchestrator`), so backends never import the training package.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from toolorchestra.errors import UserError

META_FILE = "orchestrator.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class ShippedOrchestrator:
    name: str
    folder: Path
    base: str  # the base model reference, e.g. smollm2-135m
    profiles: bool = False  # its prompt shows the labels' capability profiles (orchestrator.json "prompt")
    guided_tool_calls: bool = True  # it writes calls under schema-guided decoding (orchestrator.json "decoding")

    def cache_name(self) -> str:
        """A cache dir name that changes when the adapter does."""
        digest = hashlib.sha256((self.folder / ADAPTER_FILES[1]).read_bytes()).hexdigest()[:12]
        return f"{self.name}-{digest}"


def orchestrators_root() -> Path:
    return Path(str(resources.files("toolorchestra") / "data" / "orchestrators"))


def read_orchestrator(folder: Path) -> ShippedOrchestrator | None:
    """The orchestrator an adapter folder holds (orchestrator.json and the peft files), or None."""
    meta_path = folder / META_FILE
    if not meta_path.is_file() or not all((folder / name).is_file() for name in ADAPTER_FILES):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        prompt = meta.get("prompt") or {}
        decoding = meta.get("decoding") or {}
        base = str(meta["base_model"])
    except (json.JSONDecodeError, KeyError, AttributeError) as error:
        raise UserError(
            f"{meta_path}: not an orchestrator.json as export-orchestrator writes it (a JSON object with "
            f"base_model): {error}"
        ) from None
    return ShippedOrchestrator(
        folder.name,
        folder,
        base,
        profiles=bool(prompt.get("profiles", False)),
        guided_tool_calls=bool(decoding.get("guided_tool_calls", True)),
    )


def shipped_orchestrators() -> dict[str, ShippedOrchestrator]:
    """Every shipped orchestrator by name."""
    root = orchestrators_root()
    found = {}
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        orchestrator = read_orchestrator(folder)
        if orchestrator is not None:
            found[folder.name] = orchestrator
    return found


def guided_tool_calls(path: str, setting: bool | None) -> bool:
    """Whether a local model at `path` decodes tool calls under its tools' schemas: `setting` (the catalog's
    `guided_tool_calls`) when given, else as the shipped orchestrator at `path` was trained (an adapter trained on
    unconstrained calls says so in its orchestrator.json), else true."""
    if setting is not None:
        return setting
    shipped = find_orchestrator(path)
    return True if shipped is None else shipped.guided_tool_calls


def find_orchestrator(reference: str) -> ShippedOrchestrator | None:
    """A shipped orchestrator by name, or one that `export-orchestrator` wrote to a folder (evaluate a trained
    adapter before shipping it: `--policy orchestrator:runs/exports/NAME`)."""
    shipped = shipped_orchestrators().get(reference)
    if shipped is not None:
        return shipped
    folder = Path(reference).expanduser()
    return read_orchestrator(folder) if folder.is_dir() else None
