"""Ray-parallel evaluation (`toolorchestra eval --ray [--num-workers N] [--ray-address ADDR]`).

The driver claims the output dir, skips finished episodes and writes trajectories.jsonl, metrics.json and
decisions.csv through the same run-dir store as `evaluate` (bench/rundir.py), so resume and metrics are unchanged
and a run may mix plain and Ray sessions. The pending tasks go in small chunks to N Ray actors; each actor builds
its own env and policies from the request (they hold backends and models, which do not cross processes) and plays
its chunk with the request's asyncio concurrency. Ray is local unless an address is given ("auto" joins the
cluster this machine belongs to).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolorchestra.agent.trajectory import write_trajectory
from toolorchestra.bench.request import EvalRequest, build_env, request_policies, run_episode
from toolorchestra.bench.rundir import TRAJECTORIES, finished, write_results
from toolorchestra.envs.base import Task
from toolorchestra.errors import UserError

CHUNKS_PER_WORKER = 4


def run_eval_ray(
    request: EvalRequest, policies: Sequence[Any], tasks: Sequence[Task], env: Any = None
) -> dict[str, Any]:
    """Play the pending episodes on Ray actors; write and return the metrics as `evaluate` does."""
    if request.num_workers < 1:
        raise UserError(f"--num-workers {request.num_workers}: expected at least 1")
    path = request.out / TRAJECTORIES
    done = finished(path)
    pending = [task.id for task in tasks if any((policy.name, task.id) not in done for policy in policies)]
    if pending:
        for trajectory in _play_on_ray(_portable(request), pending, done):
            write_trajectory(path, trajectory)
    return write_results(request.out, env, policies, tasks, {**request.manifest(), "limit": request.limit})


def _portable(request: EvalRequest) -> EvalRequest:
    """The request with absolute paths (actors may start elsewhere) and no progress bar."""
    from toolorchestra.envs.registry import resolve_data_dir

    return replace(
        request,
        data_dir=resolve_data_dir(request.data_dir),
        out=request.out.resolve(),
        config=request.config.resolve() if request.config else None,
        progress=False,
        prices=request.prices.resolve() if request.prices else None,
    )


def _play_on_ray(request: EvalRequest, task_ids: list[str], done: set[tuple[str, str]]) -> Any:
    """Yield finished trajectories as chunks come back from the actors."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'toolorchestra[ray]' (or run without --ray)") from None

    _init_ray(request)
    # Any: ray types an actor class's methods as plain callables, without their `.remote`
    worker_class: Any = ray.remote(num_cpus=0)(EvalWorker)
    workers = [worker_class.remote(request) for _ in range(min(request.num_workers, len(task_ids)))]
    size = max(1, -(-len(task_ids) // (len(workers) * CHUNKS_PER_WORKER)))
    chunks = [task_ids[start : start + size] for start in range(0, len(task_ids), size)]
    running = {}
    for worker in workers:
        if chunks:
            running[worker.run.remote(chunks.pop(0), sorted(done))] = worker
    try:
        while running:
            [ready], _ = ray.wait(list(running), num_returns=1)
            worker = running.pop(ready)
            if chunks:
                running[worker.run.remote(chunks.pop(0), sorted(done))] = worker
            yield from ray.get(ready)
    finally:
        for worker in workers:
            ray.kill(worker)


def _init_ray(request: EvalRequest) -> None:
    import ray

    if ray.is_initialized():
        return
    source = str(Path(__file__).resolve().parents[2])
    env_vars = {"PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    where: dict[str, Any] = (
        {"address": request.ray_address}
        if request.ray_address
        else {"num_cpus": max(os.cpu_count() or 1, request.num_workers), "include_dashboard": False}
    )
    ray.init(**where, log_to_driver=False, runtime_env={"env_vars": env_vars})


class EvalWorker:
    """One Ray actor: the request's env and policies, built once, playing chunks of tasks."""

    def __init__(self, request: EvalRequest) -> None:
        self.request = request
        self.env = build_env(request)
        self.tasks = {task.id: task for task in self.env.tasks(request.split)}
        self.policies = request_policies(request, self.env)

    async def run(self, task_ids: list[str], done: list[tuple[str, str]]) -> list[Any]:
        """The trajectories of these tasks' unfinished episodes (an async actor method: Ray runs it in the
        actor's event loop)."""
        tasks = [self.tasks[task_id] for task_id in task_ids]
        finished = {(policy, task) for policy, task in done}
        jobs = [(policy, task) for policy in self.policies for task in tasks if (policy.name, task.id) not in finished]
        for policy in self.policies:
            policy.prepare([task for p, task in jobs if p is policy])
        limit = asyncio.Semaphore(self.request.concurrency)

        async def one(policy: Any, task: Task) -> Any:
            async with limit:
                if self.request.delay_s:
                    await asyncio.sleep(self.request.delay_s)
                return await run_episode(self.env, policy, task)

        return list(await asyncio.gather(*(one(policy, task) for policy, task in jobs)))
