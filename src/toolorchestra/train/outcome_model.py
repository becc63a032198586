"""Outcome models for counterfactual targets: how likely each model is to answer a training task right.

A replay world records whether each model was right on each question, and the counterfactual estimator
(train/recipes/counterfactual.py) can score every answer label with those recorded grades. On one question they are
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

import numpy as np

from toolorchestra.bench.predictors import SubtaskMeanGrades
from toolorchestra.envs.base import Env, Task
from toolorchestra.envs.capabilities import RecordedOutcomes
from toolorchestra.errors import TrainingError


class SubtaskOutcomeModel:
    """P(model is right on task) = the model's mean grade over the other train tasks of the task's subtask
    (bench/predictors.py's `SubtaskMeanGrades` over the env's recorded grades)."""

    def __init__(self, env: Env, tasks: Sequence[Task]) -> None:
        if not isinstance(env, RecordedOutcomes):
            raise TrainingError(
                f"counterfactual.targets: outcome_model needs recorded outcomes of every "
                f"model (a replay world); env {env.name!r} has none"
            )
        if not tasks:
            raise TrainingError("counterfactual.targets: outcome_model has no train task to fit on")
        self.models: list[str] = list(env.models())
        grades = np.array([[float(env.record(task.id, model).correct) for model in self.models] for task in tasks])
        self._means = SubtaskMeanGrades().fit(tasks, grades)
        self._index = {model: position for position, model in enumerate(self.models)}

    def probabilities(self, task: Task, models: Sequence[str]) -> list[float]:
        """P(right) of each of `models` on `task` (leave-one-out when `task` is a train task)."""
        missing = [model for model in models if model not in self._index]
        if missing:
            raise TrainingError(f"outcome_model: no recorded outcomes for models {missing}")
        try:
            right = self._means.predict([task])[0]
        except ValueError:
            raise TrainingError("counterfactual.targets: outcome_model needs at least two train tasks") from None
        return [float(right[self._index[model]]) for model in models]
