"""`toolorchestra report`: Markdown and HTML comparison of eval runs with a Pareto plot and usage chart."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("report")(report_command)


def report_command(
    runs: list[Path] = typer.Argument(..., help="Eval output dirs (with metrics.json), or dirs holding them."),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Dir for report.md, report.html, pareto.png, usage.png (and "
        "preferences.png when runs of one orchestrator differ only in --prefer).",
    ),
) -> None:
    """Compare eval runs: a table, accuracy vs cost (Pareto) and tool/model usage."""
    from toolorchestra.bench.report import build_report

    written = build_report(runs, out)
    for kind, path in written.items():
        typer.echo(f"{kind}: {path}")
