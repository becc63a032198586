"""`toolorchestra envs ...`: list environment names, describe one (task counts per domain and family)."""

from __future__ import annotations

from pathlib import Path

import typer

envs_app = typer.Typer(name="envs", help="Environments: list names, describe task counts.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(envs_app, name="envs")


@envs_app.command("list")
def list_command() -> None:
    """Print every registered environment name."""
    from toolorchestra.envs.registry import env_names

    for name in env_names():
        typer.echo(name)


@envs_app.command("describe")
def describe_command(
    env: str = typer.Argument(..., help="Environment name, e.g. toolscale:all."),
    split: str = typer.Option("test", "--split", help="Which split to count."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Shared data dir. Default: $TOOLORCHESTRA_DATA or ../shared/data."
    ),
) -> None:
    """Print the task counts of a split: per domain and family for ToolScale, per subtask otherwise."""
    from toolorchestra.envs.registry import make_env

    environment = make_env(env, data_dir)
    tasks = environment.tasks(split)
    typer.echo(f"{env} split={split}: {len(tasks)} tasks")
    table: dict[str, dict[str, int]] = {}
    for task in tasks:
        group = str(task.meta.get("domain") or task.subtask or "-")
        family = str(task.meta.get("family") or "tasks")
        table.setdefault(group, {}).setdefault(family, 0)
        table[group][family] += 1
    families = sorted({family for row in table.values() for family in row})
    typer.echo("\t".join(["domain", *families, "total"]))
    for group in sorted(table):
        row = table[group]
        typer.echo("\t".join([group, *(str(row.get(family, 0)) for family in families), str(sum(row.values()))]))
