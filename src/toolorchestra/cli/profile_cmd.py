"""`toolorchestra profile`: measure every model's capability profile on a replay world's calibration sample.

The file it writes is what `eval --profiles FILE` reads, and its entries are what a catalog's `profile:` field
holds for a live model (catalog/schema.py `ModelProfile`).
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_command)


def profile_command(
    env_name: str = typer.Option(..., "--env", help="A replay world: replay:routerbench, replay:frames, replay:DIR."),
    out: Path = typer.Option(..., "--out", help="YAML file to write (model name -> profile)."),
    split: str = typer.Option("train", "--split", help="The split measured; train keeps test questions unseen."),
    per_subset: int = typer.Option(50, "--per-subset", min=1, help="Calibration questions per subset."),
    seed: int = typer.Option(0, "--seed", help="Which questions the calibration sample draws."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Shared data dir (default: ../shared/data)."),
) -> None:
    """Measure accuracy per subset, decline share and mean output tokens of every model of a replay world."""
    from toolorchestra.envs.registry import make_env, replay_dir
    from toolorchestra.envs.replay.base import ReplayEnv
    from toolorchestra.envs.replay.profiles import measure_profiles, write_profiles
    from toolorchestra.errors import UserError

    env = make_env(env_name, data_dir)
    if not isinstance(env, ReplayEnv):
        raise UserError(f"--env {env_name}: profiles are measured on replay worlds (recorded answers)")
    directory = replay_dir(env_name)
    measured_on = f"replay:{directory.resolve()}" if directory is not None else env_name
    profiles = {
        model: profile.model_copy(update={"measured_on": measured_on})
        for model, profile in measure_profiles(env, split, per_subset, seed).items()
    }
    source = f"toolorchestra profile --env {env_name} --split {split} --per-subset {per_subset} --seed {seed}"
    write_profiles(profiles, out, source)
    typer.echo(f"wrote {len(profiles)} profiles ({next(iter(profiles.values())).n} questions each) to {out}")
