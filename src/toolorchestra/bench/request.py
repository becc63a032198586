"""An eval run as a request, and what every executor builds from it: the env (with price options), the
orchestrator policies, the task selection, and one scored episode. bench/eval.py (in process) and
bench/ray_eval.py (Ray actors) both execute requests through this module and store through bench/rundir.py;
neither imports the other's helpers."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.agent.engine import serving
from toolorchestra.agent.paper import PaperProtocol
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend
from toolorchestra.backends.pool import ModelPool, make_backend
from toolorchestra.bench.policies import (
    PROFILE_PER_TYPE,
    READER_PROFILE_PER_TYPE,
    OrchestratorPolicy,
    Policy,
    parse_policy,
)
from toolorchestra.catalog import LatencyPrior, LocalBackendSpec, ModelSpec, Price, load_catalog
from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.capabilities import AsyncScoring, LabeledModels, ModelWorld
from toolorchestra.errors import UserError
from toolorchestra.tools.llm import random_labels

LOCAL_ORCHESTRATORS = ("smollm2-135m",)  # the untrained embedded model; trained ones ship as adapters


def local_orchestrators() -> list[str]:
    """Orchestrator models available by name: the embedded SmolLM2 and every shipped trained adapter."""
    from toolorchestra.backends.adapters import shipped_orchestrators

    return [*LOCAL_ORCHESTRATORS, *shipped_orchestrators()]


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
    profiles: str = "auto"  # --profiles: auto | train | none | FILE (the labels' capability profiles in the prompt)
    rename_labels: int | None = None  # --rename-labels SEED: every model offered under a random label
    shuffle_labels: int | None = None  # --shuffle-labels SEED: the labels offered in a random order
    context: str = "auto"  # --context: paper (rebuilt per turn, agent/paper.py) | history; auto: paper on live worlds

    def context_mode(self) -> str:
        """paper or history: how the orchestrator's request is built (auto: paper on the live worlds)."""
        if self.context != "auto":
            return self.context
        from toolorchestra.envs.registry import is_live

        return "paper" if is_live(self.env) else "history"

    def manifest(self) -> dict[str, Any]:
        """What must match for a rerun into the same dir to resume it."""
        fields = {"env": self.env, "split": self.split, "policy": self.policy, "seed": self.seed}
        options = {  # written only when given (None: not given)
            "per_subtask": self.per_subtask,
            "task_ids": list(self.task_ids) if self.task_ids else None,
            "judge": self.judge or None,
            "price_scale": dict(sorted(self.price_scale.items())) if self.price_scale else None,
            "prices": str(self.prices) if self.prices is not None else None,
            "hold_out_models": list(self.hold_out_models) if self.hold_out_models else None,
            "rename_labels": self.rename_labels,
            "shuffle_labels": self.shuffle_labels,
        }
        fields.update({name: value for name, value in options.items() if value is not None})
        shown = self.shown_profiles()
        if shown != "none":
            fields["profiles"] = shown
        if self.policy.partition(":")[0] == "reader":
            fields["prefer"] = self.prefer
        if self.policy.startswith("orchestrator:"):
            if self.context_mode() == "paper":
                fields["context"] = "paper"
            fields.update(
                config=str(self.config) if self.config else None,
                prefer=self.prefer,
                max_turns=self.max_turns,
                max_tokens=self.max_tokens,
                tools=self.tools,
            )
        return fields

    def shown_profiles(self) -> str:
        """train, FILE or none: where the orchestrator's prompt takes the labels' profiles from. `auto` is train
        on a replay world for any orchestrator but a shipped adapter trained without profiles (its card says)."""
        if self.profiles != "auto":
            return self.profiles
        if self.policy.partition(":")[0] == "reader" and self.env.startswith("replay:"):
            return "train"  # the reader decides from the profiles
        if not self.policy.startswith("orchestrator:") or not self.env.startswith("replay:"):
            return "none"
        from toolorchestra.backends.adapters import find_orchestrator

        shipped = find_orchestrator(self.policy.partition(":")[2])
        return "none" if shipped is not None and not shipped.profiles else "train"


def build_env(request: EvalRequest) -> Env:
    """The request's env, with --prices and --price-scale applied, labels renamed and profiles shown (replay
    worlds)."""
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.world import apply_price_options

    env = make_env(request.env, request.data_dir, **_env_options(request))
    apply_price_options(env, request.price_scale, request.prices)
    if request.hold_out_models:
        _check_hold_out(env, request.hold_out_models)
    _apply_label_options(env, request)
    return env


def _apply_label_options(env: Env, request: EvalRequest) -> None:
    """--rename-labels SEED, --shuffle-labels SEED and --profiles: what the orchestrator's price table shows
    about each label, and in which order."""
    shown = request.shown_profiles()
    if request.rename_labels is None and request.shuffle_labels is None and shown == "none":
        return
    from toolorchestra.envs.replay.base import ReplayEnv

    if not isinstance(env, ReplayEnv):
        raise UserError(f"--rename-labels/--shuffle-labels/--profiles apply to replay worlds, not to {env.name}")
    if request.rename_labels is not None:
        env.relabel(random_labels(env.models(), random.Random(request.rename_labels)))
    if request.shuffle_labels is not None:
        order = env.models()
        random.Random(request.shuffle_labels).shuffle(order)
        env.reorder_labels(order)
    if shown == "train":
        from toolorchestra.envs.replay.profiles import measure_profiles

        reader = request.policy.partition(":")[0] == "reader"
        env.show_profiles(measure_profiles(env, "train", READER_PROFILE_PER_TYPE if reader else PROFILE_PER_TYPE))
    elif shown != "none":
        from toolorchestra.envs.replay.profiles import read_profiles

        if not Path(shown).is_file():  # likely a mistyped keyword, so say the keywords too
            problem = "not a file" if Path(shown).exists() else "file not found"
            raise UserError(
                f"--profiles {shown!r}: {problem}; expected auto, train, none, or a file `toolorchestra profile` wrote"
            )
        env.show_profiles(read_profiles(Path(shown), env.models()))


def _check_hold_out(env: Env, names: Sequence[str]) -> None:
    if not isinstance(env, ModelWorld):
        raise UserError(f"--hold-out-models applies to worlds with a model pool (replay worlds), not to {env.name}")
    models = env.models()
    labels: set[str] = {env.label(model) for model in models} if isinstance(env, LabeledModels) else set()
    unknown = [name for name in names if name not in models and name not in labels]
    if unknown:
        raise UserError(
            f"--hold-out-models: {env.name} has no model {', '.join(map(repr, unknown))}; models: {', '.join(models)}"
        )


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


async def run_episode(env: Env, policy: Policy, task: Task) -> Trajectory:
    """One scored episode; a policy that crashes yields an error trajectory, not a failed batch."""
    with serving(task):
        try:
            trajectory = await policy.run(task, env.tools_for(task))
        except Exception as exc:  # recorded, so the run goes on and the report shows the failure
            trajectory = Trajectory(
                task_id=task.id,
                policy=policy.name,
                question=task.prompt,
                stop_reason="error",
                score_details={"error": f"{exc.__class__.__name__}: {exc}"},
            )
    score = await env.ascore(task, trajectory) if isinstance(env, AsyncScoring) else env.score(task, trajectory)
    trajectory.env, trajectory.split, trajectory.policy = env.name, task.split, policy.name
    trajectory.correct = score.correct
    trajectory.score_details = {**trajectory.score_details, **score.details}
    return trajectory


def _env_options(request: EvalRequest) -> dict[str, Any]:
    """--judge NAME: an LLM grader (a model of --config) for free-text FRAMES answers. Live worlds: the pool
    (--config, else the embedded one), the judge (auto, none or a pool model) and where bought answers are
    recorded in the replay format (OUT/replay)."""
    from toolorchestra.envs.registry import is_live

    if is_live(request.env):
        return {
            "catalog": load_catalog(request.config) if request.config is not None else None,
            "judge": request.judge or "auto",
            "record_dir": request.out / "replay",
        }
    if not request.judge:
        return {}
    if request.env != "replay:frames":
        raise UserError(
            f"--judge applies to replay:frames and the live worlds (hle, frames-live), not to {request.env}"
        )
    if request.config is None:
        raise UserError("--judge NAME needs --config CATALOG naming that model (e.g. an OpenAI-compatible server)")
    from toolorchestra.envs.replay.judge import LLMJudge

    _, backend = _config_model(request.config, request.judge, f"--judge {request.judge}: no such model")
    return {"judge": LLMJudge(backend)}


def _config_model(config: Path, name: str, problem: str) -> tuple[ModelSpec, Backend]:
    """The spec and backend of model `name` of the catalog `config`; a UserError starting with `problem` (and
    listing the catalog's models) when it has none of that name."""
    catalog = load_catalog(config)
    names = [spec.name for spec in catalog.models]
    if name not in names:
        raise UserError(f"{problem} in --config {config}; its models are {', '.join(names)}")
    return catalog.model(name), ModelPool(catalog.models).backend(name)


def request_policies(request: EvalRequest, env: Env) -> list[Policy]:
    """The policies of the request's --policy spec over `env`, with its --prefer where a policy takes one."""
    return parse_policy(
        request.policy,
        env,
        seed=request.seed,
        orchestrator=orchestrator_factory(request),
        preference=Preference.parse(request.prefer),
    )


def orchestrator_factory(request: EvalRequest) -> Callable[[str], Policy]:
    def build(model: str) -> Policy:
        if request.config is not None:
            spec, backend = _config_model(request.config, model, f"--policy orchestrator:{model}: no model {model!r}")
        elif model in local_orchestrators() or Path(model).exists():
            spec = ModelSpec(
                name=model,
                backend=LocalBackendSpec(path=model),
                price=Price(),
                latency=LatencyPrior(overhead_s=0.05, output_tokens_per_s=25.0),
            )
            backend = make_backend(spec)
        else:
            raise UserError(
                f"--policy orchestrator:{model}: unknown orchestrator model; valid: "
                f"{', '.join(local_orchestrators())} (embedded), a local model path or .gguf file, "
                "or a model named in --config CATALOG (e.g. an OpenAI-compatible server)"
            )
        return OrchestratorPolicy(
            f"orchestrator:{model}",
            backend,
            model_name=model,
            price=spec.price,
            preference=Preference.parse(request.prefer),
            max_turns=request.max_turns,
            max_tokens=request.max_tokens,
            tools=request.tools,
            protocol=PaperProtocol() if request.context_mode() == "paper" else None,
        )

    return build


__all__ = [
    "LOCAL_ORCHESTRATORS",
    "EvalRequest",
    "build_env",
    "first_per_subtask",
    "local_orchestrators",
    "orchestrator_factory",
    "request_policies",
    "run_episode",
    "tasks_with_ids",
]
