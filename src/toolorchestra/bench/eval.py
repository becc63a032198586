"""The eval runner: run policies over an env's tasks, save scored trajectories, write metrics.

Layout of an output dir:
- run.json: what was run (env, split, policy spec, seed and the orchestrator settings); a later run
  into the same dir must match it, and then resumes;
- trajectories.jsonl: one scored trajectory per line, appended and flushed as each episode ends, so
  a killed run keeps every finished episode and a rerun skips them;
- metrics.json: `metrics.summarize` of the policy over the (limited) task list, in task order; for a
  router sweep, one entry per threshold under "sweep" (report draws them as a curve);
- decisions.csv: one row per task (task_id, preference, label, model, correct, cost_usd, latency_s),
  see bench/decisions.py; a sweep writes decisions-router-<threshold>.csv per threshold.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from toolorchestra.agent.trajectory import Trajectory, read_trajectories, write_trajectory
from toolorchestra.bench.decisions import write_eval_decisions
from toolorchestra.bench.metrics import summarize
from toolorchestra.bench.policies import OrchestratorPolicy, Policy, parse_policy
from toolorchestra.envs.base import Env, Task
from toolorchestra.errors import UserError

log = logging.getLogger(__name__)

LOCAL_ORCHESTRATORS = ("smollm2-135m",)  # the untrained embedded model; trained ones ship as adapters


def local_orchestrators() -> list[str]:
    """Orchestrator models available by name: the embedded SmolLM2 and every shipped trained adapter."""
    from toolorchestra.backends.adapters import shipped_orchestrators

    return [*LOCAL_ORCHESTRATORS, *shipped_orchestrators()]


TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.json"
MANIFEST = "run.json"


@dataclass
class EvalRequest:
    env: str
    policy: str
    out: Path
    split: str = "test"
    limit: int | None = None
    per_subtask: int | None = None
    task_ids: list[str] | None = None  # --task-ids: only these tasks of the split, in the split's order
    concurrency: int = 8
    seed: int = 0
    data_dir: Path | None = None
    config: Path | None = None
    prefer: str | None = None
    max_turns: int = 4
    max_tokens: int = 256
    tools: list[str] | None = None
    judge: str | None = None
    delay_s: float = 0.0
    progress: bool = True
    ray: bool = False  # run episodes on Ray actors (bench/ray_eval.py); not part of the manifest
    num_workers: int = 2
    ray_address: str | None = None
    price_scale: dict[str, float] | None = None  # --price-scale MODEL=X: that model's prices times X
    prices: Path | None = None  # --prices FILE: a price sheet (replay format) overriding the world's prices
    hold_out_models: list[str] | None = None  # --hold-out-models: models training never offered (reported)

    def manifest(self) -> dict[str, Any]:
        """What must match for a rerun into the same dir to resume it."""
        fields = {"env": self.env, "split": self.split, "policy": self.policy, "seed": self.seed}
        if self.per_subtask is not None:
            fields["per_subtask"] = self.per_subtask
        if self.task_ids:
            fields["task_ids"] = list(self.task_ids)
        if self.judge:
            fields["judge"] = self.judge
        if self.price_scale:
            fields["price_scale"] = dict(sorted(self.price_scale.items()))
        if self.prices is not None:
            fields["prices"] = str(self.prices)
        if self.hold_out_models:
            fields["hold_out_models"] = list(self.hold_out_models)
        if self.policy.startswith("orchestrator:"):
            fields.update(config=str(self.config) if self.config else None, prefer=self.prefer,
                          max_turns=self.max_turns, max_tokens=self.max_tokens, tools=self.tools)
        return fields


def run_eval(request: EvalRequest) -> dict[str, Any]:
    """Build env and policies, run what is not done yet, write and return the metrics."""
    from toolorchestra.envs.registry import make_env

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
    policies = parse_policy(request.policy, env, seed=request.seed, orchestrator=_orchestrator_factory(request))
    claim_dir(request.out, request.manifest())
    if request.ray:
        from toolorchestra.bench.ray_eval import run_eval_ray

        return run_eval_ray(request, policies, tasks, env)
    return asyncio.run(_evaluate_and_close(env, policies, tasks, request))


def build_env(request: EvalRequest) -> Env:
    """The request's env, with --prices and --price-scale applied (replay worlds)."""
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.world import apply_price_options

    env = make_env(request.env, request.data_dir, **_env_options(request))
    apply_price_options(env, request.price_scale, request.prices)
    if request.hold_out_models:
        _check_hold_out(env, request.hold_out_models)
    return env


def _check_hold_out(env: Env, names: Sequence[str]) -> None:
    models = getattr(env, "models", None)
    if models is None:
        raise UserError(f"--hold-out-models applies to worlds with a model pool (replay worlds), not to {env.name}")
    labels = {env.label(model) for model in models()} if hasattr(env, "label") else set()
    unknown = [name for name in names if name not in models() and name not in labels]
    if unknown:
        raise UserError(f"--hold-out-models: {env.name} has no model {', '.join(map(repr, unknown))}; models: "
                        f"{', '.join(models())}")


def tasks_with_ids(tasks: Sequence[Task], task_ids: Sequence[str], where: str) -> list[Task]:
    """The tasks named by `task_ids`, in the split's order; an id the split lacks is a UserError naming it."""
    wanted = set(task_ids)
    missing = sorted(wanted - {task.id for task in tasks})
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserError(f"--task-ids: {where} has no task {shown}")
    return [task for task in tasks if task.id in wanted]


def first_per_subtask(tasks: Sequence[Task], count: int) -> list[Task]:
    """The first `count` tasks of every subtask (e.g. each toolscale domain/family), in the split's order: a
    small sample that covers every kind of task, where the first N tasks would be one domain's lookups."""
    taken: dict[str | None, int] = {}
    chosen = []
    for task in tasks:
        if taken.get(task.subtask, 0) < count:
            taken[task.subtask] = taken.get(task.subtask, 0) + 1
            chosen.append(task)
    return chosen


async def _evaluate_and_close(env: Env, policies: list[Policy], tasks: list[Task],
                              request: EvalRequest) -> dict[str, Any]:
    try:
        return await evaluate(env, policies, tasks, request.out, concurrency=request.concurrency,
                              delay_s=request.delay_s, progress=request.progress,
                              header={**request.manifest(), "limit": request.limit})
    finally:
        for policy in policies:
            await policy.aclose()


def claim_dir(out: Path, manifest: dict[str, Any], outputs: Sequence[str] = (TRAJECTORIES,)) -> None:
    """Make `out` this run's dir, or check that it already is (then the run resumes where it stopped).
    `manifest` says what the run is; `outputs` are the files whose presence without a manifest means the dir
    holds some other run's results."""
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        try:
            existing = json.loads(manifest_path.read_text())
        except json.JSONDecodeError:
            existing = None
        if existing != manifest:
            raise UserError(f"--out {out}: holds a different run ({manifest_path}: {existing}); "
                            f"this run is {manifest}. Use another --out, or delete the dir to start over.")
        return
    present = [name for name in outputs if (out / name).exists()]
    if present:
        raise UserError(f"--out {out}: has {', '.join(present)} but no {MANIFEST}; use an empty dir")
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")


async def evaluate(env: Env, policies: Sequence[Policy], tasks: Sequence[Task], out: Path, *,
                   concurrency: int = 8, delay_s: float = 0.0, progress: bool = True,
                   header: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run every (policy, task) episode not yet in out/trajectories.jsonl; return the metrics."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / TRAJECTORIES
    drop_torn_tail(path)
    done = _finished(path)
    jobs = [(policy, task) for policy in policies for task in tasks if (policy.name, task.id) not in done]
    for policy in policies:
        policy.prepare([task for p, task in jobs if p is policy])
    limit = asyncio.Semaphore(concurrency)
    with _progress_bar(progress, total=len(policies) * len(tasks), done=len(policies) * len(tasks) - len(jobs)) as bar:

        async def one(policy: Policy, task: Task) -> None:
            async with limit:
                if delay_s:
                    await asyncio.sleep(delay_s)
                trajectory = await run_episode(env, policy, task)
                write_trajectory(path, trajectory)
                bar.advance(trajectory.correct)

        await asyncio.gather(*(one(policy, task) for policy, task in jobs))
    metrics = collect_metrics(path, policies, tasks, header or {})
    if (header or {}).get("hold_out_models"):
        add_hold_out_share(metrics, env, header["hold_out_models"])  # type: ignore[index]
    (out / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    write_eval_decisions(out, [policy.name for policy in policies], [task.id for task in tasks], header)
    return metrics


async def run_episode(env: Env, policy: Policy, task: Task) -> Trajectory:
    """One scored episode; a policy that crashes yields an error trajectory, not a failed batch."""
    from toolorchestra.envs.base import current_task

    token = current_task.set(task)
    try:
        trajectory = await policy.run(task, env.tools_for(task))
    except Exception as exc:  # recorded, so the run goes on and the report shows the failure
        trajectory = Trajectory(task_id=task.id, policy=policy.name, question=task.prompt, stop_reason="error",
                                score_details={"error": f"{exc.__class__.__name__}: {exc}"})
    finally:
        current_task.reset(token)
    scorer = getattr(env, "ascore", None)
    score = await scorer(task, trajectory) if scorer else env.score(task, trajectory)
    trajectory.env, trajectory.split, trajectory.policy = env.name, task.split, policy.name
    trajectory.correct = score.correct
    trajectory.score_details = {**trajectory.score_details, **score.details}
    return trajectory


def drop_torn_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline, so appended lines start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)


def _finished(path: Path) -> set[tuple[str, str]]:
    if not path.exists():
        return set()
    return {(trajectory.policy, trajectory.task_id) for trajectory in read_saved_trajectories(path)}


def read_saved_trajectories(path: Path) -> list[Trajectory]:
    """The trajectories a run saved in `path`, checked before a resume appends to it.

    A line that is not JSON is a write torn by a kill: it is skipped with a warning and its episode is run again
    (as `read_trajectories` skips it when the metrics are collected). Any other bad line (not UTF-8, not a JSON
    object, not a trajectory, longer than the line limit) means the file is not one this runner wrote: the run is
    refused with one message naming the file, the line and the field, and nothing in the file is changed."""
    import pydantic

    from toolorchestra.lines import read_lines

    where = f"{path} (resuming --out {path.parent})"
    trajectories = []
    for number, raw in read_lines(path):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(f"{where}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                            f"{exc.start + 1}); expected a saved trajectory (one JSON object). {_LEAVE_IT}") from None
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            log.warning("%s:%d: skipped, not a complete JSON line (%s); its episode runs again", path, number,
                        exc.__class__.__name__)
            continue
        if not isinstance(record, dict):
            raise UserError(f"{where}:{number}: expected a JSON object (a saved trajectory), got "
                            f"{_json_type(record)}. {_LEAVE_IT}")
        for derived in ("cost_usd", "prompt_tokens", "completion_tokens"):
            record.pop(derived, None)
        try:
            trajectories.append(Trajectory.model_validate(record))
        except (pydantic.ValidationError, RecursionError) as exc:
            raise UserError(f"{where}:{number}: not a saved trajectory: {_first_problem(exc)}. {_LEAVE_IT}") from None
    return trajectories


_LEAVE_IT = ("The file was left as it is: move it (or that line) away to resume, or use another --out")


def _json_type(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _first_problem(exc: Exception) -> str:
    import pydantic

    if not isinstance(exc, pydantic.ValidationError):
        return "nested too deeply to read"
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "(top level)"
    got = "" if error["type"] == "missing" else f", got {type(error.get('input')).__name__}"
    return f"field '{field}': {error['msg']}{got}"


def collect_metrics(path: Path, policies: Sequence[Policy], tasks: Sequence[Task],
                    header: dict[str, Any]) -> dict[str, Any]:
    """Metrics per policy over `tasks` in task order, from the first saved trajectory of each."""
    saved: dict[tuple[str, str], Trajectory] = {}
    for trajectory in read_trajectories(path):
        saved.setdefault((trajectory.policy, trajectory.task_id), trajectory)
    entries = []
    for policy in policies:
        trajectories = [saved[(policy.name, task.id)] for task in tasks if (policy.name, task.id) in saved]
        entry: dict[str, Any] = {"policy": policy.name, **summarize(trajectories)}
        threshold = getattr(policy, "threshold", None)
        if threshold is not None:
            entry["threshold"] = threshold
        entries.append(entry)
    if len(entries) == 1:
        return {**header, **entries[0], "policy": entries[0]["policy"], "spec": header.get("policy")}
    return {**header, "kind": "sweep", "spec": header.get("policy"), "sweep": entries}


def add_hold_out_share(metrics: dict[str, Any], env: Env, names: Sequence[str]) -> None:
    """For --hold-out-models: how many calls and final answers went to the held-out models (per sweep entry)."""
    by_label = {env.label(model): model for model in env.models()} if hasattr(env, "label") else {}  # type: ignore[attr-defined]
    held = {by_label.get(name, name) for name in names}
    for entry in metrics.get("sweep") or [metrics]:
        entry["hold_out"] = {
            "models": sorted(held),
            "calls": sum(count for model, count in entry.get("calls_per_model", {}).items() if model in held),
            "answered": sum(count for model, count in entry.get("answered_by", {}).items() if model in held),
        }


def _env_options(request: EvalRequest) -> dict[str, Any]:
    """--judge NAME: an LLM grader (a model of --config) for free-text FRAMES answers."""
    if not request.judge:
        return {}
    if request.env != "replay:frames":
        raise UserError(f"--judge applies to replay:frames free-text answers, not to {request.env}")
    if request.config is None:
        raise UserError("--judge NAME needs --config CATALOG naming that model (e.g. an OpenAI-compatible server)")
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.catalog import load_catalog
    from toolorchestra.envs.replay.judge import LLMJudge

    catalog = load_catalog(request.config)
    names = [spec.name for spec in catalog.models]
    if request.judge not in names:
        raise UserError(f"--judge {request.judge}: no such model in --config {request.config}; its models are "
                        f"{', '.join(names)}")
    return {"judge": LLMJudge(ModelPool(catalog.models).backend(request.judge))}


def _orchestrator_factory(request: EvalRequest) -> Callable[[str], Policy]:
    def build(model: str) -> Policy:
        from toolorchestra.agent.preference import Preference
        from toolorchestra.backends.pool import ModelPool, make_backend
        from toolorchestra.catalog.schema import LatencyPrior, LocalBackendSpec, ModelSpec, Price

        preference = Preference.parse(request.prefer)
        if request.config is not None:
            from toolorchestra.catalog import load_catalog

            catalog = load_catalog(request.config)
            names = [spec.name for spec in catalog.models]
            if model not in names:
                raise UserError(f"--policy orchestrator:{model}: no model {model!r} in --config {request.config}; "
                                f"its models are {', '.join(names)}")
            spec = catalog.model(model)
            backend = ModelPool(catalog.models).backend(model)
        elif model in local_orchestrators() or Path(model).exists():
            spec = ModelSpec(name=model, backend=LocalBackendSpec(path=model), price=Price(),
                             latency=LatencyPrior(overhead_s=0.05, output_tokens_per_s=25.0))
            backend = make_backend(spec)
        else:
            raise UserError(f"--policy orchestrator:{model}: unknown orchestrator model; valid: "
                            f"{', '.join(local_orchestrators())} (embedded), a local model path or .gguf file, "
                            "or a model named in --config CATALOG (e.g. an OpenAI-compatible server)")
        return OrchestratorPolicy(f"orchestrator:{model}", backend, model_name=model, price=spec.price,
                                  preference=preference, max_turns=request.max_turns, max_tokens=request.max_tokens,
                                  tools=request.tools)

    return build


class _Bar:
    """A rich progress bar that also shows the running accuracy."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.enabled = enabled
        self.total, self.done, self.correct, self.new = total, done, 0, 0
        self._progress: Any = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
                TimeRemainingColumn

            self._progress = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[accuracy]}"), TimeElapsedColumn(),
                                      TimeRemainingColumn(), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("eval", total=self.total, completed=self.done, accuracy="")
        return self

    def advance(self, correct: bool | None) -> None:
        self.new += 1
        self.correct += bool(correct)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, accuracy=f"acc {self.correct / self.new:.3f} (this run)")

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _progress_bar(enabled: bool, total: int, done: int) -> _Bar:
    return _Bar(enabled, total, done)

