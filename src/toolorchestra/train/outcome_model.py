"""Outcome models for counterfactual targets: how likely each model is to answer a training task right.

A replay world records whether each model was right on each question, and the counterfactual estimator
(train/counterfactual.py) can score every answer label with those recorded grades. On one question they are
mostly noise: which of several similar models happened to be right is not predictable from the question, yet it
dominates the target, and the label the policy favours drifts from step to step with the questions drawn.
An outcome model replaces each recorded grade by a probability estimated over the train split; the expected
ToolOrchestra reward of each label (`toolorchestra.reward.expected_group_rewards`, costs and latencies still
the recorded ones of that question) is then a low-variance target the policy can follow.

`SubtaskOutcomeModel`: each model's mean correctness over the other train tasks of the same subtask (leave one
out, so no task's own grade enters its target). The subtask is a field of the task that the env knows and the
policy never sees: the policy has to read the task type from the question (an asymmetric critic). It was chosen
over TF-IDF logistic regression per model (the `router` baseline's predictor) by 5-fold cross-validated
log-loss on replay:routerbench train: 0.571 against 0.578-0.605 (scripts/outcome_model_cv.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.capabilities import RecordedOutcomes
from toolorchestra.errors import TrainingError


class SubtaskOutcomeModel:
    """P(model is right on task) = the model's mean grade over the other train tasks of the task's subtask."""

    def __init__(self, env: Env, tasks: Sequence[Task]) -> None:
        if not isinstance(env, RecordedOutcomes):
            raise TrainingError(f"algorithm.counterfactual_targets: outcome_model needs recorded outcomes of every "
                                f"model (a replay world); env {env.name!r} has none")
        self.models: list[str] = list(env.models())
        self._record = env.record
        self._right: dict[str | None, list[float]] = {}
        self._count: dict[str | None, int] = {}
        for task in tasks:
            grades = self._grades(task)
            for key in (task.subtask, None):  # None: every task, for a subtask with one task only
                totals = self._right.setdefault(key, [0.0] * len(self.models))
                self._right[key] = [total + grade for total, grade in zip(totals, grades)]
                self._count[key] = self._count.get(key, 0) + 1
        if not self._count:
            raise TrainingError("algorithm.counterfactual_targets: outcome_model has no train task to fit on")
        self._seen = {task.id for task in tasks}

    def _grades(self, task: Task) -> list[float]:
        return [float(self._record(task.id, model).correct) for model in self.models]

    def probabilities(self, task: Task, models: Sequence[str]) -> list[float]:
        """P(right) of each of `models` on `task` (leave-one-out when `task` is a train task)."""
        key: Any = task.subtask if self._count.get(task.subtask, 0) > (task.id in self._seen) else None
        right, count = list(self._right[key]), self._count[key]
        if task.id in self._seen:
            right = [total - grade for total, grade in zip(right, self._grades(task))]
            count -= 1
        if count <= 0:
            raise TrainingError("algorithm.counterfactual_targets: outcome_model needs at least two train tasks")
        index = {model: position for position, model in enumerate(self.models)}
        missing = [model for model in models if model not in index]
        if missing:
            raise TrainingError(f"outcome_model: no recorded outcomes for models {missing}")
        return [right[index[model]] / count for model in models]
