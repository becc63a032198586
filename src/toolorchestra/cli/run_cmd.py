"""`toolorchestra run "question"`: one episode over a pool, steps shown as they happen."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from toolorchestra.agent.trajectory import Step, Trajectory, write_trajectory
from toolorchestra.cli.console import console as cli_console
from toolorchestra.cli.console import table
from toolorchestra.errors import UserError


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    question: str = typer.Argument(..., help="The task for the orchestrator."),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="Catalog YAML (models and tools). Default: the embedded SmolLM2 pool."
    ),
    prefer: str | None = typer.Option(
        None, "--prefer", help="accuracy | cost | latency | local | tool:NAME | KEY=WEIGHT,..."
    ),
    max_turns: int = typer.Option(6, "--max-turns", min=1, help="Stop after this many orchestrator turns."),
    max_budget: float | None = typer.Option(
        None, "--max-budget", min=0.0, help="Stop once this many dollars are spent."
    ),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0, help="Orchestrator sampling temperature."),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="JSON/JSONL {title, text} corpus for the search tool of the default pool."
    ),
    save: Path | None = typer.Option(None, "--save", help="Append the trajectory to this JSONL file."),
    as_json: bool = typer.Option(False, "--json", help="Print the trajectory as JSON instead of the step view."),
    policy: str = typer.Option(
        "auto",
        "--policy",
        help="auto: the reader when the catalog's answer tool offers two or more labels that all carry a "
        "`profile:` (or --profiles is given), else the orchestrator | orchestrator: the catalog's orchestrator "
        "model writes the calls | reader[:MODEL]: the answer goes to the label whose price and profile give the "
        "highest expected reward under --prefer, whatever its name (agent/reader.py); MODEL reads the question "
        "(default smollm2-135m).",
    ),
    calibration: str | None = typer.Option(
        None,
        "--calibration",
        help="With --policy reader and profiles of several task types: the replay world whose train split places "
        "the question among the types (default: the one the profiles name as `measured_on`).",
    ),
    profiles: Path | None = typer.Option(
        None,
        "--profiles",
        help="With --policy reader: a file `toolorchestra profile` wrote (model name -> profile), for the "
        "catalog's models of those names, in place of their `profile:`.",
    ),
) -> None:
    """Answer QUESTION with an orchestrator that calls tools and other models; print each step's tokens and dollars."""
    from toolorchestra.bench.policies import live_reader
    from toolorchestra.catalog import catalog_from_options

    catalog = catalog_from_options(config, corpus)
    catalog, reader = live_reader(catalog, policy, prefer, calibration, profiles)
    if reader is not None and (max_budget is not None or temperature > 0):
        # the reader follows its plan (at most three priced calls) and samples nothing: a cap or temperature it
        # ignored would mislead
        chosen = " (chosen by --policy auto: the answer labels all carry profiles)" if policy == "auto" else ""
        raise UserError(f"--max-budget and --temperature are read by --policy orchestrator only{chosen}")
    if save:
        save.open("a", encoding="utf-8").close()  # a file that cannot be written fails before any call is paid
    if not as_json and policy == "auto":
        cli_console().print(f"[dim]policy: {'reader' if reader else 'orchestrator'} (auto)[/]")
    from toolorchestra.agent.loop import Orchestrator
    from toolorchestra.agent.preference import Preference
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.envs.base import Task
    from toolorchestra.tools.factory import build_tools

    async def episode() -> Trajectory:
        """One episode over the catalog's pool: the catalog's orchestrator model writes the calls, or the reader
        answers over the answer labels (it places the question among the profiles' task types, with
        --calibration, weighs each label's expected reward, and answers with the best one)."""
        pool = ModelPool(catalog.models)
        task = Task(id="cli", split="cli", prompt=question)
        try:
            tools = build_tools(catalog.tools, pool)
            if reader is not None:
                reader.check_pool(tools)
                trajectory = await reader.run(task, tools)
                if not as_json:
                    for step in trajectory.steps:
                        _print_step(step)
                return trajectory
            local_tools = [s.name for s in catalog.tools if s.type in ("python", "search")]
            orchestrator = Orchestrator(
                pool.backend(catalog.orchestrator),
                tools,
                model_name=catalog.orchestrator,
                price=catalog.model(catalog.orchestrator).price,
                preference=Preference.parse(prefer, local_tools),
                max_turns=max_turns,
                max_budget_usd=max_budget,
                temperature=temperature,
                on_step=None if as_json else _print_step,
            )
            return await orchestrator.run(task)
        finally:
            await pool.aclose()

    trajectory = asyncio.run(episode())
    if save:
        write_trajectory(save, trajectory)
    if as_json:
        typer.echo(json.dumps(trajectory.to_record(), indent=2, ensure_ascii=False))
    else:
        _print_summary(trajectory)
    _exit_if_failed(trajectory)


def _exit_if_failed(trajectory: Trajectory) -> None:
    """Exit 1 with one line on stderr when the episode ended in an error (e.g. the orchestrator's backend
    failed), so that scripts see the failure; the trajectory was already printed and saved."""
    if trajectory.stop_reason != "error":
        return
    errors = [step.error for step in trajectory.steps if step.error]
    cause = " ".join(errors[-1].split()) if errors else "no cause recorded"
    typer.secho(f"error: the episode ended in an error: {cause}", fg="red", err=True)
    raise typer.Exit(1)


def _print_step(step: Step) -> None:
    console = cli_console()
    cost = f"{step.prompt_tokens}+{step.completion_tokens} tok  ${step.cost_usd:.6f}  {step.latency_s:.2f}s"
    if step.kind == "orchestrator":
        console.print(f"[bold cyan]turn {step.turn}[/] [cyan]{step.name}[/]  {cost}")
        if step.output.strip():
            console.print(f"  [dim]{_clip(step.output, 400)}[/]")
    else:
        who = f" -> {step.label} ({step.model})" if step.model else ""
        console.print(f"  [bold magenta]{step.name}[/]{who} {json.dumps(step.arguments)[:200]}  {cost}")
        if step.error:
            console.print(f"    [red]{_clip(step.error, 300)}[/]")
        else:
            console.print(f"    {_clip(step.output, 300)}")
    if step.kind == "orchestrator" and step.error:
        console.print(f"  [red]{_clip(step.error, 300)}[/]")


def _clip(text: str, limit: int) -> str:
    from rich.markup import escape

    text = text.strip().replace("\n", " | ")
    return escape(text if len(text) <= limit else text[:limit] + " ...")


def _print_summary(trajectory: Trajectory) -> None:
    console = cli_console()
    row = (
        str(len(trajectory.steps)),
        str(trajectory.prompt_tokens),
        str(trajectory.completion_tokens),
        f"{trajectory.cost_usd:.6f}",
        f"{trajectory.latency_s:.2f}",
        trajectory.stop_reason or "-",
    )
    console.print(table("summary", ("steps", "prompt tok", "completion tok", "cost $", "latency s", "stop"), [row]))
    answer = trajectory.final_answer if trajectory.final_answer is not None else "(no answer)"
    console.print(f"[bold]answer:[/] {_clip(answer, 2000)}")
