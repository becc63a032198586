"""Checkpoints that resume exactly: trainable weights, optimizer, RNG and sampler state, and the step.

Layout of `<run>/checkpoints/step_<N>/`:
  trainable.pt   the trainable parameters (LoRA adapter or all weights) by name
  optimizer.pt   AdamW state
  rng.pt         torch and python RNG states
  state.json     step, sampler state, the config it ran with
  model/         (optional) an HF model dir with the LoRA adapter merged, loadable by the local backend
A checkpoint is written to a temporary dir and renamed into place, so a kill -9 leaves either the whole
checkpoint or none; `latest_checkpoint` only sees complete ones.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

from toolorchestra.errors import UserError

STATE_FILE = "state.json"
PREFIX = "step_"


def checkpoint_root(run_dir: Path) -> Path:
    return run_dir / "checkpoints"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return None
    complete = [
        path
        for path in root.iterdir()
        if path.name.startswith(PREFIX) and path.name[len(PREFIX) :].isdigit() and (path / STATE_FILE).exists()
    ]
    return max(complete, key=lambda path: int(path.name[len(PREFIX) :]), default=None)


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model: Any,
    optimizer: Any,
    sampler_state: dict[str, Any],
    config: dict[str, Any],
    merged_model: Any = None,
    tokenizer: Any = None,
) -> Path:
    import torch

    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{PREFIX}{step}"
    staging = root / f".{PREFIX}{step}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    trainable = {name: param.detach().clone() for name, param in model.named_parameters() if param.requires_grad}
    torch.save(trainable, staging / "trainable.pt")
    torch.save(optimizer.state_dict(), staging / "optimizer.pt")
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, staging / "rng.pt")
    if merged_model is not None:
        merged_model.save_pretrained(staging / "model")
        if tokenizer is not None:
            tokenizer.save_pretrained(staging / "model")
    (staging / STATE_FILE).write_text(json.dumps({"step": step, "sampler": sampler_state, "config": config}))
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    return final


def load_trainable(path: Path, model: Any) -> None:
    """Copy the checkpoint's trainable weights into `model` (same architecture and adapter) in place."""
    import torch

    weights = torch.load(path / "trainable.pt", map_location="cpu")
    parameters = dict(model.named_parameters())
    missing = sorted(set(weights) - set(parameters))
    if missing:
        raise ValueError(f"{path}: checkpoint has parameters the model lacks, e.g. {missing[:3]}")
    with torch.no_grad():
        for name, value in weights.items():
            parameters[name].copy_(value)


def read_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's state.json (step, sampler state, config); a missing, torn or edited one is a UserError
    naming it, before any weight is loaded."""
    from toolorchestra.files import read_json_object

    state = read_json_object(checkpoint / STATE_FILE, "a training checkpoint's state (step, sampler, config)")
    if not isinstance(state.get("step"), int) or isinstance(state.get("step"), bool):
        got = repr(state.get("step"))[:80]
        raise UserError(f"{checkpoint / STATE_FILE}: field 'step': expected an integer, got {got}")
    return state


def load_checkpoint(path: Path, *, model: Any, optimizer: Any) -> dict[str, Any]:
    """Restore weights, optimizer and RNGs in place; returns state.json (step, sampler state)."""
    import torch

    state = read_state(path)
    load_trainable(path, model)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu"))
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    return state


def average_checkpoints(checkpoints: list[Path], out_dir: Path) -> Path:
    """A checkpoint whose trainable weights are the mean of `checkpoints`' (Polyak averaging of the last few
    checkpoints of a run): per-question reward targets are noisy, so consecutive checkpoints scatter around
    what the run has learned, and their mean scatters less. LoRA's A and B are averaged separately, which is
    close to averaging their product when the checkpoints are near each other (same run, small steps).
    Writes trainable.pt and the last checkpoint's state.json (with `averaged_from`); no optimizer state, so
    it is for export and evaluation, not for --resume."""
    import torch

    if not checkpoints:
        raise ValueError("average_checkpoints: no checkpoint given")
    states = [torch.load(path / "trainable.pt", map_location="cpu") for path in checkpoints]
    names = set(states[0])
    for path, state in zip(checkpoints, states, strict=True):
        if set(state) != names:
            raise ValueError(
                f"{path}: its trainable weights differ from {checkpoints[0]}'s; average checkpoints of one run"
            )
    mean = {
        name: torch.stack([state[name].float() for state in states]).mean(0).to(states[0][name].dtype)
        for name in states[0]
    }
    state = read_state(checkpoints[-1])
    state["averaged_from"] = [str(path) for path in checkpoints]
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(mean, out_dir / "trainable.pt")
    (out_dir / STATE_FILE).write_text(json.dumps(state))
    return out_dir
