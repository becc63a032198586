"""Escalation targets: what an orchestrator that consults models one at a time should do next.

In a replay world the orchestrator can ask a model (`expert(model=L)`), read its answer, and then either
adopt an answer it already has (`answer(model=L)` for a consulted L: no new call) or buy another one. The
answer it reads says something a question alone does not: whether that model attempted the question at all
("I don't know", a clarifying question). On FRAMES, for example, grok-3-mini at low effort declines 40.5% of the
train questions and is right on 69.3% of those it attempts; reading that and escalating only the declined
questions is what a per-question orchestrator can do and no fixed configuration can.

`EscalationModel` is the tabular outcome model behind those decisions. Its state is the set of models
consulted so far, each with whether it attempted the question (what the orchestrator sees); from the train
questions consistent with a state it estimates, for every model, P(attempts), P(right) and mean cost and
latency, shrunk towards the parent state's estimates where few questions are left. Dynamic programming over
states up to `max_consults` consultations gives each action's value under a preference:

    utility = P(right) - w_cost * dollars / ref_cost - w_latency * seconds / ref_latency

the paper's outcome + weighted efficiency, with dollars and seconds scaled by the dearest model's mean (the
pool-wide scale that the reward's min-max normalization uses). The counterfactual trainer distills these
values into the policy at the states a question actually passes through (train/recipes/counterfactual.py,
`counterfactual.targets: escalation`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

History = tuple[tuple[int, bool], ...]  # (model index, attempted) per consultation, in order


@dataclass(frozen=True, slots=True)
class Action:
    """`consult`: ask model `model` (expert tool); otherwise answer with it (adopt it if consulted)."""

    consult: bool
    model: int


@dataclass(frozen=True, slots=True)
class Estimates:
    """Per-model estimates over the train questions consistent with one state."""

    support: float
    attempted: np.ndarray
    right: np.ndarray  # P(right) over all consistent questions
    cost: np.ndarray
    latency: np.ndarray


class EscalationModel:
    """Action values for consult-or-answer orchestration, fitted on recorded outcomes.

    `right`, `attempted`, `cost`, `latency`: arrays (questions x models) over the questions fitted on.
    `prior_strength`: pseudo-questions of the parent state's estimate added to every state's counts."""

    def __init__(
        self,
        models: Sequence[str],
        right: np.ndarray,
        attempted: np.ndarray,
        cost: np.ndarray,
        latency: np.ndarray,
        max_consults: int = 3,
        prior_strength: float = 4.0,
        adopt_attempted: bool = True,
    ) -> None:
        if right.shape != attempted.shape or right.shape != cost.shape or right.shape[1] != len(models):
            raise ValueError("EscalationModel: right, attempted and cost must be (questions x models) arrays")
        if right.shape[0] == 0:
            raise ValueError("EscalationModel: no question to fit on")
        self.models = list(models)
        self.right = right.astype(float)
        self.attempted = attempted.astype(bool)
        self.cost = cost.astype(float)
        self.latency = latency.astype(float)
        self.max_consults = max_consults
        self.prior_strength = prior_strength
        self.adopt_attempted = adopt_attempted
        self.ref_cost = max(float(self.cost.mean(0).max()), 1e-12)
        self.ref_latency = max(float(self.latency.mean(0).max()), 1e-12)
        self._estimates: dict[frozenset[tuple[int, bool]], Estimates] = {}
        self._values: dict[tuple[frozenset[tuple[int, bool]], float, float], float] = {}

    # --- estimates per state -------------------------------------------------------------------
    def estimates(self, history: History) -> Estimates:
        key = frozenset(history)
        cached = self._estimates.get(key)
        if cached is not None:
            return cached
        parent = self.estimates(history[:-1]) if history else None  # the root's estimates are the plain means
        mask = np.ones(self.right.shape[0], dtype=bool)
        for index, seen in history:
            mask &= self.attempted[:, index] == seen
        self._estimates[key] = self._weighted(mask.astype(float), parent)
        return self._estimates[key]

    def _weighted(self, weights: np.ndarray, parent: Estimates | None) -> Estimates:
        support = float(weights.sum())
        sums = [weights @ array for array in (self.attempted.astype(float), self.right, self.cost, self.latency)]
        if parent is None:
            return Estimates(support, *(total / support for total in sums))
        k = self.prior_strength
        means = [
            (total + k * prior) / (support + k)
            for total, prior in zip(sums, (parent.attempted, parent.right, parent.cost, parent.latency), strict=True)
        ]
        return Estimates(support, *means)

    # --- values -----------------------------------------------------------------------------------
    def action_values(self, history: History, w_cost: float, w_latency: float = 0.0) -> dict[Action, float]:
        """The value of every action at `history` (consulting is offered below `max_consults` only)."""
        here = self.estimates(history)
        consulted = {model for model, _ in history}
        price = (w_cost * here.cost / self.ref_cost) + (w_latency * here.latency / self.ref_latency)
        values: dict[Action, float] = {}
        for model in range(len(self.models)):
            if model in consulted:
                values[Action(False, model)] = float(self._right_given_consulted(history, model))
                continue
            values[Action(False, model)] = float(here.right[model] - price[model])
            if len(history) < self.max_consults:
                values[Action(True, model)] = float(
                    self._consult_value(history, model, w_cost, w_latency) - price[model]
                )
        return values

    def value(self, history: History, w_cost: float, w_latency: float = 0.0) -> float:
        key = (frozenset(history), w_cost, w_latency)
        cached = self._values.get(key)
        if cached is None:
            if self.adopt_attempted and history and history[-1][1]:
                # later turns are valued as a chain: the first answer that attempts the question is adopted
                # (a policy that probes cheap models only to read their silence fits noise on few questions)
                cached = self._right_given_consulted(history, history[-1][0])
            else:
                cached = max(self.action_values(history, w_cost, w_latency).values())
            self._values[key] = cached
        return cached

    def _consult_value(self, history: History, model: int, w_cost: float, w_latency: float) -> float:
        p_attempt = float(self.estimates(history).attempted[model])
        value = 0.0
        for seen, p in ((True, p_attempt), (False, 1.0 - p_attempt)):
            if p > 0:
                value += p * self.value(history + ((model, seen),), w_cost, w_latency)
        return value

    def _right_given_consulted(self, history: History, model: int) -> float:
        """P(right) of adopting a consulted model's answer: its estimate at this state (which already knows
        whether it attempted)."""
        return float(self.estimates(history).right[model])

    def best(self, history: History, w_cost: float, w_latency: float = 0.0) -> Action:
        values = self.action_values(history, w_cost, w_latency)
        return max(values, key=values.__getitem__)


def fit_from_rows(
    models: Sequence[str], rows: Sequence[Mapping[str, Mapping[str, float | bool]]], **options: float
) -> EscalationModel:
    """An EscalationModel from rows of {model: {"right", "attempted", "cost", "latency"}}."""

    def column(field: str) -> np.ndarray:
        return np.array([[float(row[model][field]) for model in models] for row in rows])

    return EscalationModel(models, column("right"), column("attempted"), column("cost"), column("latency"), **options)  # type: ignore[arg-type]


def follow(
    model: EscalationModel, attempted: Sequence[bool], w_cost: float, w_latency: float = 0.0
) -> tuple[list[tuple[History, Action]], Action]:
    """The states one question passes through under the model's best actions, given which models attempt
    it (`attempted[m]`), each with the action taken there; and the final answer action."""
    history: History = ()
    visited = []
    while True:
        action = model.best(history, w_cost, w_latency)
        visited.append((history, action))
        if not action.consult:
            return visited, action
        history = history + ((action.model, bool(attempted[action.model])),)


def attempted(env: Any, task: Any, model: str) -> bool:
    """Whether `model`'s recorded answer to `task` attempts it: not graded 'not attempted' (FRAMES' judge
    grade C) and committing to some answer (the world's `answer_key`: not empty, not "I don't know")."""
    record = env.record(task.id, model)
    if record.grade == "C":
        return False
    return env.answer_key(task, record.response) is not None


def outcome_rows(env: Any, tasks: Sequence[Any]) -> list[dict[str, dict[str, float]]]:
    """Per task, {model: {"right", "attempted", "cost", "latency"}} from a replay world's records."""
    return [
        {
            model: {
                "right": float(env.record(task.id, model).correct),
                "attempted": float(attempted(env, task, model)),
                "cost": env.call_cost(task, model),
                "latency": env.call_latency(task, model),
            }
            for model in env.models()
        }
        for task in tasks
    ]


def play(
    model: EscalationModel, rows: Sequence[Mapping[str, Mapping[str, float]]], w_cost: float
) -> tuple[int, float, Counter[str]]:
    """Right answers, dollars and paths ("consulted > ... | answering model") of the model's best actions on
    `rows` (`outcome_rows`): what a perfectly trained escalation orchestrator would do."""
    right, dollars = 0, 0.0
    paths: Counter[str] = Counter()
    for row in rows:
        flags = [bool(row[name]["attempted"]) for name in model.models]
        visited, final = follow(model, flags, w_cost)
        consulted = [action.model for _, action in visited if action.consult]
        dollars += sum(row[model.models[index]]["cost"] for index in consulted)
        if final.model not in consulted:
            dollars += row[model.models[final.model]]["cost"]
        right += int(row[model.models[final.model]]["right"])
        paths[" > ".join(model.models[index] for index in consulted) + " | " + model.models[final.model]] += 1
    return right, dollars, paths


class EscalationTargets:
    """Cross-fitted escalation models over a replay world's train tasks: a task's values come from the model
    fitted on the other folds, so no task's own outcomes enter its targets."""

    def __init__(
        self, env: Any, tasks: Sequence[Any], max_consults: int, prior_strength: float, folds: int = 5, seed: int = 0
    ) -> None:
        from toolorchestra.envs.capabilities import PricedOutcomes
        from toolorchestra.errors import TrainingError

        if not isinstance(env, PricedOutcomes):
            raise TrainingError(
                f"counterfactual.targets: escalation needs recorded outcomes of every "
                f"model (a replay world); env {env.name!r} has none"
            )
        if len(tasks) < 2 * folds:
            raise TrainingError(
                f"counterfactual.targets: escalation needs at least {2 * folds} train "
                f"tasks to cross-fit on; got {len(tasks)}"
            )
        self.env = env
        self.models = list(env.models())
        self.index = {model: position for position, model in enumerate(self.models)}
        rows = {task.id: row for task, row in zip(tasks, outcome_rows(env, tasks), strict=True)}
        self._attempted = {
            task_id: [bool(row[model]["attempted"]) for model in self.models] for task_id, row in rows.items()
        }
        order = sorted(rows)
        np.random.RandomState(seed).shuffle(order)
        self._fold = {task_id: position % folds for position, task_id in enumerate(order)}
        self._fits = [
            fit_from_rows(
                self.models,
                [rows[task_id] for task_id in order if self._fold[task_id] != fold],
                max_consults=max_consults,
                prior_strength=prior_strength,
            )
            for fold in range(folds)
        ]

    def model_for(self, task: Any) -> EscalationModel:
        return self._fits[self._fold[task.id]]

    def attempted_by(self, task: Any) -> list[bool]:
        return self._attempted[task.id]
