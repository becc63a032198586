"""The outcome model behind counterfactual targets (train/outcome_model.py), on a recorded world written here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from toolorchestra.envs.base import Task
from toolorchestra.errors import TrainingError
from toolorchestra.train.outcome_model import SubtaskOutcomeModel


@dataclass
class Grade:
    correct: bool


class RecordedGrades:
    """A test fake of a replay world's recorded outcomes: grades[task_id][model]."""

    name = "fake-recorded"

    def __init__(self, grades: dict[str, dict[str, bool]]) -> None:
        self.grades = grades

    def models(self) -> list[str]:
        return ["m1", "m2", "m3"]

    def record(self, task_id: str, model: str) -> Grade:
        return Grade(self.grades[task_id][model])


def task(task_id: str, subtask: str | None, split: str = "train") -> Task:
    return Task(id=task_id, split=split, prompt=f"question {task_id}", subtask=subtask)


GRADES = {
    "a1": {"m1": True, "m2": False, "m3": True},
    "a2": {"m1": True, "m2": True, "m3": False},
    "a3": {"m1": False, "m2": False, "m3": False},
    "b1": {"m1": False, "m2": True, "m3": True},
    "t1": {"m1": False, "m2": False, "m3": False},
}
TRAIN = [task("a1", "arc"), task("a2", "arc"), task("a3", "arc"), task("b1", "mbpp")]


def test_train_tasks_get_the_mean_grade_of_the_other_tasks_of_their_subtask() -> None:
    model = SubtaskOutcomeModel(RecordedGrades(GRADES), TRAIN)
    # a1 leaves itself out: the mean over a2, a3
    assert model.probabilities(TRAIN[0], ["m1", "m2", "m3"]) == [0.5, 0.5, 0.0]
    assert model.probabilities(TRAIN[2], ["m3", "m1"]) == [0.5, 1.0]
    # b1 is alone in its subtask: the mean over every other train task
    assert model.probabilities(TRAIN[3], ["m1", "m2", "m3"]) == pytest.approx([2 / 3, 1 / 3, 1 / 3])


def test_unseen_tasks_get_the_whole_mean_of_their_subtask_or_of_everything() -> None:
    model = SubtaskOutcomeModel(RecordedGrades(GRADES), TRAIN)
    assert model.probabilities(task("t1", "arc", "test"), ["m1", "m2", "m3"]) == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert model.probabilities(task("t1", "winogrande", "test"), ["m2"]) == [0.5]


def test_errors_name_what_is_missing() -> None:
    with pytest.raises(TrainingError, match="recorded outcomes"):
        SubtaskOutcomeModel(object.__new__(type("NoRecords", (), {"name": "plain"})), TRAIN)
    with pytest.raises(TrainingError, match="no train task"):
        SubtaskOutcomeModel(RecordedGrades(GRADES), [])
    with pytest.raises(TrainingError, match="m9"):
        SubtaskOutcomeModel(RecordedGrades(GRADES), TRAIN).probabilities(TRAIN[0], ["m9"])
