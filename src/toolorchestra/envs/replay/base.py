"""What every replay world shares: recorded answers, the replay backend, and the replay environment.

A replay world holds, per prompt, what each of several real models answered, whether that was right,
and what it cost. `ReplayEnv` offers the orchestrator an `expert` and an `answer` tool over a
`ModelPool` whose backends are `ReplayBackend`s, so episodes run through exactly the code of a live
pool: the backend looks up the episode's task (the `current_task` contextvar that Orchestrator.run
sets) and returns the recorded response with token usage, the recorded or priced dollar cost and a
simulated latency. The question the orchestrator writes does not change the answer: a recorded model
can only give what it gave for the task's original prompt.

Scoring a finished trajectory: a final answer that *is* one of the recorded responses (compared with
whitespace and end-of-text markers ignored) inherits that response's recorded grade; any other text
goes to the world's own judge (`judge_text`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.base import Backend, Completion, Message, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import LatencyPrior, ModelProfile, ModelSpec, Price
from toolorchestra.envs.base import Env, Score, Task, current_task
from toolorchestra.envs.replay.judge import strip_special_tokens
from toolorchestra.envs.replay.tokens import count_tokens
from toolorchestra.errors import BackendError, UserError
from toolorchestra.tools.llm import AnswerTool, ExpertTool

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory
    from toolorchestra.tools.base import Tool

SPLITS = ("train", "test")

EXPERT_DESCRIPTION = "Ask a model the task; returns its answer."
ANSWER_DESCRIPTION = "Finish: give 'answer' text, or name a 'model' to answer for you."


@dataclass(frozen=True, slots=True)
class Recorded:
    """One model's recorded answer to one prompt."""

    response: str
    correct: bool
    cost_usd: float | None = None  # measured dollars (RouterBench); None: priced from tokens
    output_tokens: int | None = None  # measured output tokens (FRAMES); None: counted from the text
    grade: str | None = None  # FRAMES: A correct, B incorrect, C not attempted
    prompt_tokens: int | None = None  # recorded input tokens; None: the question's tokens are counted
    latency_s: float | None = None  # measured seconds; None: simulated from the model's latency prior


@dataclass
class ReplayData:
    """A parsed world: tasks per split and, per task id, every model's recorded answer."""

    world: str
    models: list[str]
    tasks: dict[str, list[Task]]
    records: dict[str, dict[str, Recorded]]
    dropped: dict[str, int] = field(default_factory=dict)  # split -> prompts left out for missing cells


def shown_prices(data: ReplayData) -> dict[str, float]:
    """Each model's per-call price in the orchestrator's price table where calls are charged their recorded
    cost: its mean cost on the train split (test when train is empty), to 2 significant digits."""
    tasks = data.tasks["train"] or data.tasks["test"]
    mean = {
        model: sum(data.records[task.id][model].cost_usd or 0.0 for task in tasks) / max(len(tasks), 1)
        for model in data.models
    }
    return {model: float(f"{cost:.2g}") for model, cost in mean.items()}


def answer_identity(text: str) -> str:
    """The form in which a final answer is compared with recorded responses."""
    return " ".join(strip_special_tokens(text).split())


class ReplayBackend(Backend):
    """Answers for one recorded model: its response to the current task, with usage, cost and latency."""

    def __init__(self, env: ReplayEnv, spec: ModelSpec) -> None:
        self.env = env
        self.spec = spec
        self.name = spec.name
        self.model = spec.backend.model if spec.backend.type == "replay" else spec.name

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        current = current_task.get()
        if current is None:
            raise BackendError(f"replay model {self.model!r} answers only inside an episode (no current task)")
        # The world's own task: a policy may have shown the orchestrator a shortened prompt.
        task = self.env.task(current.id)
        record = self.env.record(task.id, self.model)
        output_tokens = self.env.output_tokens(task, self.model)
        return Completion(
            text=record.response,
            usage=Usage(prompt_tokens=self.env.input_tokens(task, self.model), completion_tokens=output_tokens),
            latency_s=record.latency_s if record.latency_s is not None else self.spec.latency.seconds(output_tokens),
            model=self.spec.name,
            cost_usd=self.env.recorded_cost(task, self.model),
        )


class ReplayEnv(Env):
    """A replay world as an environment. Subclasses build the data and the model specs."""

    name = "replay"

    def __init__(self, data: ReplayData, specs: list[ModelSpec], labels: dict[str, str] | None = None) -> None:
        """`labels`: model name -> the short label the orchestrator uses (default: the name itself);
        short labels keep the orchestrator's prompt small."""
        self.data = data
        self._label_of = {model: (labels or {}).get(model, model) for model in data.models}
        if len(set(self._label_of.values())) != len(self._label_of):
            raise ValueError(f"{self.name}: model labels are not unique: {self._label_of}")
        self._cost_factor: dict[str, float] = {}  # model -> factor on its recorded costs (--price-scale)
        self._priced: set[str] = set()  # models charged at their price even where a cost was recorded (--prices)
        self._build_pool(specs)
        self._by_id = {task.id: task for tasks in data.tasks.values() for task in tasks}

    def as_dev_world(self, seed: int = 0) -> None:
        """Become this world's dev world (`replay:NAME-dev`): its train split cut in two, a seeded half of each
        subset's questions the train split and the other half the test split, in the world's order. Records,
        costs and scoring stay the world's. Policies and their settings can then be chosen, baselines fitted and
        every condition run, all without the test split."""
        import random

        train = self.data.tasks["train"]
        by_subset: dict[str, list[str]] = {}
        for task in sorted(train, key=lambda task: task.id):
            by_subset.setdefault(task.subtask or "", []).append(task.id)
        rng = random.Random(seed)
        kept = {
            task_id
            for subset in sorted(by_subset)
            for task_id in rng.sample(by_subset[subset], len(by_subset[subset]) // 2)
        }
        tasks = {
            "train": [task.model_copy(update={"split": "train"}) for task in train if task.id in kept],
            "test": [task.model_copy(update={"split": "test"}) for task in train if task.id not in kept],
        }
        self.data = ReplayData(self.data.world, self.data.models, tasks, self.data.records, {"train": 0, "test": 0})
        self._by_id = {task.id: task for tasks_of_split in tasks.values() for task in tasks_of_split}
        self.name = f"{self.name}-dev{seed or ''}"

    def _build_pool(self, specs: list[ModelSpec]) -> None:
        """The pool of replay backends and the expert/answer tools over it."""
        self.specs = {spec.name: spec for spec in specs}
        self.pool = ModelPool(specs, backends={spec.name: ReplayBackend(self, spec) for spec in specs})
        by_label = {label: model for model, label in self._label_of.items()}
        self._tools: list[Tool] = [
            ExpertTool("expert", EXPERT_DESCRIPTION, by_label, self.pool),
            AnswerTool("answer", ANSWER_DESCRIPTION, by_label, self.pool),
        ]

    def reprice(
        self,
        factors: Mapping[str, float] | None = None,
        sheet: Mapping[str, tuple[Price, LatencyPrior | None]] | None = None,
    ) -> None:
        """Change prices at evaluation (the generalization tests): `sheet` gives models new prices (and latency
        priors), charged on tokens even where a cost was recorded; `factors` then multiply a model's prices and
        recorded costs. Models named in neither keep theirs."""
        factors, sheet = dict(factors or {}), dict(sheet or {})
        unknown = sorted((set(factors) | set(sheet)) - set(self.specs))
        if unknown:
            raise UserError(f"{self.name}: no model {', '.join(map(repr, unknown))}; models are {self.models()}")
        specs = []
        for name, spec in self.specs.items():
            price, latency = sheet.get(name, (spec.price, None))
            if name in factors:
                price = price.scaled(factors[name])
            specs.append(spec.model_copy(update={"price": price, "latency": latency or spec.latency}))
        self._cost_factor = {**self._cost_factor, **factors}
        self._priced |= set(sheet)
        self._build_pool(specs)

    def show_profiles(self, profiles: Mapping[str, ModelProfile | None]) -> None:
        """Give models the capability profiles the orchestrator's price table shows (None: no profile)."""
        unknown = sorted(set(profiles) - set(self.specs))
        if unknown:
            raise UserError(f"{self.name}: no model {', '.join(map(repr, unknown))}; models are {self.models()}")
        self._build_pool(
            [spec.model_copy(update={"profile": profiles.get(name, spec.profile)}) for name, spec in self.specs.items()]
        )

    def relabel(self, labels: Mapping[str, str]) -> None:
        """Offer models under new labels (model -> label; models not named keep theirs)."""
        relabelled = {**self._label_of, **labels}
        if len(set(relabelled.values())) != len(relabelled):
            raise UserError(f"{self.name}: model labels are not unique: {relabelled}")
        self._label_of = relabelled
        self._build_pool(list(self.specs.values()))

    def reorder_labels(self, models: list[str]) -> None:
        """Offer the labels in the order of `models` (in the tools' label lists and the price table), e.g. a
        shuffled order to test that a decision does not follow a row's position."""
        if sorted(models) != sorted(self._label_of):
            raise UserError(f"{self.name}: a label order must name every model once: {sorted(self._label_of)}")
        self._label_of = {model: self._label_of[model] for model in models}
        self._build_pool(list(self.specs.values()))

    # --- the Env interface -------------------------------------------------------------------
    def tasks(self, split: str) -> list[Task]:
        if split not in self.data.tasks:
            raise UserError(f"--split {split!r}: {self.name} has splits {sorted(self.data.tasks)}")
        return list(self.data.tasks[split])

    def tools_for(self, task: Task) -> list[Tool]:
        return list(self._tools)

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        details: dict[str, Any] = {"subtask": task.subtask}
        answer = trajectory.final_answer
        if answer is None:
            return Score(correct=False, details={**details, "method": "no_answer"})
        inherited = self.inherited_from(task, answer, trajectory.answered_by)
        if inherited is not None:
            record = self.record(task.id, inherited)
            return Score(
                correct=record.correct,
                details={
                    **details,
                    "method": "inherit",
                    "model": inherited,
                    **({"grade": record.grade} if record.grade else {}),
                },
            )
        judged = self.judge_text(task, answer)
        return Score(correct=judged.correct, details={**details, **judged.details})

    async def ascore(self, task: Task, trajectory: Trajectory) -> Score:
        """Score, possibly with an async judge; the replay judges are synchronous."""
        return self.score(task, trajectory)

    # --- recorded data ----------------------------------------------------------------------
    @property
    def world(self) -> str:
        return self.data.world

    def models(self) -> list[str]:
        return list(self.data.models)

    def label(self, model: str) -> str:
        """The label under which the tools offer `model`."""
        return self._label_of[model]

    def task(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UserError(f"{self.name}: no task with id {task_id!r}") from None

    def record(self, task_id: str, model: str) -> Recorded:
        try:
            return self.data.records[task_id][model]
        except KeyError:
            raise BackendError(f"{self.name}: no recorded answer of model {model!r} to task {task_id!r}") from None

    def input_tokens(self, task: Task, model: str | None = None) -> int:
        """The call's input tokens: `model`'s recorded count on `task`, else the question's tokens counted."""
        if model is not None:
            recorded = self.record(task.id, model).prompt_tokens
            if recorded is not None:
                return recorded
        return count_tokens(task.prompt)

    def output_tokens(self, task: Task, model: str) -> int:
        record = self.record(task.id, model)
        return record.output_tokens if record.output_tokens is not None else count_tokens(record.response)

    def recorded_cost(self, task: Task, model: str) -> float | None:
        """The recorded dollars of `model` on `task` (times its --price-scale factor); None when the call is
        priced from tokens instead (no recorded cost, or the model was given a price sheet at evaluation)."""
        record = self.record(task.id, model)
        if record.cost_usd is None or model in self._priced:
            return None
        return record.cost_usd * self._cost_factor.get(model, 1.0)

    def call_cost(self, task: Task, model: str) -> float:
        """Dollars one call of `model` on `task` is charged (what the replay backend reports)."""
        recorded = self.recorded_cost(task, model)
        if recorded is not None:
            return recorded
        return self.specs[model].price.cost(self.input_tokens(task, model), self.output_tokens(task, model))

    def call_latency(self, task: Task, model: str) -> float:
        """Seconds one call of `model` on `task` takes: the recorded latency, else the model's latency prior."""
        recorded = self.record(task.id, model).latency_s
        if recorded is not None:
            return recorded
        return self.specs[model].latency.seconds(self.output_tokens(task, model))

    def inherited_from(self, task: Task, answer: str, answered_by: str | None) -> str | None:
        """The model whose recorded response the answer is, preferring the model that gave it."""
        wanted = answer_identity(answer)
        records = self.data.records[task.id]
        candidates = ([answered_by] if answered_by in records else []) + list(records)
        for model in candidates:
            if answer_identity(records[model].response) == wanted:
                return model
        return None

    # --- world-specific -----------------------------------------------------------------------
    @abstractmethod
    def judge_text(self, task: Task, answer: str) -> Score:
        """Judge a final answer that is not a recorded response."""

    @abstractmethod
    def answer_key(self, task: Task, text: str) -> str | None:
        """The answer a response commits to, for comparing two responses; None when not comparable."""
