"""Correctness predictors over a recorded world: P(model j is right on task i), fitted on recorded grades.

The one home of two predictors that the router baseline (bench/router.py), the counterfactual outcome model
(train/outcome_model.py) and the analysis scripts (scripts/outcome_model_cv.py, scripts/target_policy.py) share:

- `SubtaskMeanGrades`: each model's mean grade over the fitted tasks of the task's subtask (or over every
  fitted task: `by_subtask=False`, or when no other fitted task shares the subtask). A fitted task is left out
  of its own estimate, so no task's own grade enters its prediction.
- `TfidfCorrectness`: one logistic regression per model (liblinear) over TF-IDF features of `router_text`.

Both are `fit(tasks, grades)` then `predict(tasks)`, `grades[i, j]` whether model j was right on task i.
`cross_fit` gives every task the prediction of a predictor fitted on the other folds; `log_loss` scores it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from toolorchestra.envs.base import Task


class Predictor(Protocol):
    def fit(self, tasks: Sequence[Task], grades: np.ndarray) -> Predictor: ...

    def predict(self, tasks: Sequence[Task]) -> np.ndarray: ...


def router_text(task: Task) -> str:
    """The text the TF-IDF predictor reads: a token naming the subtask, then the question (or the prompt)."""
    question = str(task.meta.get("query") or task.prompt)
    return f"subtask_{(task.subtask or 'none').replace('-', '_').replace(' ', '_')} {question}"


class SubtaskMeanGrades:
    """Mean grade per model over the fitted tasks of the same subtask, leaving a fitted task out of its own."""

    def __init__(self, by_subtask: bool = True) -> None:
        self.by_subtask = by_subtask
        self._sums: dict[str | None, np.ndarray] = {}
        self._counts: dict[str | None, int] = {}
        self._own: dict[str, np.ndarray] = {}

    def _key(self, task: Task) -> str | None:
        return task.subtask if self.by_subtask else None

    def fit(self, tasks: Sequence[Task], grades: np.ndarray) -> SubtaskMeanGrades:
        if not len(tasks):
            raise ValueError("no task to fit on")
        values = np.asarray(grades, dtype=float)
        self._sums, self._counts = {}, {}
        self._own = {task.id: values[row] for row, task in enumerate(tasks)}
        for row, task in enumerate(tasks):
            for key in {self._key(task), None}:  # None: every task, for a subtask with no other task
                self._sums[key] = self._sums.get(key, 0.0) + values[row]
                self._counts[key] = self._counts.get(key, 0) + 1
        return self

    def predict(self, tasks: Sequence[Task]) -> np.ndarray:
        """Shape (len(tasks), models)."""
        return np.stack([self._one(task) for task in tasks])

    def _one(self, task: Task) -> np.ndarray:
        own = self._own.get(task.id)
        seen = int(own is not None)
        key = self._key(task) if self._counts.get(self._key(task), 0) > seen else None
        total, count = self._sums[key], self._counts[key]
        if own is not None:
            total, count = total - own, count - 1
        if count <= 0:
            raise ValueError("needs at least two fitted tasks to leave one out")
        return total / count


class TfidfCorrectness:
    """Per-model logistic regressions (inverse regularisation `strength`) over shared TF-IDF features."""

    def __init__(self, strength: float = 0.3, seed: int | None = 0) -> None:
        self.strength = strength
        self.seed = seed
        self._vectorizer: Any = None
        self._classifiers: list[Any] = []

    def fit(self, tasks: Sequence[Task], grades: np.ndarray) -> TfidfCorrectness:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        self._vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=20_000)
        features = self._vectorizer.fit_transform([router_text(task) for task in tasks])
        self._classifiers = []
        for column in range(grades.shape[1]):
            labels = np.asarray(grades[:, column]).astype(int)
            if labels.min() == labels.max():  # one class only: predict its rate
                self._classifiers.append(float(labels[0]))
                continue
            classifier = LogisticRegression(C=self.strength, solver="liblinear", random_state=self.seed)
            self._classifiers.append(classifier.fit(features, labels))
        return self

    def predict(self, tasks: Sequence[Task]) -> np.ndarray:
        """Shape (len(tasks), models)."""
        features = self._vectorizer.transform([router_text(task) for task in tasks])
        columns = [
            np.full(features.shape[0], classifier)
            if isinstance(classifier, float)
            else classifier.predict_proba(features)[:, 1]
            for classifier in self._classifiers
        ]
        return np.stack(columns, axis=1)


def folds(count: int, number: int = 5, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(fitted rows, held rows) of each of `number` shuffled folds over `count` rows."""
    from sklearn.model_selection import KFold

    return list(KFold(number, shuffle=True, random_state=seed).split(np.zeros((count, 1))))


def cross_fit(
    make: Callable[[], Predictor],
    tasks: Sequence[Task],
    grades: np.ndarray,
    splits: Sequence[tuple[np.ndarray, np.ndarray]],
) -> np.ndarray:
    """Each task's prediction by a fresh `make()` fitted on the tasks outside its fold."""
    predicted = np.zeros(grades.shape)
    for fitted, held in splits:
        predictor = make().fit([tasks[i] for i in fitted], grades[fitted])
        predicted[held] = predictor.predict([tasks[i] for i in held])
    return predicted


def log_loss(probabilities: np.ndarray, grades: np.ndarray) -> float:
    """Mean binary log-loss, probabilities clipped to [1e-4, 1 - 1e-4]."""
    clipped = np.clip(probabilities, 1e-4, 1 - 1e-4)
    return float(-np.mean(grades * np.log(clipped) + (1 - grades) * np.log(1 - clipped)))


def target_picks(cost: np.ndarray, probabilities: np.ndarray, weights: dict[str, float]) -> list[int]:
    """Per task (row), the model with the best expected ToolOrchestra reward (`weights`) when model j is right
    with probability `probabilities[i, j]` and costs `cost[i, j]`: the greedy policy that counterfactual
    outcome-model targets ask for."""
    from toolorchestra.reward import expected_group_rewards

    rewards = [
        expected_group_rewards([{"cost": dollars} for dollars in cost[row]], list(probabilities[row]), weights)
        for row in range(len(cost))
    ]
    return [int(np.argmax(row)) for row in rewards]
