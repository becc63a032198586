"""Policies that solve a task with the env's tools: baselines and the orchestrator.

Every policy returns a `Trajectory` built from `Step`s of the same tool calls the orchestrator makes
(`expert` and `answer` over the env's model pool), so cost, latency and scoring are shared. The
baselines that choose among recorded models (per-subtask, cascade, router, oracle, cheapest) need
the world's recorded outcomes (`RecordedWorld`, which the replay envs are); their parameters are fit
on the train split only, except the oracle's, which peeks at the test records by design (upper bound).

Policy specs (`parse_policy`): single:MODEL, random, cheapest, per-subtask, cascade[:LAMBDA],
router[:THRESHOLD] (no threshold: a sweep, one policy per threshold), oracle, orchestrator:MODEL, and
reader[:MODEL] (agent/reader.py: a decision from the offered labels' prices and profiles, MODEL, the
embedded SmolLM2 by default, reading the question; calibrated on the env's train split).
On envs whose tasks carry gold actions (`GoldWorld`, the toolscale envs) also: gold (replays the gold
actions through the episode's tools, then answers with the required facts; the check of the checker,
it must score 1.0) and noop (answers at once, without any tool call; a floor).
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from toolorchestra.agent.engine import assistant_message, run_calls, tool_message, tool_step
from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.paper import PaperProtocol
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.reader import Offer, Plan, PlanTable, all_outcomes, choose, choose_plan, offers, task_types
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, ToolCall
from toolorchestra.catalog.schema import Catalog, Price
from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.capabilities import GoldActionTasks, LiveAnswerKeys
from toolorchestra.envs.toolscale.tasks import REFUSAL_ANSWER, gold_answer
from toolorchestra.errors import UserError
from toolorchestra.tools.base import Tool, ToolResult

POLICY_FORMS = (
    "single:MODEL",
    "random",
    "cheapest",
    "per-subtask",
    "cascade[:LAMBDA]",
    "router[:THRESHOLD]",
    "oracle",
    "orchestrator:MODEL",
    "reader[:MODEL]",
    "gold",
    "noop",
)
GOLD_POLICIES = ("gold", "noop")
NOOP_ANSWER = REFUSAL_ANSWER
DEFAULT_CASCADE_LAMBDA = 0.1
CONSULT_TOOL = "expert"  # the tool the reader consults a label with before it answers (replay worlds offer it)
DEFAULT_READER = "smollm2-135m"  # the model that reads questions for the reader policy
CALIBRATION_PER_TYPE = 50  # the reader's calibration questions per task type, that place a question among types
# The train questions per task type the reader's default profiles are measured on: all of them. Chosen on the
# dev worlds, without test (docs/results.md, "The reader's settings chosen on dev worlds").
READER_PROFILE_PER_TYPE: int | None = None
PROFILE_PER_TYPE = 50  # what an LM orchestrator's prompt shows profiles of (a compact prompt, as it was trained)
MIN_SUBTASK_TRAIN = 30  # fewer train tasks than this: a subtask uses the parameters fit on all of train


@runtime_checkable
class RecordedWorld(Protocol):
    """An env that knows every model's recorded outcome on every task (the replay worlds)."""

    def models(self) -> list[str]: ...

    def label(self, model: str) -> str: ...

    def record(self, task_id: str, model: str) -> Any: ...

    def call_cost(self, task: Task, model: str) -> float: ...

    def answer_key(self, task: Task, text: str) -> str | None: ...


class Policy(ABC):
    """Solves one task with the given tools; `name` is its spec, stored in every trajectory."""

    name: str

    def prepare(self, tasks: Sequence[Task]) -> None:  # noqa: B027 (an optional hook: most policies need none)
        """Precompute what the policy needs for these tasks (e.g. batched router predictions)."""

    @abstractmethod
    async def run(self, task: Task, tools: list[Tool]) -> Trajectory:
        """One episode."""

    async def aclose(self) -> None:  # noqa: B027 (an optional hook)
        """Release models or connections."""


class ScriptedEpisode:
    """Records scripted tool calls exactly as the orchestrator loop records its calls."""

    def __init__(self, task: Task, tools: list[Tool], policy: str) -> None:
        self.task = task
        self.tools = {tool.name: tool for tool in tools}
        self.trajectory = Trajectory(task_id=task.id, split=task.split, policy=policy, question=task.prompt)
        self.turn = 0

    async def calls(self, *calls: tuple[str, dict[str, Any]]) -> list[ToolResult]:
        """One turn: run the calls concurrently; the turn lasts as long as its slowest call."""
        tool_calls = [
            ToolCall(id=f"call_{self.turn}_{index}", name=name, arguments=arguments)
            for index, (name, arguments) in enumerate(calls)
        ]
        results = await run_calls(self.tools, tool_calls, self.task, self.trajectory.messages, wall_clock=False)
        self.trajectory.messages.append(assistant_message("", tool_calls))
        for call, result in zip(tool_calls, results, strict=True):
            self.trajectory.steps.append(tool_step(self.turn, call, result))
            self.trajectory.messages.append(tool_message(call, result))
            if result.final and self.trajectory.final_answer is None:
                self.trajectory.final_answer = result.answer
                self.trajectory.answered_by = result.model
        self.trajectory.latency_s += max(result.latency_s for result in results)
        self.turn += 1
        return results

    def finish(self) -> Trajectory:
        self.trajectory.stop_reason = "answer" if self.trajectory.final_answer is not None else "error"
        return self.trajectory


class ScriptedPolicy(Policy):
    """Makes the calls `script(task)` lists, one per turn, through the episode's own tools."""

    def __init__(self, name: str, script: Callable[[Task], Iterable[tuple[str, dict[str, Any]]]]) -> None:
        self.name = name
        self._script = script

    async def run(self, task: Task, tools: list[Tool]) -> Trajectory:
        episode = ScriptedEpisode(task, tools, self.name)
        for call in self._script(task):
            await episode.calls(call)
        return episode.finish()


class ChooseModelPolicy(ScriptedPolicy):
    """Answers with one model chosen per task: `answer(model=...)`, one call, its recorded cost."""

    def __init__(self, name: str, world: RecordedWorld, choose: Callable[[Task], str]) -> None:
        super().__init__(name, lambda task: [("answer", {"model": world.label(choose(task))})])


@dataclass(frozen=True)
class CascadeParams:
    """Ask `first` and `check` together; if their answers agree keep `first`'s, else let `escalate`
    answer. `check` None: no check, `first` answers alone."""

    first: str
    check: str | None = None
    escalate: str | None = None


class CascadePolicy(Policy):
    def __init__(
        self, name: str, world: RecordedWorld, params: dict[str | None, CascadeParams], fallback: CascadeParams
    ) -> None:
        self.name = name
        self.world = world
        self.params = params
        self.fallback = fallback

    async def run(self, task: Task, tools: list[Tool]) -> Trajectory:
        params = self.params.get(task.subtask, self.fallback)
        episode = ScriptedEpisode(task, tools, self.name)
        label = self.world.label
        if params.check is None or params.escalate is None:
            await episode.calls(("answer", {"model": label(params.first)}))
            return episode.finish()
        first, check = await episode.calls(
            ("expert", {"model": label(params.first), "question": task.prompt}),
            ("expert", {"model": label(params.check), "question": task.prompt}),
        )
        key = None if first.error else self.world.answer_key(task, first.output)
        if key is not None and not check.error and key == self.world.answer_key(task, check.output):
            await episode.calls(("answer", {"answer": first.output}))
        else:
            await episode.calls(("answer", {"model": label(params.escalate)}))
        return episode.finish()


class RouterPolicy(ChooseModelPolicy):
    def __init__(self, name: str, world: RecordedWorld, router: Any, threshold: float) -> None:
        super().__init__(name, world, self._route)
        self.router = router
        self.threshold = threshold
        self._probabilities: dict[str, np.ndarray] = {}

    def prepare(self, tasks: Sequence[Task]) -> None:
        missing = [task for task in tasks if task.id not in self._probabilities]
        if missing:
            for task, row in zip(missing, self.router.predict(missing), strict=True):
                self._probabilities[task.id] = row

    def _route(self, task: Task) -> str:
        self.prepare([task])
        return self.router.choose(self._probabilities[task.id], self.threshold)


def gold_script(task: Task) -> Iterator[tuple[str, dict[str, Any]]]:
    """The gold policy's calls: the task's gold actions, one per turn, then an answer with the facts the task
    requires (a refusal with none: a plain refusal). They go through the real tools and scorer, so anything
    short of accuracy 1.0 is a bug in the env or its checker."""
    for action in task.meta["gold_actions"]:
        yield action["name"], dict(action["arguments"])
    yield "answer", {"answer": gold_answer(task)}


# --- outcomes of the train split, the basis of every fitted baseline ---------------------------
@dataclass
class Outcomes:
    tasks: list[Task]
    models: list[str]
    correct: np.ndarray  # (tasks, models) bool
    cost: np.ndarray  # (tasks, models) dollars per call
    keys: np.ndarray  # (tasks, models) int answer ids; equal ids = same answer; negative = not comparable

    def subset(self, rows: np.ndarray) -> Outcomes:
        return Outcomes(
            [self.tasks[i] for i in rows], self.models, self.correct[rows], self.cost[rows], self.keys[rows]
        )


def outcomes(world: RecordedWorld, tasks: Sequence[Task]) -> Outcomes:
    models = world.models()
    correct = np.zeros((len(tasks), len(models)), dtype=bool)
    cost = np.zeros((len(tasks), len(models)))
    keys = np.zeros((len(tasks), len(models)), dtype=np.int64)
    for row, task in enumerate(tasks):
        ids: dict[str, int] = {}
        for column, model in enumerate(models):
            record = world.record(task.id, model)
            correct[row, column] = record.correct
            cost[row, column] = world.call_cost(task, model)
            key = world.answer_key(task, record.response)
            keys[row, column] = -1 - column if key is None else ids.setdefault(key, len(ids))
    return Outcomes(list(tasks), models, correct, cost, keys)


def _best_model(train: Outcomes) -> str:
    """Most accurate on `train`; ties go to the cheaper model."""
    accuracy = train.correct.mean(axis=0)
    mean_cost = train.cost.mean(axis=0)
    order = sorted(range(len(train.models)), key=lambda j: (-accuracy[j], mean_cost[j]))
    return train.models[order[0]]


def _by_subtask(train: Outcomes) -> dict[str | None, np.ndarray]:
    groups: dict[str | None, list[int]] = {}
    for row, task in enumerate(train.tasks):
        groups.setdefault(task.subtask, []).append(row)
    return {name: np.asarray(rows) for name, rows in groups.items() if len(rows) >= MIN_SUBTASK_TRAIN}


def fit_cascade(train: Outcomes, penalty: float, reference_cost: float) -> CascadeParams:
    """The cascade with the best train utility: accuracy - penalty * mean cost / reference_cost.

    Candidates: every single model alone, and every (first, check, escalate) of distinct models with
    `first` the cheaper of the pair that must agree.
    """
    accuracy = train.correct.mean(axis=0)
    mean_cost = train.cost.mean(axis=0)
    scale = penalty / reference_cost if reference_cost > 0 else 0.0
    utility = accuracy - scale * mean_cost
    best_index = int(np.argmax(utility))
    best = (float(utility[best_index]), CascadeParams(first=train.models[best_index]))
    count = len(train.models)
    for first in range(count):
        for check in range(count):
            if check == first or (mean_cost[check], check) < (mean_cost[first], first):
                continue
            agree = (train.keys[:, first] == train.keys[:, check]) & (train.keys[:, first] >= 0)
            kept = agree[:, None]
            cascade_accuracy = np.where(kept, train.correct[:, [first]], train.correct).mean(axis=0)
            cascade_cost = (train.cost[:, first] + train.cost[:, check]).mean() + np.where(kept, 0.0, train.cost).mean(
                axis=0
            )
            cascade_utility = cascade_accuracy - scale * cascade_cost
            cascade_utility[[first, check]] = -np.inf
            escalate = int(np.argmax(cascade_utility))
            if cascade_utility[escalate] > best[0] + 1e-12:
                best = (
                    float(cascade_utility[escalate]),
                    CascadeParams(
                        first=train.models[first], check=train.models[check], escalate=train.models[escalate]
                    ),
                )
    return best[1]


# --- building policies from specs ---------------------------------------------------------------
OrchestratorFactory = Callable[[str], Policy]


def parse_policy(
    spec: str,
    env: Env,
    *,
    seed: int = 0,
    orchestrator: OrchestratorFactory | None = None,
    preference: Preference | None = None,
) -> list[Policy]:
    """The policies a --policy spec names (a router sweep gives one per threshold). `preference` is the
    user's (--prefer) for the policies that take one besides orchestrator:MODEL (reader)."""
    kind, _, argument = spec.partition(":")
    if kind == "reader":
        return [ReaderPolicy(spec, env, preference or Preference(), argument or DEFAULT_READER)]
    if kind == "orchestrator":
        if not argument:
            raise UserError("--policy orchestrator:MODEL needs the orchestrator model, e.g. orchestrator:smollm2-135m")
        if orchestrator is None:
            raise UserError("--policy orchestrator:MODEL is not available here")
        return [orchestrator(argument)]
    if kind in GOLD_POLICIES:
        _no_argument(spec, argument)
        if not (isinstance(env, GoldActionTasks) and env.gold_actions):
            raise UserError(
                f"--policy {spec}: needs tasks that carry gold actions, which env {env.name!r} does "
                "not have; gold and noop run on toolscale:<domain> and toolscale:all"
            )
        if kind == "gold":
            return [ScriptedPolicy(kind, gold_script)]
        # noop answers at once without any tool call: the floor (0 on every task that needs a write)
        return [ScriptedPolicy(kind, lambda task: [("answer", {"answer": NOOP_ANSWER})])]
    if kind not in {"single", "random", "cheapest", "per-subtask", "cascade", "router", "oracle"}:
        raise UserError(f"--policy {spec!r}: unknown policy; valid: {', '.join(POLICY_FORMS)}")
    if not isinstance(env, RecordedWorld):
        raise UserError(
            f"--policy {spec!r} needs recorded model outcomes, which env {env.name!r} does not have; "
            "use orchestrator:MODEL"
        )
    models = env.models()
    if kind in ("random", "oracle", "cheapest", "per-subtask"):
        _no_argument(spec, argument)
    if kind == "single":
        if argument not in models:
            raise UserError(
                f"--policy {spec!r}: unknown model {argument!r}; valid models of {env.name}: {', '.join(models)}"
            )
        return [ChooseModelPolicy(spec, env, lambda task: argument)]
    if kind == "random":
        return [ChooseModelPolicy(spec, env, lambda task: random.Random(f"{seed}:{task.id}").choice(models))]
    if kind == "oracle":
        return [ChooseModelPolicy(spec, env, lambda task: _oracle_choice(env, task))]
    train = outcomes(env, env.tasks("train"))
    if kind == "cheapest":
        cheapest = train.models[int(np.argmin(train.cost.mean(axis=0)))]
        return [ChooseModelPolicy(spec, env, lambda task: cheapest)]
    if kind == "per-subtask":
        overall = _best_model(train)
        best = {name: _best_model(train.subset(rows)) for name, rows in _by_subtask(train).items()}
        return [ChooseModelPolicy(spec, env, lambda task: best.get(task.subtask, overall))]
    if kind == "cascade":
        penalty = _number(spec, argument, DEFAULT_CASCADE_LAMBDA, "LAMBDA")
        reference = float(train.cost[:, train.models.index(_best_model(train))].mean())
        overall_params = fit_cascade(train, penalty, reference)
        per_subtask = {
            name: fit_cascade(train.subset(rows), penalty, reference) for name, rows in _by_subtask(train).items()
        }
        return [CascadePolicy(spec, env, per_subtask, overall_params)]
    return _router_policies(spec, argument, env, train, seed)


def _router_policies(spec: str, argument: str, world: RecordedWorld, train: Outcomes, seed: int) -> list[Policy]:
    from toolorchestra.bench.router import SWEEP, CorrectnessRouter

    thresholds = [_number(spec, argument, 0.0, "THRESHOLD")] if argument else list(SWEEP)
    if any(value < 0 for value in thresholds):
        raise UserError(f"--policy {spec!r}: THRESHOLD must be >= 0")
    reference = float(train.cost[:, train.models.index(_best_model(train))].mean())
    router = CorrectnessRouter(train.models, train.cost.mean(axis=0), reference, seed=seed)
    router.fit(train.tasks, train.correct)
    return [RouterPolicy(f"router:{value:g}", world, router, value) for value in thresholds]


def _oracle_choice(world: RecordedWorld, task: Task) -> str:
    """The cheapest model that was right; when none was, the cheapest model."""
    models = world.models()
    right = [model for model in models if world.record(task.id, model).correct]
    return min(right or models, key=lambda model: world.call_cost(task, model))


def _no_argument(spec: str, argument: str) -> None:
    if argument:
        raise UserError(f"--policy {spec!r}: this policy takes no ':' argument; valid: {', '.join(POLICY_FORMS)}")


def _number(spec: str, argument: str, default: float, what: str) -> float:
    """A policy's weight on dollars (the cascade's LAMBDA, the router's THRESHOLD): a finite number >= 0, since a
    negative one would pay for dearer models."""
    if not argument:
        return default
    try:
        value = float(argument)
    except ValueError:
        raise UserError(f"--policy {spec!r}: {what} {argument!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise UserError(f"--policy {spec!r}: {what} {argument!r}: expected a finite number >= 0")
    return value


class ReaderPolicy(Policy):
    """agent/reader.py's decision: the plan with the highest expected reward (answer with one label, or consult
    one and escalate when its answer commits to nothing), from the labels' prices and profiles; the reader model
    places each question among the calibration questions of the env's train split (the sample the profiles are
    measured on, envs/replay/profiles.py).

    Over a live pool (`toolorchestra run --policy reader`, `serve --policy reader`) `env` is None: the labels'
    profiles come from the catalog, the calibration questions from `calibration` (the replay world the profiles
    were measured on). Consult plans run there too when that world compares live replies (`LiveAnswerKeys`),
    the profiles carry per-question outcomes, and `expert` offers the answer labels; else single labels."""

    def __init__(
        self,
        name: str,
        env: Env | None,
        preference: Preference,
        model: str = DEFAULT_READER,
        calibration: Env | None = None,
    ) -> None:
        from toolorchestra.backends.question_reader import QuestionReader

        self.name = name
        self.env = env
        self.calibration = calibration or env
        self.preference = preference
        # A live question (env None) is a user's: its vector is not written to the on-disk cache.
        self.reader = QuestionReader(model, keep_questions=env is not None)
        self._calibrated = False
        self._calibration_types: list[str] = []
        self._posteriors: dict[str, dict[str, float]] = {}
        self._reading = threading.Lock()  # one reader pass at a time (episodes read unprepared questions in threads)
        self._tables: dict[tuple[tuple[str, int], ...], PlanTable] = {}

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Read every question to run in one batched pass of the reader model (and calibrate it first)."""
        with self._reading:
            unread = [task for task in tasks if task.id not in self._posteriors]
            if not unread or not self._calibrate():
                return
            posteriors = self.reader.posteriors([question_text(task) for task in unread])
            for task, posterior in zip(unread, posteriors, strict=True):
                self._posteriors[task.id] = posterior

    def _calibrate(self) -> bool:
        """Calibrate the question reader on the train split's calibration sample; False when the env's train
        split has fewer than two task types (then every question is of the one type, and nothing is read)."""
        if self._calibrated:
            return True
        from toolorchestra.envs.replay.profiles import calibration_sample

        sample = [task for task in calibration_sample(self._split_tasks("train"), CALIBRATION_PER_TYPE) if task.subtask]
        if len({task.subtask for task in sample}) < 2:
            return False
        self.reader.calibrate([question_text(task) for task in sample], [str(task.subtask) for task in sample])
        self._calibration_types = sorted({str(task.subtask) for task in sample})
        self._calibrated = True
        return True

    async def run(self, task: Task, tools: list[Tool]) -> Trajectory:
        from toolorchestra.envs.replay.tokens import count_tokens

        pool = offers(tools)
        types = task_types(pool)
        if len(types) == 1:
            posterior = {types[0]: 1.0}
        else:
            if task.id not in self._posteriors:
                await asyncio.to_thread(self.prepare, [task])
            if task.id not in self._posteriors:
                raise UserError(self._no_calibration(types))
            # A live question is read for its one episode: kept, a server's posteriors would grow with every request.
            posterior = self._posteriors.pop(task.id) if self.env is None else self._posteriors[task.id]
        tokens, weights = count_tokens(task.prompt), self.preference.weights()
        consult = consult_tool(tools, pool)
        if consult is None or not self._compares_answers() or not all_outcomes(pool):
            plan = Plan(choose(pool, posterior, tokens, weights))
        else:
            plan = choose_plan(pool, self._plan_table(pool), posterior, tokens, weights, consult)
        episode = ScriptedEpisode(task, tools, self.name)
        episode.trajectory.preference = weights
        answering = plan.first
        if plan.fallback is not None and consult is not None:
            asked = [plan.first] if plan.check is None else [plan.first, plan.check]
            consulted = await episode.calls(*((consult, {"model": offer.label}) for offer in asked))
            keys = [self._answer_key(task, result) for result in consulted]
            if keys[0] is None or (plan.check is not None and keys[0] != keys[1]):
                answering = plan.fallback
        await episode.calls((answering.tool, {"model": answering.label}))  # adopts a consulted answer: no new call
        return episode.finish()

    def _compares_answers(self) -> bool:
        """Whether a consulted reply's answer can be read as the profiles' outcomes were: in the world itself,
        or over live endpoints when the calibration world compares live replies (`LiveAnswerKeys`)."""
        if self.env is not None:
            return isinstance(self.env, RecordedWorld)
        return isinstance(self.calibration, LiveAnswerKeys)

    def _answer_key(self, task: Task, consulted: ToolResult) -> str | None:
        """The answer a consulted reply commits to, as the world compares answers; None when it commits to none
        (empty, "I don't know", an error)."""
        if consulted.error or not consulted.output:
            return None
        if isinstance(self.env, RecordedWorld):
            return self.env.answer_key(task, consulted.output)
        assert isinstance(self.calibration, LiveAnswerKeys)
        return self.calibration.live_answer_key(consulted.output)

    def _plan_table(self, pool: list[Offer]) -> PlanTable:
        from toolorchestra.envs.replay.profiles import UNTYPED

        key = tuple((offer.label, id(offer.profile)) for offer in pool)
        if key not in self._tables:
            # The profiles' outcomes are grouped by their questions' types. They are measured on train; profiles
            # measured on test itself (the hindsight ceiling of docs/results.md) are grouped by test's types.
            tasks = self._split_tasks("train") + self._split_tasks("test")
            types = {task.id: task.subtask or UNTYPED for task in tasks}
            self._tables[key] = PlanTable(pool, types)
        return self._tables[key]

    def check_pool(self, tools: Sequence[Tool]) -> None:
        """Before any question: UserError unless every answer label has a profile and, where the profiles
        measure several task types, the calibration questions can place a question among them (read now)."""
        types = task_types(offers(tools))
        if len(types) > 1:
            with self._reading:
                if not self._calibrate():
                    raise UserError(self._no_calibration(types))
            unplaced = sorted(set(types) - set(self._calibration_types))
            if unplaced and self.calibration is not None:
                # a question is placed only among the calibration world's types: a profile's other types would
                # never be read, and its labels would be weighed on types they were not measured on
                raise UserError(
                    f"--policy {self.name}: the profiles measure task types {unplaced} that the calibration world "
                    f"{self.calibration.name!r} does not have (it has {self._calibration_types}); pass "
                    "--calibration ENV, the replay world the profiles were measured on"
                )

    def _no_calibration(self, types: list[str]) -> str:
        if self.calibration is None:
            return (
                f"--policy {self.name}: the profiles measure task types {types}; pass --calibration ENV, the "
                "replay world they were measured on, whose train split places a question among them"
            )
        return (
            f"--policy {self.name}: the profiles measure task types {types}, but env {self.calibration.name!r} "
            "has no train split with two or more task types to place a question among them"
        )

    def _split_tasks(self, split: str) -> list[Task]:
        if self.calibration is None:
            return []
        try:
            return self.calibration.tasks(split)
        except UserError:  # an env without that split
            return []


def live_reader(
    catalog: Catalog, spec: str, prefer: str | None, calibration: str | None, profiles: Path | None
) -> tuple[Catalog, ReaderPolicy | None]:
    """`--policy` of `run` and `serve` over a live catalog: `orchestrator` gives the catalog and no reader;
    `reader[:MODEL]` gives the catalog with `profiles` (a file `toolorchestra profile` wrote) in place of its
    models' `profile:`, and the reader under `prefer`, with `calibration` (the replay world the profiles were
    measured on; by default the one their `measured_on` names) to place questions among their task types.
    `auto` (the default) is the reader when `profiles` or `calibration` is given or `reads_its_pool(catalog)`,
    and the orchestrator otherwise."""
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.profiles import read_profiles

    local_tools = [tool.name for tool in catalog.tools if tool.type in ("python", "search")]
    preference = Preference.parse(prefer, local_tools)
    preference.check_tools(
        [tool.name for tool in catalog.tools] + [label for tool in catalog.tools for label in tool.models or {}]
    )
    if spec == AUTO_POLICY:
        spec = "reader" if calibration or profiles or reads_its_pool(catalog) else "orchestrator"
    kind, _, model = spec.partition(":")
    if spec == "orchestrator":
        if calibration or profiles:
            raise UserError("--calibration and --profiles are read by --policy reader only")
        return catalog, None
    if kind != "reader":
        raise UserError(f"--policy {spec!r}: expected orchestrator or reader[:MODEL]")
    if profiles is not None:
        names = [entry.name for entry in catalog.models]
        measured = read_profiles(profiles, names, others=True)
        if not measured:
            raise UserError(f"--profiles {profiles}: profiles no model of the catalog ({', '.join(names)})")
        models = [
            entry.model_copy(update={"profile": measured.get(entry.name, entry.profile)}) for entry in catalog.models
        ]
        catalog = catalog.model_copy(update={"models": models})
    inferred = calibration is None
    calibration = calibration or measured_on(catalog)
    try:
        world = make_env(calibration) if calibration else None
    except UserError as exc:  # make_env names the --env flag; here the world came from --calibration
        if inferred:
            raise UserError(
                f"the profiles were measured on {calibration}, which does not load here ({exc}); pass "
                "--calibration ENV, the replay world to place questions among"
            ) from None
        raise UserError(str(exc).replace("--env ", "--calibration ", 1)) from None
    return catalog, ReaderPolicy(spec, None, preference, model or DEFAULT_READER, calibration=world)


AUTO_POLICY = "auto"
"""The default `--policy` of `run` and `serve`: the reader over a pool it can read, else the catalog's
orchestrator model."""


def reads_its_pool(catalog: Catalog, tool_name: str = "answer") -> bool:
    """Whether the catalog offers the reader a choice it can weigh: two or more answer labels, every one of them a
    model with a capability profile. (The embedded pool's answer tool offers no labels: its orchestrator answers.)"""
    names = answer_models(catalog, tool_name)
    profiled = {entry.name for entry in catalog.models if entry.profile is not None}
    return len(names) >= 2 and all(name in profiled for name in names)


def answer_models(catalog: Catalog, tool_name: str = "answer") -> list[str]:
    """The models the catalog's `tool_name` tool offers under its labels (none when there is no such tool)."""
    tool = next((tool for tool in catalog.tools if tool.name == tool_name), None)
    return list((tool.models or {}).values()) if tool is not None else []


def measured_on(catalog: Catalog, tool_name: str = "answer") -> str | None:
    """The env every profiled model of the catalog's answer tool was measured on, when they agree on one."""
    names = set(answer_models(catalog, tool_name))
    profiles = [entry.profile for entry in catalog.models if entry.name in names and entry.profile is not None]
    worlds = {profile.measured_on for profile in profiles}
    return worlds.pop() if len(worlds) == 1 else None


def consult_tool(tools: Sequence[Tool], pool: Sequence[Offer]) -> str | None:
    """The tool the reader consults a label with: `expert`, when it offers every answer label for the same model
    (so that an answer adopts a consultation by its label); else None, and the reader answers with one label."""
    tool = next((tool for tool in tools if tool.name == CONSULT_TOOL), None)
    if tool is None:
        return None
    models = {row["label"]: row["model"] for row in tool.price_rows() if row.get("label")}
    answers = {row["label"]: row["model"] for row in next(t for t in tools if t.name == pool[0].tool).price_rows()}
    return tool.name if all(models.get(offer.label) == answers.get(offer.label) for offer in pool) else None


def question_text(task: Task) -> str:
    """What the orchestrator is shown of a task: its question without few-shot exemplars where it has one."""
    return str(task.meta.get("query") or task.prompt)


class OrchestratorPolicy(Policy):
    """The orchestrator loop itself, with `backend` as the orchestrator model.

    With `short_prompt`, the orchestrator is shown the task's question without its few-shot
    exemplars (`task.meta["query"]`, RouterBench); recorded experts still answer the full prompt.
    `tools`: names of the env's tools to offer (None: all); fewer tools make a shorter prompt.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        *,
        model_name: str,
        price: Price | None = None,
        preference: Preference | None = None,
        max_turns: int = 4,
        max_tokens: int = 256,
        temperature: float = 0.0,
        short_prompt: bool = True,
        tools: Sequence[str] | None = None,
        protocol: PaperProtocol | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.short_prompt = short_prompt
        self.tool_names = list(tools) if tools else None
        # what each episode's orchestrator loop is built with; its tools come with the task
        self.orchestrator = functools.partial(
            Orchestrator,
            backend,
            model_name=model_name,
            price=price,
            preference=preference,
            max_turns=max_turns,
            max_tokens=max_tokens,
            temperature=temperature,
            protocol=protocol,  # the paper's protocol mode (agent/paper.py), else chat history
        )

    async def run(self, task: Task, tools: list[Tool]) -> Trajectory:
        if self.tool_names is not None:
            available = {tool.name for tool in tools}
            unknown = [name for name in self.tool_names if name not in available]
            if unknown:
                raise UserError(
                    f"--tools {','.join(self.tool_names)}: unknown tool(s) {unknown}; "
                    f"the env offers {sorted(available)}"
                )
            tools = [tool for tool in tools if tool.name in self.tool_names]
        shown = task
        if self.short_prompt and task.meta.get("query"):
            shown = task.model_copy(update={"prompt": question_text(task)})
        trajectory = await self.orchestrator(tools).run(shown)
        trajectory.policy = self.name
        return trajectory

    async def aclose(self) -> None:
        await self.backend.aclose()
