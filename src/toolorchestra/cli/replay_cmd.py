"""`toolorchestra replay`: check a directory in the replay format, import other layouts into it, and record a
pool's live endpoints into it.

- `replay check DIR`: validates every file (the first error names file, line and field; exit 2) and prints
  per model its coverage, accuracy, cost and latency over the questions every model answered;
- `replay import-routerbench CSV... --out DIR`: RouterBench-style wide CSVs into the format;
- `replay record QUESTIONS --config POOL --out DIR`: every model of a catalog tool answers every question once,
  graded, priced and timed (bench/record.py); a rerun asks only what is missing.
The format itself: docs/replay.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from toolorchestra.cli.console import console as cli_console
from toolorchestra.cli.console import table
from toolorchestra.errors import EvalError, UserError

if TYPE_CHECKING:
    from toolorchestra.bench.record import ModelTally

replay_app = typer.Typer(
    help="Replay worlds from your own logs: check a directory, import other layouts (format: docs/replay.md).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(replay_app, name="replay")


@replay_app.command("check")
def check(directory: Path = typer.Argument(..., help="a directory in the replay format")) -> None:
    """Validate DIR and print per model its coverage, accuracy, cost and latency."""
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
    columns = ("model", "answered", "coverage", "accuracy", "cost $", "$/question", "latency mean s", "cost from")
    rows = [
        (
            row.model,
            f"{row.answered}/{row.questions}",
            f"{row.answered / max(row.questions, 1):.1%}",
            f"{row.accuracy:.4f}",
            f"{row.cost_usd:.4f}",
            f"{row.cost_per_task_usd:.6f}",
            f"{row.latency_mean_s:.2f}",
            row.cost_source,
        )
        for row in world_summary(env)
    ]
    console.print(table("per model, over the kept questions", columns, rows))
    if not sum(kept.values()):
        raise UserError(f"{directory}: no question was answered by every model, so the world has no task")


@replay_app.command("import-routerbench")
def import_routerbench(
    csvs: list[Path] = typer.Argument(..., help="RouterBench-style wide CSVs (e.g. ../shared/data/routerbench/*.csv)"),
    out: Path = typer.Option(..., "--out", help="the replay directory to write (new or empty)"),
) -> None:
    """Convert RouterBench-style wide CSVs into a replay directory (then: --env replay:DIR)."""
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


@replay_app.command("record")
def record(
    questions: Path = typer.Argument(..., help="questions.jsonl of the replay format: id, problem, answer, ..."),
    config: Path = typer.Option(..., "--config", "-c", help="the catalog whose endpoints answer"),
    out: Path = typer.Option(..., "--out", help="the replay directory to write (a rerun adds what is missing)"),
    tool: str = typer.Option("answer", "--tool", help="the tool whose labelled models are asked"),
    models: str | None = typer.Option(None, "--models", help="comma-separated models or labels (default: all)"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="ask only the first N questions"),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="calls in flight at once"),
    judge: str | None = typer.Option(
        None,
        "--judge",
        help="a catalog model that grades a reply the format's rule does not match (default: that rule alone)",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Ask every model of a catalog's tool every question, once, and write their graded answers, dollars and
    seconds to OUT as a replay world (then: replay check, profile --env replay:OUT, run --policy reader)."""
    import asyncio

    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.bench.record import check_questions, record_answers, recorded_labels
    from toolorchestra.catalog import load_catalog
    from toolorchestra.envs.live.judge import LiveJudge
    from toolorchestra.envs.replay.format import read_questions
    from toolorchestra.tools.factory import build_tools

    catalog = load_catalog(config)
    names = [model.name for model in catalog.models]
    if judge is not None and judge not in names:
        raise UserError(f"--judge {judge}: no such model in {config}; its models: {', '.join(names)}")
    tasks = read_questions(questions)[:limit]
    check_questions(tasks, out)

    async def record_all() -> list[ModelTally]:
        pool = ModelPool(catalog.models)
        try:
            tools = build_tools(catalog.tools, pool)
            wanted = [name.strip() for name in models.split(",") if name.strip()] if models else None
            labels = recorded_labels(tools, tool, wanted)
            grader = LiveJudge(pool, judge) if judge is not None else None
            return await record_answers(tools, tool, labels, tasks, out, concurrency, grader, not no_progress)
        finally:
            await pool.aclose()

    tallies = asyncio.run(record_all())
    _print_tallies(tallies, out)
    failed = [tally for tally in tallies if tally.errors]
    if failed:
        first = "; ".join(f"{tally.model}: {tally.errors[0]}" for tally in failed[:3])
        calls = sum(len(tally.errors) for tally in failed)
        every = all(tally.recorded == 0 and tally.skipped == 0 for tally in tallies)
        if every:
            raise EvalError(f"every call failed, so nothing was written ({first}); check the endpoints and rerun")
        raise EvalError(
            f"{calls} calls failed and nothing was written for them ({first}); the answers that came back are "
            "kept, and rerunning the same command asks only what is missing"
        )


def _print_tallies(tallies: list[ModelTally], out: Path) -> None:
    console = cli_console()
    columns = ("model", "label", "asked now", "written", "accuracy of written", "cost $", "failed", "already")
    rows = [
        (
            tally.model,
            tally.label,
            str(tally.asked),
            str(tally.recorded),
            f"{tally.correct / tally.recorded:.4f}" if tally.recorded else "-",
            f"{tally.cost_usd:.6f}",
            str(len(tally.errors)),
            str(tally.skipped),
        )
        for tally in tallies
    ]
    console.print(table(f"recorded to {out}", columns, rows))
    judged = sum(tally.judged for tally in tallies)
    if judged:
        judge_cost = sum(tally.judge_cost_usd for tally in tallies)
        console.print(f"the LLM judge graded {judged} replies for ${judge_cost:.6f} (not in the models' cost)")
    if any(tally.recorded or tally.skipped for tally in tallies):
        console.print(
            f"next: toolorchestra replay check {out}; toolorchestra profile --env replay:{out} --out profiles.yaml",
            markup=False,
            soft_wrap=True,
        )
