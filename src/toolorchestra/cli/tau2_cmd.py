"""`toolorchestra tau2 ...`: tau2-bench commands. `tau2 rescore FILE` re-scores a results file with tau2's evaluator.

tau2 itself is imported only when a command runs (see toolorchestra.integrations.tau2.runtime).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from toolorchestra.cli.console import console as cli_console
from toolorchestra.cli.console import table

if TYPE_CHECKING:
    from toolorchestra.integrations.tau2.rescore import RescoreReport, SimulationScore

tau2_app = typer.Typer(
    name="tau2", help="tau2-bench: re-score results files with tau2's own evaluator.", no_args_is_help=True
)


class Domain(StrEnum):
    airline = "airline"
    retail = "retail"
    telecom = "telecom"


class TaskIdsOption(StrEnum):
    auto = "auto"
    file = "file"


def register(app: typer.Typer) -> None:
    app.add_typer(tau2_app, name="tau2")


@tau2_app.command("rescore")
def rescore_command(
    file: Path = typer.Argument(..., help="A tau2 results JSON (leaderboard format: info, tasks, simulations)."),
    domain: Domain | None = typer.Option(
        None, "--domain", help="Domain to score against. Default: the file's info.environment_info.domain_name."
    ),
    task_ids: TaskIdsOption = typer.Option(
        TaskIdsOption.auto,
        "--task-ids",
        help="auto: the file's task_id, unless "
        "the recorded checks identify another installed task; file: always the "
        "file's task_id.",
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write every row and the summary to this JSON file."
    ),
) -> None:
    """Re-score every simulation of FILE with the installed tau2 evaluator and compare with its recorded reward.

    One row per simulation, a reason for every disagreement, then `agree N/TOTAL`. Exits 0 when it ran:
    disagreements are findings, not errors."""
    from toolorchestra.integrations.tau2.rescore import rescore_file

    report = rescore_file(file, domain=domain.value if domain else None, task_ids=task_ids.value)
    _print_report(report)
    if json_out is not None:
        report.write_json(json_out)
        typer.echo(f"wrote {json_out}")


def _print_report(report: RescoreReport) -> None:
    console = cli_console()  # wide when piped: the reasons column is the point of the table
    title = f"{report.path} ({report.domain}; tau2 {report.tau2_version}; task ids: {report.task_ids})"
    columns = ("simulation", "task", "trial", "recorded", "ours", "agree", "reason / note")
    scores = table(title, columns, overflow="fold")
    for score in report.scores:
        scores.add_row(
            _short_id(score.simulation_id),
            _task_cell(score),
            "-" if score.trial is None else str(score.trial),
            _reward(score.recorded),
            _reward(score.ours),
            "yes" if score.agree else "NO",
            "; ".join(score.reasons if not score.agree else score.notes),
            style=None if score.agree else "red",
        )
    console.print(scores)
    if report.relabelled_count:
        console.print(
            f"{report.relabelled_count} of {len(report.scores)} simulations were scored against the task "
            f"their recorded checks identify, not their task_id (--task-ids file: score by task_id)",
            markup=False,
        )
    console.print(report.summary_line(), markup=False)


def _short_id(simulation_id: str) -> str:
    """A uuid's first 8 characters (unique enough within one file); a short id whole."""
    return simulation_id if len(simulation_id) <= 12 else simulation_id[:8]


def _task_cell(score: SimulationScore) -> str:
    if score.scored_task_id is None or score.scored_task_id == score.file_task_id:
        return score.file_task_id
    return f"{score.scored_task_id} (file: {score.file_task_id})"


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
