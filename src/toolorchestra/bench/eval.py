"""The eval runner: run policies over an env's tasks, save scored trajectories, write metrics.

`run_eval` builds a request's env, tasks and policies (bench/request.py), claims the output dir and executes the
episodes in this process (`evaluate`) or on Ray actors (bench/ray_eval.py, with --ray). Both executors store
through bench/rundir.py, which describes the layout of an output dir (run.json, trajectories.jsonl,
metrics.json, decisions.csv) and resumes a killed run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import write_trajectory
from toolorchestra.bench.policies import Policy
from toolorchestra.bench.progress import ProgressBar
from toolorchestra.bench.request import (
    EvalRequest,
    build_env,
    first_per_subtask,
    local_orchestrators,
    request_policies,
    run_episode,
    tasks_with_ids,
)
from toolorchestra.bench.rundir import TRAJECTORIES, claim_dir, finished, write_results
from toolorchestra.envs.base import Env, Task
from toolorchestra.errors import UserError

# Re-exported: callers name the eval entry points and the dir helpers through this module.
__all__ = ["EvalRequest", "claim_dir", "evaluate", "local_orchestrators", "run_episode", "run_eval"]


def run_eval(request: EvalRequest) -> dict[str, Any]:
    """Build env and policies, run what is not done yet (here, or on Ray with request.ray), write and return the
    metrics."""
    if request.limit is not None and request.limit < 1:
        raise UserError(f"--limit {request.limit}: expected a positive number of tasks")
    if request.concurrency < 1:
        raise UserError(f"--concurrency {request.concurrency}: expected at least 1")
    env = build_env(request)
    if request.per_subtask is not None and request.per_subtask < 1:
        raise UserError(f"--per-subtask {request.per_subtask}: expected a positive number of tasks")
    tasks = env.tasks(request.split)
    if request.task_ids:
        tasks = tasks_with_ids(tasks, request.task_ids, f"--env {request.env} --split {request.split}")
    if request.per_subtask is not None:
        tasks = first_per_subtask(tasks, request.per_subtask)
    tasks = tasks[: request.limit]
    if not tasks:
        raise UserError(f"--env {request.env} --split {request.split}: no tasks")
    if request.tools:
        offered = sorted(tool.name for tool in env.tools_for(tasks[0]))
        unknown = [name for name in request.tools if name not in offered]
        if unknown:
            raise UserError(f"--tools: unknown tool(s) {', '.join(unknown)}; {request.env} offers {', '.join(offered)}")
    if request.prefer:
        check_preferred_tools(request.prefer, env, tasks)
    policies = request_policies(request, env)
    claim_dir(request.out, request.manifest())
    if request.ray:
        from toolorchestra.bench.ray_eval import run_eval_ray

        return run_eval_ray(request, policies, tasks, env)
    return asyncio.run(_evaluate_and_close(env, policies, tasks, request))


def check_preferred_tools(prefer: str, env: Env, tasks: Sequence[Task]) -> None:
    """A `--prefer tool:NAME` must name a tool or a label the env offers on some task: a typo would weigh nothing."""
    preference = Preference.parse(prefer)
    if not preference.tools:
        return
    offered: set[str] = set()
    for task in tasks:  # ToolScale's tools differ between domains
        for tool in env.tools_for(task):
            offered |= {tool.name} | {str(row["label"]) for row in tool.price_rows() if row.get("label")}
    preference.check_tools(offered)


async def _evaluate_and_close(
    env: Env, policies: list[Policy], tasks: list[Task], request: EvalRequest
) -> dict[str, Any]:
    try:
        return await evaluate(
            env,
            policies,
            tasks,
            request.out,
            concurrency=request.concurrency,
            delay_s=request.delay_s,
            progress=request.progress,
            header={**request.manifest(), "limit": request.limit},
        )
    finally:
        for policy in policies:
            await policy.aclose()


async def evaluate(
    env: Env,
    policies: Sequence[Policy],
    tasks: Sequence[Task],
    out: Path,
    *,
    concurrency: int = 8,
    delay_s: float = 0.0,
    progress: bool = True,
    header: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run every (policy, task) episode not yet in out/trajectories.jsonl; return the metrics."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRAJECTORIES
    done = finished(path)
    jobs = [(policy, task) for policy in policies for task in tasks if (policy.name, task.id) not in done]
    for policy in policies:
        policy.prepare([task for p, task in jobs if p is policy])
    limit = asyncio.Semaphore(concurrency)
    total = len(policies) * len(tasks)
    with ProgressBar("eval", progress, total=total, done=total - len(jobs)) as bar:

        async def one(policy: Policy, task: Task) -> None:
            async with limit:
                if delay_s:
                    await asyncio.sleep(delay_s)
                trajectory = await run_episode(env, policy, task)
                write_trajectory(path, trajectory)
                bar.advance(trajectory.correct)

        await asyncio.gather(*(one(policy, task) for policy, task in jobs))
    return write_results(out, env, policies, tasks, header or {})
