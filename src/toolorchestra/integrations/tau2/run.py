"""`toolorchestra eval --env tau2:DOMAIN`: tau2-bench with our orchestrator as the agent.

For every (task, trial) this builds what tau2's own `run_task` builds — the domain's environment, the agent, the
user simulator, tau2's `Orchestrator` — with our `OrchestratorAgent` as the agent and tau2's `UserSimulator`
(metered) as the user, runs the simulation, and scores it with tau2's `evaluate_simulation`, through the same
function `tau2 rescore` uses. (tau2's `run_task` itself only builds its own agent classes, so it is not called.)

The user simulator is a pool model reached through tau2's LLM client at an OpenAI-compatible base URL: a
`toolorchestra serve` started in-process over the same pool on 127.0.0.1, or `--user-base-url`.

Output dir:
- run.json: the run's settings; a rerun into the same dir must match them, and then resumes;
- tau2_results.json: tau2's own `Results` (`Results.save`: info, tasks, simulations with messages and
  reward_info), rewritten as each simulation ends — the file `tau2 rescore` and the leaderboard tooling read;
- trajectories.jsonl: one `Trajectory` per simulation (the orchestrator's own context, every orchestrator,
  expert and domain-tool step with tokens, dollars and seconds; the reward and the user simulator's share in
  `score_details`), appended as each ends;
- metrics.json: mean reward, pass^k for k = 1..K, and cost/tokens/latency of the orchestrator, the experts and
  the user simulator (`metrics.summarize_tau2`).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import StopReason, Trajectory, read_trajectories, write_trajectory
from toolorchestra.backends.pool import ModelPool
from toolorchestra.bench.rundir import claim_dir
from toolorchestra.catalog.schema import Catalog
from toolorchestra.errors import EvalError, UserError
from toolorchestra.integrations.tau2.metrics import is_success, summarize_tau2
from toolorchestra.integrations.tau2.rescore import breakdown, evaluate_offline
from toolorchestra.integrations.tau2.runtime import DOMAINS, require_tau2
from toolorchestra.train.health import format_errors

if TYPE_CHECKING:
    from tau2.data_model.simulation import Info, SimulationRun
    from tau2.data_model.tasks import Task

ENV_PREFIX = "tau2:"
DEFAULT_SPLIT = "base"  # the task split tau2 runs by default, and the leaderboard's
DEFAULT_SEED = 300  # tau2's default seed (tau2.config.DEFAULT_SEED): per-trial seeds then match tau2's own runs
DEFAULT_MAX_STEPS = 200  # tau2's defaults (tau2.config)
DEFAULT_MAX_ERRORS = 10
RESULTS = "tau2_results.json"
TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.json"
EXPERT_TOOL_NAMES = ("call_expert", "expert")  # the catalog tool whose labels are the experts, in this order
# tau2's termination reason -> our stop_reason
STOPPED: dict[str, StopReason] = {"user_stop": "answer", "agent_stop": "answer", "max_steps": "max_turns"}

T = TypeVar("T")


@dataclass
class Tau2EvalRequest:
    """One `eval --env tau2:DOMAIN` run (field names follow the CLI options)."""

    env: str
    out: Path
    config: Path | None = None
    policy: str | None = None
    split: str | None = None
    task_ids: list[str] | None = None
    limit: int | None = None
    num_trials: int = 1
    max_steps: int = DEFAULT_MAX_STEPS
    max_errors: int = DEFAULT_MAX_ERRORS
    max_turns: int = 4
    max_tokens: int = 256
    user_model: str | None = None
    user_base_url: str | None = None
    user_max_tokens: int | None = None
    prefer: str | None = None
    seed: int | None = None
    concurrency: int = 1

    @property
    def domain(self) -> str:
        return parse_env(self.env)

    def manifest(self, orchestrator: str, user_model: str) -> dict[str, Any]:
        """What must match for a rerun into the same dir to resume it."""
        return {
            "env": self.env,
            "config": str(self.config) if self.config else None,
            "orchestrator": orchestrator,
            "split": self.split or DEFAULT_SPLIT,
            "task_ids": self.task_ids,
            "limit": self.limit,
            "num_trials": self.num_trials,
            "max_steps": self.max_steps,
            "max_errors": self.max_errors,
            "max_turns": self.max_turns,
            "max_tokens": self.max_tokens,
            "prefer": self.prefer,
            "user_model": user_model,
            "user_base_url": self.user_base_url,
            "user_max_tokens": self.user_max_tokens,
            "seed": self.seed_value,
        }

    @property
    def seed_value(self) -> int:
        return DEFAULT_SEED if self.seed is None else self.seed


def is_tau2_env(env: str) -> bool:
    return env.startswith(ENV_PREFIX)


def parse_env(env: str) -> str:
    """The domain of `tau2:DOMAIN`, or a UserError naming the valid ones."""
    domain = env[len(ENV_PREFIX) :] if is_tau2_env(env) else ""
    if domain not in DOMAINS:
        valid = ", ".join(ENV_PREFIX + name for name in DOMAINS)
        raise UserError(f"--env {env}: unknown tau2 domain; valid: {valid}")
    return domain


# ---- choosing the models -------------------------------------------------------------------------------


def orchestrator_model(policy: str | None, catalog: Catalog, where: str) -> str:
    """The orchestrator's model: `--policy orchestrator:MODEL`, else the pool's orchestrator."""
    if policy is None:
        return catalog.orchestrator
    if not policy.startswith("orchestrator:"):
        raise UserError(
            f"--policy {policy}: on tau2 the agent is the orchestrator; use orchestrator:MODEL (a model "
            f"of {where}) or leave --policy out for the pool's orchestrator"
        )
    model = policy[len("orchestrator:") :]
    _check_model(model, catalog, "--policy orchestrator:", where)
    return model


def expert_labels(catalog: Catalog, where: str) -> dict[str, str]:
    """The expert labels (expert-1..3) and their models: the labels of the pool's `call_expert` tool, else of its
    `expert` tool, else of any LLM tool whose labels are expert-N."""
    tools = {tool.name: tool for tool in catalog.tools if tool.type == "llm"}
    for name in EXPERT_TOOL_NAMES:
        if name in tools:
            return dict(tools[name].models)
    for tool in tools.values():
        if any(label.startswith("expert-") for label in tool.models):
            return dict(tool.models)
    raise UserError(
        f"{where}: no expert tool; call_expert needs a tool of type llm named call_expert (or expert) "
        "whose models map labels such as expert-1..3 to models of the pool"
    )


def user_model(requested: str | None, experts: dict[str, str], catalog: Catalog, where: str) -> str:
    """The user simulator's model: --user-model, else the model behind the first expert label."""
    model = requested or next(iter(experts.values()))
    _check_model(model, catalog, "--user-model ", where)
    return model


def _check_model(model: str, catalog: Catalog, option: str, where: str) -> None:
    names = [spec.name for spec in catalog.models]
    if model not in names:
        raise UserError(f"{option}{model}: not a model of {where}; its models are {', '.join(names)}")


# ---- choosing the tasks --------------------------------------------------------------------------------


def select_tasks(domain: str, split: str | None, task_ids: list[str] | None, limit: int | None) -> list[Task]:
    """--task-ids among every task of the domain (any split), else the split's tasks; then the first --limit."""
    from toolorchestra.integrations.tau2.tasks import installed_tasks

    everything = installed_tasks(domain)
    if task_ids:
        unknown = [task_id for task_id in task_ids if task_id not in everything]
        if unknown:
            sample = ", ".join(list(everything)[:5])
            raise UserError(
                f"--task-ids: unknown {domain} task(s) {', '.join(unknown)}; tau2 has {len(everything)} "
                f"{domain} tasks, e.g. {sample}"
            )
        tasks = [everything[task_id] for task_id in dict.fromkeys(task_ids)]
    else:
        tasks = _split_tasks(domain, split or DEFAULT_SPLIT, everything)
    return tasks[:limit] if limit is not None else tasks


def _split_tasks(domain: str, split: str, everything: dict[str, Task]) -> list[Task]:
    from tau2.registry import registry

    splits_loader = registry.get_task_splits_loader(domain)
    splits = splits_loader() if splits_loader is not None else {}
    if split not in splits:
        raise UserError(f"--split {split}: tau2's {domain} tasks have the splits {', '.join(sorted(splits))}")
    return [everything[task_id] for task_id in splits[split] if task_id in everything]


def trial_seeds(seed: int, num_trials: int) -> list[int]:
    """One seed per trial, drawn as tau2's `run_tasks` draws them, so equal seeds give equal trial seeds."""
    rng = random.Random(seed)
    return [rng.randint(0, 1_000_000) for _ in range(num_trials)]


# ---- the event loop the agent's model calls run on -----------------------------------------------------


class LoopThread:
    """An asyncio event loop in a daemon thread. tau2 calls the agent synchronously, from its worker threads;
    every model call of every simulation runs on this one loop, where the backends' connections and batches
    live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="toolorchestra-tau2-loop")
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self, pool: ModelPool | None = None) -> None:
        if pool is not None:
            self.run(pool.aclose())  # on the loop that opened the connections
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@contextmanager
def user_endpoint(base_url: str | None, pool: ModelPool) -> Iterator[str]:
    """The OpenAI-compatible base URL the user simulator is sent to: `base_url`, else a `serve` over `pool`
    started here on 127.0.0.1 for the duration of the run."""
    if base_url is not None:
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"--user-base-url {base_url}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        yield base_url.rstrip("/")
        return
    from toolorchestra.serve.app import build_app
    from toolorchestra.serve.models import ServedModels
    from toolorchestra.serve.server import ServerThread

    with ServerThread(build_app(ServedModels(pool))) as server:
        yield server.base_url


# ---- one simulation -------------------------------------------------------------------------------------


@dataclass
class Setup:
    """Everything a simulation needs, shared by all of them."""

    domain: str
    split: str
    pool: ModelPool
    catalog: Catalog
    agent_settings: Any  # agent.AgentSettings
    user_model: str
    user_llm_args: dict[str, Any]
    max_steps: int
    max_errors: int
    loop: LoopThread
    policy_name: str = ""
    preference: dict[str, Any] = field(default_factory=dict)


def run_simulation(setup: Setup, task: Task, trial: int, seed: int) -> tuple[SimulationRun, Trajectory]:
    """One tau2 simulation of `task`, scored by tau2's evaluator; a failure becomes a failed simulation
    (reward 0, as tau2's `skip_failed_samples` records it) and a trajectory naming the error."""
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.registry import registry

    from toolorchestra.integrations.tau2.agent import OrchestratorAgent
    from toolorchestra.integrations.tau2.user import MeteredUserSimulator

    environment = registry.get_env_constructor(setup.domain)()
    agent = OrchestratorAgent(
        environment.get_tools(),
        environment.get_policy(),
        pool=setup.pool,
        settings=setup.agent_settings,
        task_id=task.id,
        runner=setup.loop.run,
    )
    user = MeteredUserSimulator(
        tools=_user_tools(environment),
        instructions=str(task.user_scenario),
        llm=f"openai/{setup.user_model}",
        llm_args=setup.user_llm_args,
        price=setup.catalog.model(setup.user_model).price,
    )
    orchestrator = Orchestrator(
        domain=setup.domain,
        agent=agent,
        user=user,
        environment=environment,
        task=task,
        max_steps=setup.max_steps,
        max_errors=setup.max_errors,
        seed=seed,
    )
    started = time.perf_counter()
    try:
        simulation = orchestrator.run()
    except Exception as exc:  # the run goes on; the failure is recorded and scored 0
        simulation = _failed_simulation(task, trial, seed, time.perf_counter() - started)
        return simulation, _trajectory(
            setup, task, simulation, agent, user, orchestrator, error=f"{exc.__class__.__name__}: {exc}"
        )
    simulation.trial = trial
    simulation.reward_info, notes = evaluate_offline(simulation, task, setup.domain, solo=False)
    return simulation, _trajectory(setup, task, simulation, agent, user, orchestrator, notes=notes)


def _user_tools(environment: Any) -> list[Any] | None:
    try:  # only some domains (telecom) give the user tools; the others raise
        return environment.get_user_tools()
    except Exception:
        return None


def _failed_simulation(task: Task, trial: int, seed: int, duration: float) -> SimulationRun:
    from tau2.data_model.simulation import RewardInfo, SimulationRun, TerminationReason
    from tau2.utils.utils import get_now

    now = get_now()
    return SimulationRun(
        id=f"{task.id}_{trial}_failed",
        task_id=task.id,
        start_time=now,
        end_time=now,
        duration=duration,
        termination_reason=TerminationReason.AGENT_ERROR,
        messages=[],
        trial=trial,
        seed=seed,
        reward_info=RewardInfo(reward=0.0),
        skipped=True,
    )


def _trajectory(
    setup: Setup,
    task: Task,
    simulation: SimulationRun,
    agent: Any,
    user: Any,
    orchestrator: Any,
    error: str | None = None,
    notes: list[str] | None = None,
) -> Trajectory:
    reward = simulation.reward_info.reward if simulation.reward_info is not None else 0.0
    termination = simulation.termination_reason.value
    state = orchestrator.agent_state
    context = state.context if state is not None and hasattr(state, "context") else []
    details: dict[str, Any] = {
        "reward": reward,
        "termination_reason": termination,
        "trial": simulation.trial,
        "seed": simulation.seed,
        "simulation_id": simulation.id,
        "duration_s": simulation.duration,
        "user_simulator": user.totals(),
        "reward_breakdown": breakdown(simulation.reward_info) if simulation.reward_info is not None else {},
        "agent_cost_usd": simulation.agent_cost,
        "user_cost_usd": simulation.user_cost,
    }
    if notes:
        details["notes"] = notes
    if error:
        details["error"] = error
    return Trajectory(
        task_id=task.id,
        env=ENV_PREFIX + setup.domain,
        split=setup.split,
        policy=setup.policy_name,
        question=str(task.user_scenario),
        preference=setup.preference,
        messages=[{"role": "system", "content": agent.system}, *context],
        steps=agent.steps,
        stop_reason="error" if error else STOPPED.get(termination),
        correct=is_success(reward),
        score_details=details,
        latency_s=agent.latency_s,
    )


# ---- the output dir --------------------------------------------------------------------------------------


class Tau2Output:
    """The output dir of one run: tau2's Results file and our trajectories, written as each simulation ends
    (under a lock: simulations end in worker threads), and what a resumed run has already done."""

    def __init__(self, out: Path, info: Info, tasks: list[Task]) -> None:
        from tau2.data_model.simulation import Results

        self.out = out
        self.results_path = out / RESULTS
        self.trajectories_path = out / TRAJECTORIES
        self._lock = threading.Lock()
        finished = self.finished_trajectories()
        kept_ids = {trajectory.score_details.get("simulation_id") for trajectory in finished}
        previous = Results.load(self.results_path).simulations if self.results_path.exists() else []
        # A simulation saved in the results but whose trajectory was not (a kill in between) is run again.
        self.results = Results(
            info=info, tasks=tasks, simulations=[simulation for simulation in previous if simulation.id in kept_ids]
        )
        self.done = {(trajectory.task_id, trajectory.score_details.get("trial")) for trajectory in finished}

    def finished_trajectories(self) -> list[Trajectory]:
        from toolorchestra.files import drop_torn_tail

        if not self.trajectories_path.exists():
            return []
        drop_torn_tail(self.trajectories_path)
        return list(read_trajectories(self.trajectories_path))

    def add(self, simulation: SimulationRun, trajectory: Trajectory) -> None:
        with self._lock:
            self.results.simulations.append(simulation)
            self.results.save(self.results_path)  # tau2's own writer: the leaderboard's format
            write_trajectory(self.trajectories_path, trajectory)


# ---- the run --------------------------------------------------------------------------------------------


def check_request(request: Tau2EvalRequest) -> None:
    checks = (
        ("--num-trials", request.num_trials),
        ("--max-steps", request.max_steps),
        ("--max-errors", request.max_errors),
        ("--max-turns", request.max_turns),
        ("--max-tokens", request.max_tokens),
        ("--concurrency", request.concurrency),
    )
    for option, value in checks:
        if value < 1:
            raise UserError(f"{option} {value}: expected at least 1")
    if request.limit is not None and request.limit < 1:
        raise UserError(f"--limit {request.limit}: expected a positive number of tasks")
    if request.user_max_tokens is not None and request.user_max_tokens < 1:
        raise UserError(f"--user-max-tokens {request.user_max_tokens}: expected at least 1")


def run_tau2_eval(
    request: Tau2EvalRequest,
    *,
    catalog: Catalog | None = None,
    pool: ModelPool | None = None,
    on_simulation: Callable[[Trajectory], None] | None = None,
) -> dict[str, Any]:
    """Run every (task, trial) not yet in the output dir; write and return the metrics (see module docstring).

    `catalog` and `pool` replace the ones --config would give (tests pass fake backends this way)."""
    check_request(request)
    domain = request.domain
    where = f"--config {request.config}" if request.config else "the embedded default pool"
    if catalog is None:
        from toolorchestra.catalog import default_catalog, load_catalog

        catalog = load_catalog(request.config) if request.config is not None else default_catalog()
    orchestrator = orchestrator_model(request.policy, catalog, where)
    experts = expert_labels(catalog, where)
    user = user_model(request.user_model, experts, catalog, where)
    preference = Preference.parse(request.prefer) if request.prefer else None
    require_tau2()
    tasks = select_tasks(domain, request.split, request.task_ids, request.limit)
    if not tasks:
        raise UserError(f"--env {request.env}: no tasks selected")
    manifest = request.manifest(orchestrator, user)
    claim_dir(request.out, manifest, outputs=(TRAJECTORIES, RESULTS))

    from toolorchestra.integrations.tau2.agent import AgentSettings

    pool = pool or ModelPool(catalog.models)
    settings = AgentSettings(
        model=orchestrator,
        experts=experts,
        preference=preference,
        max_turns=request.max_turns,
        max_tokens=request.max_tokens,
    )
    loop = LoopThread()
    started = time.perf_counter()
    try:
        with user_endpoint(request.user_base_url, pool) as base_url:
            from toolorchestra.integrations.tau2.user import user_llm_args

            setup = Setup(
                domain=domain,
                split="" if request.task_ids else (request.split or DEFAULT_SPLIT),
                pool=pool,
                catalog=catalog,
                agent_settings=settings,
                user_model=user,
                user_llm_args=user_llm_args(base_url, request.user_max_tokens),
                max_steps=request.max_steps,
                max_errors=request.max_errors,
                loop=loop,
                policy_name=f"orchestrator:{orchestrator}",
                preference=preference.weights() if preference else {},
            )
            output = Tau2Output(request.out, _info(setup, request, settings), tasks)
            _run_all(setup, output, tasks, request, on_simulation)
    finally:
        loop.close(pool)
    return _write_metrics(request, manifest, output, tasks, time.perf_counter() - started)


def _run_all(
    setup: Setup,
    output: Tau2Output,
    tasks: list[Task],
    request: Tau2EvalRequest,
    on_simulation: Callable[[Trajectory], None] | None,
) -> None:
    seeds = trial_seeds(request.seed_value, request.num_trials)
    jobs = [
        (task, trial, seeds[trial])
        for trial in range(request.num_trials)
        for task in tasks
        if (task.id, trial) not in output.done
    ]

    def one(job: tuple[Task, int, int]) -> None:
        simulation, trajectory = run_simulation(setup, *job)
        output.add(simulation, trajectory)
        if on_simulation is not None:
            on_simulation(trajectory)

    with ThreadPoolExecutor(max_workers=request.concurrency, thread_name_prefix="tau2-simulation") as executor:
        for finished in [executor.submit(one, job) for job in jobs]:
            finished.result()  # re-raises a bug in our own bookkeeping; simulation failures are recorded


def _info(setup: Setup, request: Tau2EvalRequest, settings: Any) -> Info:
    """tau2's `Info` of the run (tau2.run.get_info), naming our agent and its settings."""
    from tau2.run import get_info

    from toolorchestra.integrations.tau2.agent import AGENT_NAME
    from toolorchestra.integrations.tau2.user import USER_IMPLEMENTATION

    agent_args = {
        "experts": settings.experts,
        "max_turns": settings.max_turns,
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "prefer": request.prefer,
        "config": str(request.config) if request.config else None,
    }
    user_args = {key: value for key, value in setup.user_llm_args.items() if key != "api_key"}  # never a key
    return get_info(
        domain=setup.domain,
        agent=AGENT_NAME,
        user=USER_IMPLEMENTATION,
        llm_agent=setup.policy_name,
        llm_args_agent=agent_args,
        llm_user=f"openai/{setup.user_model}",
        llm_args_user=user_args,
        num_trials=request.num_trials,
        max_steps=request.max_steps,
        max_errors=request.max_errors,
        seed=request.seed_value,
    )


LEADERBOARD_KS = (1, 2, 3, 4)  # the pass_k fields of a tau2-bench leaderboard submission.json


def leaderboard_results(domain: str, pass_hat_k: dict[str, float]) -> dict[str, dict[str, float | None]]:
    """pass^k in the shape of a leaderboard submission.json's `results` entry: percentages, null for a k the
    run's trials do not reach."""
    return {
        domain: {
            f"pass_{k}": round(100 * pass_hat_k[str(k)], 2) if str(k) in pass_hat_k else None for k in LEADERBOARD_KS
        }
    }


def _write_metrics(
    request: Tau2EvalRequest, manifest: dict[str, Any], output: Tau2Output, tasks: list[Task], wall_s: float
) -> dict[str, Any]:
    wanted = {task.id for task in tasks}
    trajectories = [
        trajectory
        for trajectory in output.finished_trajectories()
        if trajectory.task_id in wanted and trajectory.score_details.get("trial", 0) < request.num_trials
    ]
    metrics = {
        **manifest,
        "policy": f"orchestrator:{manifest['orchestrator']}",
        "domain": request.domain,
        "tau2_version": require_tau2(),
        "results_file": RESULTS,
        "wall_s_this_run": wall_s,
        **summarize_tau2(trajectories),
    }
    metrics["leaderboard_results"] = leaderboard_results(request.domain, metrics["pass_hat_k"])
    (request.out / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
    if trajectories and metrics["errors"] == len(trajectories):
        raise EvalError(
            f"every simulation failed ({len(trajectories)} of {len(trajectories)}), so the rewards mean "
            f"nothing. First errors: {format_errors(metrics['first_errors'])}"
        )
    return metrics
