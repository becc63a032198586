"""`toolorchestra verl prepare|train`: the same recipe on verl + Ray (integrations/verl, docs/scale-out.md).

`prepare` writes verl's parquet files from an env's tasks and the task sampler; `train` writes the verl
command line for a configs/verl/ YAML (and runs it with --launch). Neither imports verl: the command runs in
verl's own entry point, which imports our agent loop through the agent-loop config file written here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

verl_app = typer.Typer(
    help="Train on verl + Ray: prepare verl's data, write or launch the verl command.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(verl_app, name="verl")


@verl_app.command("prepare")
def prepare_command(
    env: str = typer.Option(..., "--env", help="Environment, e.g. replay:routerbench."),
    out: Path = typer.Option(..., "--out", help="Dir for train.parquet and test.parquet."),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="A configs/verl/ YAML: its sampler, seed and data settings (default: their defaults).",
    ),
    epochs: int = typer.Option(1, "--epochs", min=1, help="Draws per train task (each a fresh randomization)."),
    max_test_tasks: int = typer.Option(256, "--max-test-tasks", min=1, help="Validation rows (test split)."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Shared data dir. Default: $TOOLORCHESTRA_DATA or ../shared/data."
    ),
) -> None:
    """Write verl's parquet (prompt, data_source, agent_name, reward_model, extra_info with the draw)."""
    from rich.console import Console

    from toolorchestra.integrations.verl.config import VerlConfig, load_verl_config
    from toolorchestra.integrations.verl.data import PrepareRequest, prepare

    verl_config = load_verl_config(config) if config else VerlConfig()
    written = prepare(
        PrepareRequest(
            env=env, out=out, config=verl_config, data_dir=data_dir, epochs=epochs, max_test_tasks=max_test_tasks
        )
    )
    console = Console(stderr=True)
    for split, path in written.items():
        console.print(f"{split}: {path}")


@verl_app.command("train")
def train_command(
    config: Path = typer.Option(..., "--config", "-c", help="A configs/verl/ YAML."),
    data: Path = typer.Option(..., "--data", help="The dir `toolorchestra verl prepare` wrote."),
    launch: bool = typer.Option(False, "--launch", help="Run the command (needs the verl extra and GPUs)."),
    python: str = typer.Option(sys.executable, "--python", help="The Python that runs verl."),
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        help="Shared data dir the agent loop's envs read. Default: $TOOLORCHESTRA_DATA or ../shared/data.",
    ),
    steps: int | None = typer.Option(None, "--steps", min=1, help="Override trainer.total_training_steps."),
) -> None:
    """Print the verl command line for CONFIG (or run it with --launch)."""
    from toolorchestra.errors import UserError
    from toolorchestra.integrations.verl.config import command_line, load_verl_config, shell_command

    verl_config = load_verl_config(config)
    if steps is not None:
        verl_config.trainer.total_training_steps = steps
    for name in ("train.parquet", "test.parquet"):
        if not (data / name).is_file():
            raise UserError(
                f"--data {data}: no {name}; run `toolorchestra verl prepare --env "
                f"{verl_config.data.env} --out {data}` first"
            )
    argv = command_line(
        verl_config,
        data.resolve(),
        python=python,
        model_path=_model_dir(verl_config.model.path),
        env_data_dir=_env_data_dir(data_dir),
    )
    argv.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path={write_agent_loop_config(data.resolve())}")
    if not launch:
        typer.echo(shell_command(argv))
        return
    completed = subprocess.run(argv, env={**os.environ, "PYTHONPATH": _pythonpath()})
    raise typer.Exit(completed.returncode)


def write_agent_loop_config(folder: Path) -> Path:
    """verl's agent-loop config file naming our loop, which verl's workers load in their processes."""
    from toolorchestra.integrations.verl import AGENT_NAME
    from toolorchestra.integrations.verl.config import AGENT_LOOP_CLASS

    path = folder / "agent_loops.yaml"
    path.write_text(f"- name: {AGENT_NAME}\n  _target_: {AGENT_LOOP_CLASS}\n")
    return path


def _model_dir(path: str) -> str | None:
    """An HF dir for our own model names (SmolLM2's GGUF is converted once); None keeps model.path."""
    from toolorchestra.bench.eval import local_orchestrators

    if path not in local_orchestrators() or Path(path).exists():
        return None
    from toolorchestra.backends.local import resolve_model_dir

    return str(resolve_model_dir(path))


def _env_data_dir(data_dir: Path | None) -> Path | None:
    from toolorchestra.envs.registry import resolve_data_dir
    from toolorchestra.errors import UserError

    try:
        return resolve_data_dir(data_dir)
    except UserError:
        if data_dir is not None:
            raise
        return None  # the workers resolve it themselves ($TOOLORCHESTRA_DATA on the cluster)


def _pythonpath() -> str:
    """PYTHONPATH with this package's source root first, so verl's Ray workers import the same code."""
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([root, *[part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]])
