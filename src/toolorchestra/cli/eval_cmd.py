"""`toolorchestra eval`: run a policy over an environment's tasks and write trajectories and metrics.

`--env tau2:DOMAIN` runs tau2-bench with the pool's orchestrator as the agent instead
(toolorchestra.integrations.tau2.run); the tau2-only options are grouped at the end."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from toolorchestra.cli.console import console as cli_console
from toolorchestra.cli.console import table
from toolorchestra.errors import EvalError, UserError

if TYPE_CHECKING:
    from rich.console import Console

    from toolorchestra.agent.trajectory import Trajectory


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)


def eval_command(
    env: str = typer.Option(
        ...,
        "--env",
        help="Environment: replay:routerbench | replay:frames | replay:DIR (a "
        "directory in the replay format, docs/replay.md) | tau2:airline | tau2:retail | "
        "tau2:telecom | toolscale:DOMAIN | toolscale:all | hle | hle:FILE | frames-live (live worlds, docs/hle.md).",
    ),
    policy: str | None = typer.Option(
        None,
        "--policy",
        help="single:MODEL | random | cheapest | per-subtask | "
        "cascade[:LAMBDA] | router[:THRESHOLD] (no threshold: sweep) | oracle | "
        "orchestrator:MODEL | reader[:MODEL] (decides from the labels' prices and profiles) | gold | noop "
        "(toolscale envs). Default: reader on replay worlds, the pool's orchestrator on tau2, hle and "
        "frames-live; required on toolscale.",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Output dir for run.json, trajectories.jsonl, metrics.json (tau2: "
        "also tau2_results.json); rerunning into it resumes.",
    ),
    split: str | None = typer.Option(
        None,
        "--split",
        help="replay: train | test (default test). tau2: a tau2 task split (default base, the leaderboard's).",
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N tasks (a fixed mixed order)."),
    per_subtask: int | None = typer.Option(
        None, "--per-subtask", help="Only the first N tasks of each subtask (toolscale: domain/family), before --limit."
    ),
    concurrency: int = typer.Option(8, "--concurrency", help="Episodes in flight at once (tau2: simulations)."),
    seed: int | None = typer.Option(
        None,
        "--seed",
        help="Seed of the random policy and of fitted baselines "
        "(default 0); tau2: of the trials (default 300, tau2's).",
    ),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Shared data dir. Default: $TOOLORCHESTRA_DATA or ../shared/data."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        "-c",
        help="Catalog YAML whose models orchestrator:MODEL may name (e.g. an OpenAI-compatible server).",
    ),
    prefer: str | None = typer.Option(
        None, "--prefer", help="Orchestrator preference: accuracy | cost | latency | KEY=WEIGHT,..."
    ),
    max_turns: int = typer.Option(
        4, "--max-turns", min=1, help="Orchestrator turn cap per episode (tau2: model calls per agent message)."
    ),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, help="Orchestrator tokens per turn."),
    tools: str | None = typer.Option(
        None,
        "--tools",
        help="Comma-separated tools offered to the orchestrator (default: all the env offers, e.g. expert,answer).",
    ),
    judge: str | None = typer.Option(
        None,
        "--judge",
        help="replay:frames: grade free-text answers with this "
        "model of --config (an LLM judge) instead of normalized matching. hle, frames-live: the LLM judge "
        "after exact/normalized match: a pool model, or none (match only); default: the pool's judge.",
    ),
    context: str = typer.Option(
        "auto",
        "--context",
        help="orchestrator:MODEL: paper (the request rebuilt every turn from the problem and what was gathered, "
        "first valid call only: the paper's protocol) or history (a growing chat); auto: paper on hle and "
        "frames-live, else history.",
    ),
    price_scale: list[str] | None = typer.Option(
        None,
        "--price-scale",
        help="replay: MODEL=X multiplies that "
        "model's prices and recorded costs by X at evaluation "
        "(repeatable; MODEL: a model name or its tool label).",
    ),
    prices: Path | None = typer.Option(
        None,
        "--prices",
        help="replay: a price sheet in the replay format "
        "(prices.yaml layout); the models it prices are charged at its prices, "
        "on tokens, even where a cost was recorded.",
    ),
    hold_out_models: str | None = typer.Option(
        None,
        "--hold-out-models",
        help="replay: comma-separated models "
        "the orchestrator was trained without (train config "
        "sampler.hold_out_models); they stay in the pool, and the "
        "metrics count the calls and answers that went to them.",
    ),
    profiles: str = typer.Option(
        "auto",
        "--profiles",
        help="replay: each label's capability profile in the orchestrator's prompt: train (measured on the "
        "world's train split), none, or a file of `toolorchestra profile`; auto: train, except for a shipped "
        "adapter trained without profiles.",
    ),
    rename_labels: int | None = typer.Option(
        None,
        "--rename-labels",
        help="replay: offer every model under a random label drawn with this seed (the renamed-labels test).",
    ),
    shuffle_labels: int | None = typer.Option(
        None,
        "--shuffle-labels",
        help="replay: offer the labels in a random order drawn with this seed, in the tools and the price table "
        "(does a decision follow a row's position?).",
    ),
    delay: float = typer.Option(
        0.0,
        "--delay",
        min=0.0,
        hidden=True,
        help="Sleep this many seconds before each episode (tests kill a run mid-way).",
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    use_ray: bool = typer.Option(
        False,
        "--ray",
        help="Run episodes on Ray actors (a local Ray unless "
        "--ray-address); resume and metrics as without it (needs the ray extra).",
    ),
    num_workers: int = typer.Option(
        2, "--num-workers", min=1, help="--ray: actors, each with --concurrency episodes in flight."
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="--ray: a Ray cluster to join (e.g. auto, or ray://HEAD:10001); default: start a local one.",
    ),
    task_ids: str | None = typer.Option(
        None,
        "--task-ids",
        help="Only these comma-separated task ids (of --split; tau2: any split), or @FILE: one id per line "
        "(e.g. @configs/eval/toolscale-test-200.txt).",
    ),
    num_trials: int = typer.Option(1, "--num-trials", min=1, help="tau2: trials per task (pass^k for k = 1..K)."),
    max_steps: int = typer.Option(200, "--max-steps", min=1, help="tau2: simulation step cap (tau2's max_steps)."),
    max_errors: int = typer.Option(10, "--max-errors", min=0, help="tau2: tool-error cap per simulation."),
    user_model: str | None = typer.Option(
        None,
        "--user-model",
        help="tau2: the user simulator, a model of the pool (default: the model behind the first expert label).",
    ),
    user_base_url: str | None = typer.Option(
        None,
        "--user-base-url",
        help="tau2: OpenAI-compatible base URL "
        "serving --user-model under its pool name (e.g. a `toolorchestra "
        "serve`); default: serve the pool in-process on 127.0.0.1.",
    ),
    user_max_tokens: int | None = typer.Option(
        None, "--user-max-tokens", min=1, help="tau2: max tokens per user simulator turn (default: the server's)."
    ),
) -> None:
    """Evaluate POLICY on ENV: every episode's trajectory is saved as it ends, then metrics are written."""
    from toolorchestra.integrations.tau2.run import is_tau2_env

    tau2 = is_tau2_env(env)
    _refuse_unread_options(
        env,
        tau2,
        {
            "--num-trials": num_trials != 1,
            "--max-steps": max_steps != 200,
            "--max-errors": max_errors != 10,
            "--user-model": user_model is not None,
            "--user-base-url": user_base_url is not None,
            "--user-max-tokens": user_max_tokens is not None,
        },
        {
            "--per-subtask": per_subtask is not None,
            "--tools": tools is not None,
            "--judge": judge is not None,
            "--context": context != "auto",
            "--price-scale": bool(price_scale),
            "--prices": prices is not None,
            "--hold-out-models": hold_out_models is not None,
            "--profiles": profiles != "auto",
            "--rename-labels": rename_labels is not None,
            "--shuffle-labels": shuffle_labels is not None,
            "--ray": use_ray,
        },
    )
    if tau2:
        _eval_tau2(
            env=env,
            policy=policy,
            out=out,
            split=split,
            limit=limit,
            concurrency=concurrency,
            seed=seed,
            config=config,
            prefer=prefer,
            max_turns=max_turns,
            max_tokens=max_tokens,
            task_ids=task_ids,
            num_trials=num_trials,
            max_steps=max_steps,
            max_errors=max_errors,
            user_model=user_model,
            user_base_url=user_base_url,
            user_max_tokens=user_max_tokens,
            progress=not no_progress,
        )
        return
    from toolorchestra.bench.eval import EvalRequest, run_eval
    from toolorchestra.envs.replay.world import parse_price_scale

    if context not in ("auto", "paper", "history"):
        raise UserError(f"--context {context!r}: expected auto, paper or history")
    if policy is None:
        policy = _default_policy(env, config, data_dir)
    if policy is None:
        raise UserError(f"--policy is required for --env {env}")
    if config is not None and not policy.startswith("orchestrator:") and not judge:
        _warn_unused_config(config, policy)
    if (rename_labels is not None or shuffle_labels is not None) and not policy.startswith(("orchestrator:", "reader")):
        typer.secho(
            f"warning: --rename-labels/--shuffle-labels do not change --policy {policy}: a baseline chooses a model "
            "by its name, not by the label or row it is offered under",
            fg="yellow",
            err=True,
        )
    request = EvalRequest(
        env=env,
        policy=policy,
        out=out,
        split=split or "test",
        limit=limit,
        per_subtask=per_subtask,
        task_ids=_task_ids(task_ids),
        concurrency=concurrency,
        seed=0 if seed is None else seed,
        data_dir=data_dir,
        config=config,
        prefer=prefer,
        max_turns=max_turns,
        max_tokens=max_tokens,
        delay_s=delay,
        progress=not no_progress,
        judge=judge,
        tools=[name.strip() for name in tools.split(",") if name.strip()] if tools else None,
        ray=use_ray,
        num_workers=num_workers,
        ray_address=ray_address,
        price_scale=parse_price_scale(price_scale) if price_scale else None,
        prices=prices,
        hold_out_models=_names(hold_out_models),
        profiles=profiles,
        rename_labels=rename_labels,
        shuffle_labels=shuffle_labels,
        context=context,
    )
    metrics = run_eval(request)
    _print_metrics(metrics, out)
    _fail_if_every_episode_failed(metrics)


def _default_policy(env: str, config: Path | None, data_dir: Path | None) -> str | None:
    """The orchestrator that runs without --policy: on a replay world the reader (it reads any world's pool,
    prices and profiles with no flag per world); on a live world the pool's orchestrator, --config's, else the
    embedded SmolLM2. Elsewhere (ToolScale) None: --policy is required."""
    from toolorchestra.envs.registry import REPLAY_PREFIX, is_live

    if env.startswith(REPLAY_PREFIX):
        return "reader"
    if not is_live(env):
        return None
    if config is None:
        return "orchestrator:smollm2-135m"
    from toolorchestra.catalog import load_catalog

    return f"orchestrator:{load_catalog(config).orchestrator}"


def _refuse_unread_options(env: str, tau2: bool, tau2_only: dict[str, bool], not_tau2: dict[str, bool]) -> None:
    """An option the env's eval path never reads is an error naming it, not a setting passed over in silence
    (`--num-trials 5` on a replay world ran one trial, `--price-scale` on tau2 charged the usual prices)."""
    unread = [flag for flag, given in (not_tau2 if tau2 else tau2_only).items() if given]
    if unread:
        what = "tau2 envs do not read" if tau2 else "only tau2 envs read"
        raise UserError(f"--env {env}: {what} {', '.join(unread)}")


def _warn_unused_config(config: Path, policy: str) -> None:
    """--config is read only by orchestrator:MODEL policies and --judge. Given to another policy, it is still
    validated (a broken file is an error either way), then named in a warning rather than passed over in silence;
    a warning, not an error, because documented commands pass one catalog to every policy they compare."""
    from toolorchestra.catalog import load_catalog

    load_catalog(config)
    typer.secho(
        f"warning: --config {config} is not used by --policy {policy} (only orchestrator:MODEL policies "
        "and --judge read it)",
        fg="yellow",
        err=True,
    )


def _task_ids(text: str | None) -> list[str] | None:
    """--task-ids: comma-separated ids, or @FILE with one id per line (blank lines and lines starting with #
    skipped; an id itself may hold a #, as replay ids do)."""
    if not text or not text.startswith("@"):
        return _names(text)
    path = Path(text[1:])
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--task-ids {text}: cannot read {path}: {exc.__class__.__name__}: {exc}") from None
    ids = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not ids:
        raise UserError(f"--task-ids {text}: {path} lists no task ids (expected one per line)")
    return ids


def _names(text: str | None) -> list[str] | None:
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    return names or None


def _eval_tau2(*, env: str, out: Path, task_ids: str | None, progress: bool, **options: object) -> None:
    from toolorchestra.integrations.tau2.run import Tau2EvalRequest, run_tau2_eval

    console = cli_console()
    ids = _task_ids(task_ids)
    request = Tau2EvalRequest(env=env, out=out, task_ids=ids, **options)  # type: ignore[arg-type]

    def show(trajectory: Trajectory) -> None:
        details = trajectory.score_details
        error = f"  error: {details['error']}" if details.get("error") else ""
        console.print(
            f"task {trajectory.task_id} trial {details.get('trial')}: reward {details.get('reward', 0):g} "
            f"({details.get('termination_reason')}), {details.get('duration_s', 0):.1f} s{error}",
            markup=False,
            soft_wrap=True,
        )

    metrics = run_tau2_eval(request, on_simulation=show if progress else None)
    _print_tau2_metrics(metrics, out, console)


def _print_tau2_metrics(metrics: dict, out: Path, console: Console) -> None:
    run = f"{metrics['n_tasks']} tasks, {metrics['n_simulations']} simulations, {metrics['policy']}"
    summary = [
        ("mean reward", f"{metrics['mean_reward']:.4f}"),
        *((f"pass^{k}", f"{value:.4f}") for k, value in metrics["pass_hat_k"].items()),
        ("terminations", ", ".join(f"{name} {count}" for name, count in metrics["termination_reasons"].items())),
    ]
    console.print(table(f"{metrics['env']} ({run})", ("metric", "value"), summary))
    groups = {group: metrics["cost"][group] for group in ("orchestrator", "experts", "user_simulator")}
    costs = [
        (
            group,
            str(entry["calls"]),
            str(entry["prompt_tokens"]),
            str(entry["completion_tokens"]),
            f"{entry['cost_usd']:.6f}",
            f"{entry['latency_s']:.1f}",
        )
        for group, entry in groups.items()
    ]
    columns = ("group", "calls", "prompt tok", "completion tok", "cost $", "seconds")
    console.print(table("cost by group", columns, costs))
    if metrics.get("errors"):
        console.print(
            f"{metrics['errors']} simulations failed; first errors: {metrics['first_errors']}",
            style="yellow",
            markup=False,
            soft_wrap=True,
        )
    console.print(f"wrote {out / metrics['results_file']}, {out / 'trajectories.jsonl'} and {out / 'metrics.json'}")


def _print_metrics(metrics: dict, out: Path) -> None:
    entries = metrics.get("sweep") or [metrics]
    columns = ("policy", "n", "accuracy", "cost $", "$/task", "latency mean s", "p95 s", "calls/task", "errors")
    rows = [
        (
            entry["policy"],
            str(entry["n"]),
            f"{entry['accuracy']:.4f}",
            f"{entry['cost_usd']:.4f}",
            f"{entry['cost_per_task_usd']:.6f}",
            f"{entry['latency_s']['mean']:.2f}",
            f"{entry['latency_s']['p95']:.2f}",
            f"{entry['tool_calls_per_task']:.2f}",
            str(entry.get("errors", 0)),
        )
        for entry in entries
    ]
    console = cli_console()
    console.print(table(f"{metrics['env']} {metrics['split']}", columns, rows))
    if metrics.get("judge"):  # live worlds: the paper's accounting, by role, with the judge apart
        _print_roles(metrics, console)
    for entry in entries:
        if entry.get("errors"):
            console.print(
                f"{entry['policy']}: {entry['errors']} of {entry['n']} episodes failed; first errors:",
                style="yellow",
                markup=False,
                soft_wrap=True,
            )
            for error in entry.get("first_errors", []):
                console.print(f"  - {error}", style="yellow", markup=False, soft_wrap=True)
    console.print(f"wrote {out / 'trajectories.jsonl'} and {out / 'metrics.json'}")


def _print_roles(metrics: dict, console: Console) -> None:
    title = f"by role (judge: {metrics['judge']['verdicts']}; no answer: {metrics.get('no_answer', 0)})"
    columns = ("role", "calls/question", "cost $", "$/question", "prompt tok", "completion tok", "s/question")
    rows = [
        (
            role,
            f"{entry['calls_per_question']:.2f}",
            f"{entry['cost_usd']:.4f}",
            f"{entry['cost_usd_per_question']:.6f}",
            str(entry["prompt_tokens"]),
            str(entry["completion_tokens"]),
            f"{entry['latency_s_per_question']:.2f}",
        )
        for role, entry in metrics["by_role"].items()
    ]
    console.print(table(title, columns, rows))


def _fail_if_every_episode_failed(metrics: dict) -> None:
    """Exit non-zero (one clear message) when every episode failed, or when none gave an answer (e.g. --tools
    left out the answer tool, or --max-turns ran out every time): an accuracy of 0 says nothing then. A run
    where only some failed exits 0 (the table shows the count)."""
    entries = metrics.get("sweep") or [metrics]
    episodes = sum(entry["n"] for entry in entries)
    if episodes and sum(entry.get("errors", 0) for entry in entries) == episodes:
        shown = list(dict.fromkeys(error for entry in entries for error in entry.get("first_errors", [])))
        listed = "; ".join(f"({index}) {error}" for index, error in enumerate(shown[:3], 1))
        policy = metrics.get("spec") or metrics["policy"]
        raise EvalError(
            f"every episode failed ({episodes} of {episodes}; policy {policy}), so the accuracy means "
            f"nothing. First errors: {listed}"
        )
    reasons = metrics.get("stop_reasons") or {}
    # the orchestrator loop records stop reason "answer" for every episode the answer tool ended
    if episodes and str(metrics.get("policy", "")).startswith("orchestrator:") and reasons and "answer" not in reasons:
        tools = metrics.get("tools")
        raise EvalError(
            f"no episode gave an answer ({episodes} of {episodes}; stop reasons "
            f"{', '.join(f'{key} {value}' for key, value in reasons.items()) or 'unknown'}), so the "
            f"accuracy means nothing. "
            + (f"--tools {','.join(tools)} offers no answer tool; " if tools and "answer" not in tools else "")
            + "an episode ends when the answer tool is called (see --tools and --max-turns)"
        )
