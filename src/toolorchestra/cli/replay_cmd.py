"""`toolorchestra replay`: check a directory in the replay format, and import other layouts into it.

- `replay check DIR`: validates every file (the first error names file, line and field; exit 2) and prints
  per model its coverage, accuracy, cost and latency over the questions every model answered;
- `replay import-routerbench CSV... --out DIR`: RouterBench-style wide CSVs into the format.
The format itself: docs/replay.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

replay_app = typer.Typer(
    help="Replay worlds from your own logs: check a directory, import other layouts (format: docs/replay.md).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(replay_app, name="replay")


@replay_app.command("check")
def check(directory: Path = typer.Argument(..., help="a directory in the replay format")) -> None:
    """Validate DIR and print per model its coverage, accuracy, cost and latency."""
    from rich.table import Table

    from toolorchestra.cli.console import console as cli_console
    from toolorchestra.envs.replay.world import DirectoryWorldEnv, world_summary

    env = DirectoryWorldEnv(directory)
    data = env.data
    kept = {split: len(tasks) for split, tasks in data.tasks.items()}
    console = cli_console()
    console.print(
        f"{directory}: {env.loaded.questions} questions, {len(env.models())} models; kept train "
        f"{kept['train']}, test {kept['test']}; left out (some model did not answer them): train "
        f"{data.dropped['train']}, test {data.dropped['test']}",
        markup=False,
        soft_wrap=True,
    )
    table = Table(title="per model, over the kept questions")
    for column in ("model", "answered", "coverage", "accuracy", "cost $", "$/question", "latency mean s", "cost from"):
        table.add_column(column)
    for row in world_summary(env):
        table.add_row(
            row.model,
            f"{row.answered}/{row.questions}",
            f"{row.answered / max(row.questions, 1):.1%}",
            f"{row.accuracy:.4f}",
            f"{row.cost_usd:.4f}",
            f"{row.cost_per_task_usd:.6f}",
            f"{row.latency_mean_s:.2f}",
            row.cost_source,
        )
    console.print(table)
    if not sum(kept.values()):
        from toolorchestra.errors import UserError

        raise UserError(f"{directory}: no question was answered by every model, so the world has no task")


@replay_app.command("import-routerbench")
def import_routerbench(
    csvs: list[Path] = typer.Argument(..., help="RouterBench-style wide CSVs (e.g. ../shared/data/routerbench/*.csv)"),
    out: Path = typer.Option(..., "--out", help="the replay directory to write (new or empty)"),
) -> None:
    """Convert RouterBench-style wide CSVs into a replay directory (then: --env replay:DIR)."""
    from toolorchestra.cli.console import console as cli_console
    from toolorchestra.envs.replay.importers import import_routerbench as convert

    summary = convert(csvs, out)
    console = cli_console()
    console.print(
        f"wrote {out}: {summary.questions['train']} train and {summary.questions['test']} test questions, "
        f"{len(summary.lines)} models, {summary.empty_cells} empty score/cost cells (no line written)",
        markup=False,
        soft_wrap=True,
    )
    console.print(f"next: toolorchestra replay check {out}", markup=False, soft_wrap=True)
