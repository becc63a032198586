"""bench/predictors.py: the per-subtask mean and TF-IDF correctness predictors, cross-fitting and log-loss,
on tasks and grades written here."""

from __future__ import annotations

import numpy as np
import pytest

from toolorchestra.bench.predictors import (
    SubtaskMeanGrades,
    TfidfCorrectness,
    cross_fit,
    folds,
    log_loss,
    target_picks,
)
from toolorchestra.envs.base import Task


def task(task_id: str, subtask: str | None, prompt: str = "") -> Task:
    return Task(id=task_id, split="train", prompt=prompt or f"question {task_id}", subtask=subtask)


TASKS = [task("a1", "arc"), task("a2", "arc"), task("a3", "arc"), task("b1", "mbpp")]
GRADES = np.array([[1, 0, 1], [1, 1, 0], [0, 0, 0], [0, 1, 1]], dtype=bool)


def test_subtask_means_leave_a_fitted_task_out_and_fall_back_to_every_task() -> None:
    means = SubtaskMeanGrades().fit(TASKS, GRADES)
    predicted = means.predict(TASKS)
    assert predicted[0].tolist() == [0.5, 0.5, 0.0]  # a1: the mean over a2, a3
    assert predicted[3] == pytest.approx([2 / 3, 1 / 3, 1 / 3])  # b1 alone in mbpp: every other task
    unseen = means.predict([task("t1", "arc"), task("t2", "winogrande")])
    assert unseen[0] == pytest.approx([2 / 3, 1 / 3, 1 / 3]) and unseen[1].tolist() == [0.5, 0.5, 0.5]
    overall = SubtaskMeanGrades(by_subtask=False).fit(TASKS, GRADES).predict([task("t1", "arc")])
    assert overall[0].tolist() == [0.5, 0.5, 0.5]


def test_tasks_without_a_subtask_are_counted_once() -> None:
    plain = [task("p1", None), task("p2", None), task("p3", None)]
    predicted = SubtaskMeanGrades().fit(plain, GRADES[:3]).predict(plain)
    assert predicted[2].tolist() == [1.0, 0.5, 0.5]  # p3: the mean over p1, p2


def test_subtask_means_errors() -> None:
    with pytest.raises(ValueError, match="no task"):
        SubtaskMeanGrades().fit([], np.zeros((0, 3)))
    with pytest.raises(ValueError, match="two fitted tasks"):
        SubtaskMeanGrades().fit(TASKS[:1], GRADES[:1]).predict(TASKS[:1])


def test_tfidf_correctness_learns_the_word_that_decides_and_keeps_one_class_columns() -> None:
    tasks = [task(f"q{i}", "mix", prompt=f"{'alpha' if i % 2 else 'beta'} item {i}") for i in range(40)]
    grades = np.array([[i % 2, 1] for i in range(40)])  # model 0 right on alpha questions; model 1 always
    predictor = TfidfCorrectness(strength=10.0).fit(tasks, grades)
    predicted = predictor.predict([task("n1", "mix", "alpha item x"), task("n2", "mix", "beta item y")])
    assert predicted[0, 0] > 0.8 > 0.2 > predicted[1, 0]
    assert predicted[:, 1].tolist() == [1.0, 1.0]


def test_cross_fit_predicts_each_task_from_the_other_folds() -> None:
    tasks = [task(f"q{i}", "s" if i < 10 else "t") for i in range(20)]
    grades = np.array([[1.0] if i < 10 else [0.0] for i in range(20)])
    splits = folds(len(tasks), 5)
    assert sorted(np.concatenate([held for _, held in splits]).tolist()) == list(range(20))
    predicted = cross_fit(SubtaskMeanGrades, tasks, grades, splits)
    assert predicted[:10].tolist() == [[1.0]] * 10 and predicted[10:].tolist() == [[0.0]] * 10
    assert log_loss(predicted, grades) == pytest.approx(1e-4, rel=1e-3)  # clipped, never infinite
    assert log_loss(np.full(grades.shape, 0.5), grades) == pytest.approx(np.log(2))


def test_target_picks_trade_probability_against_cost() -> None:
    cost = np.array([[1.0, 0.01]])
    probabilities = np.array([[0.9, 0.8]])
    assert target_picks(cost, probabilities, {"accuracy": 1.0}) == [0]
    assert target_picks(cost, probabilities, {"accuracy": 1.0, "cost": 1.0}) == [1]
