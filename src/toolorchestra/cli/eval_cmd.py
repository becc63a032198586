"""`toolorchestra eval`: run a policy over an environment's tasks and write trajectories and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    env: str = typer.Option(..., "--env", help="Environment: replay:routerbench | replay:frames."),
    policy: str = typer.Option(..., "--policy", help="single:MODEL | random | cheapest | per-subtask | "
                               "cascade[:LAMBDA] | router[:THRESHOLD] (no threshold: sweep) | oracle | orchestrator:MODEL"),
    out: Path = typer.Option(..., "--out", help="Output dir for run.json, trajectories.jsonl, metrics.json; "
                             "rerunning into it resumes."),
    split: str = typer.Option("test", "--split", help="train | test."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Only the first N tasks (a fixed mixed order)."),
    concurrency: int = typer.Option(8, "--concurrency", help="Episodes in flight at once."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random policy and of fitted baselines."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Shared data dir. Default: $TOOLORCHESTRA_DATA "
                                            "or ../shared/data."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Catalog YAML whose models orchestrator:MODEL "
                                          "may name (e.g. an OpenAI-compatible server)."),
    prefer: Optional[str] = typer.Option(None, "--prefer", help="Orchestrator preference: accuracy | cost | latency | "
                                         "KEY=WEIGHT,..."),
    max_turns: int = typer.Option(4, "--max-turns", min=1, help="Orchestrator turn cap per episode."),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Orchestrator tokens per turn."),
    tools: Optional[str] = typer.Option(None, "--tools", help="Comma-separated tools offered to the orchestrator "
                                        "(default: all the env offers, e.g. expert,answer)."),
    judge: Optional[str] = typer.Option(None, "--judge", help="replay:frames: grade free-text answers with this "
                                        "model of --config (an LLM judge) instead of normalized matching."),
    delay: float = typer.Option(0.0, "--delay", min=0.0, hidden=True,
                                help="Sleep this many seconds before each episode (tests kill a run mid-way)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
) -> None:
    """Evaluate POLICY on ENV: every episode's trajectory is saved as it ends, then metrics are written."""
    from toolorchestra.bench.eval import EvalRequest, run_eval

    request = EvalRequest(env=env, policy=policy, out=out, split=split, limit=limit, concurrency=concurrency,
                          seed=seed, data_dir=data_dir, config=config, prefer=prefer, max_turns=max_turns,
                          max_tokens=max_tokens, delay_s=delay, progress=not no_progress, judge=judge,
                          tools=[name.strip() for name in tools.split(",") if name.strip()] if tools else None)
    metrics = run_eval(request)
    _print_metrics(metrics, out)
    _fail_if_every_episode_failed(metrics)


def _print_metrics(metrics: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    entries = metrics.get("sweep") or [metrics]
    table = Table(title=f"{metrics['env']} {metrics['split']}", show_header=True)
    columns = ("policy", "n", "accuracy", "cost $", "$/task", "latency mean s", "p95 s", "calls/task", "errors")
    for column in columns:
        table.add_column(column)
    for entry in entries:
        table.add_row(entry["policy"], str(entry["n"]), f"{entry['accuracy']:.4f}", f"{entry['cost_usd']:.4f}",
                      f"{entry['cost_per_task_usd']:.6f}", f"{entry['latency_s']['mean']:.2f}",
                      f"{entry['latency_s']['p95']:.2f}", f"{entry['tool_calls_per_task']:.2f}",
                      str(entry.get("errors", 0)))
    console = Console(highlight=False)
    console.print(table)
    for entry in entries:
        if entry.get("errors"):
            console.print(f"{entry['policy']}: {entry['errors']} of {entry['n']} episodes failed; first errors:",
                          style="yellow", markup=False, soft_wrap=True)
            for error in entry.get("first_errors", []):
                console.print(f"  - {error}", style="yellow", markup=False, soft_wrap=True)
    console.print(f"wrote {out / 'trajectories.jsonl'} and {out / 'metrics.json'}")


def _fail_if_every_episode_failed(metrics: dict) -> None:
    """Exit non-zero (one clear message) when every episode failed: an accuracy of 0 says nothing then. A run
    where only some failed exits 0 (the table shows the count)."""
    from toolorchestra.errors import EvalError

    entries = metrics.get("sweep") or [metrics]
    episodes = sum(entry["n"] for entry in entries)
    if episodes and sum(entry.get("errors", 0) for entry in entries) == episodes:
        shown = []
        for entry in entries:
            shown += [error for error in entry.get("first_errors", []) if error not in shown]
        listed = "; ".join(f"({index}) {error}" for index, error in enumerate(shown[:3], 1))
        policy = metrics.get("spec") or metrics["policy"]
        raise EvalError(f"every episode failed ({episodes} of {episodes}; policy {policy}), so the accuracy means "
                        f"nothing. First errors: {listed}")
