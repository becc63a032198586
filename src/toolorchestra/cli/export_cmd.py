"""`toolorchestra export-results`: copy eval runs' decisions.csv and metrics.json into results/<world>/<policy>/."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("export-results")(export_command)


def export_command(
    runs: list[Path] = typer.Argument(..., help="Eval output dirs (with metrics.json), or dirs holding them."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Results dir: results/<world> (e.g. results/routerbench), or results (the world's dir is made under it).",
    ),
) -> None:
    """Copy each policy's decisions.csv and metrics.json into OUT/<policy> (':' and '/' as '-'); runs of one
    policy under several --prefer values share one dir (metrics.json: by_preference)."""
    from toolorchestra.bench.export import export_results

    for target, units in export_results(runs, out).items():
        preferences = ", ".join(f"{unit.preference} (n={unit.metrics.get('n')})" for unit in units)
        typer.echo(f"{target}: {units[0].policy} [{preferences}]")
