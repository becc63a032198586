"""The environment interface: tasks in, tools out, a finished trajectory scored."""

from __future__ import annotations

import contextvars
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory
    from toolorchestra.tools.base import Tool


class Task(BaseModel):
    id: str
    split: str = "test"
    prompt: str
    subtask: str | None = Field(None, description="a grouping for per-subtask metrics, e.g. mbpp")
    gold: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class Score(BaseModel):
    correct: bool
    details: dict[str, Any] = Field(default_factory=dict)


# The task an episode serves, visible to backends that answer per task (the replay worlds). A leaf here, beside
# Task, so that backends and envs read it without importing the agent.
current_task: contextvars.ContextVar[Task | None] = contextvars.ContextVar("current_task", default=None)


class Env(ABC):
    """A deterministic world: the same task, tools and trajectory always give the same score."""

    name: str = "env"

    @abstractmethod
    def tasks(self, split: str) -> list[Task]:
        """All tasks of `split` in a fixed order."""

    @abstractmethod
    def tools_for(self, task: Task) -> list[Tool]:
        """The tools offered while solving `task`."""

    @abstractmethod
    def score(self, task: Task, trajectory: Trajectory) -> Score:
        """Whether the finished trajectory solved the task, with details for the metrics."""
