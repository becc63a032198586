"""What some environments can do beyond `Env`, as typed protocols checked with `isinstance`.

A consumer that needs a capability (recorded outcomes for the outcome model, model labels for
--hold-out-models, async scoring for the eval runner) asks `isinstance(env, Capability)` and gets a typed
object, instead of probing attributes by name. The replay worlds (envs/replay/base.py) implement
`ModelWorld`, `LabeledModels`, `RecordedOutcomes`, `PricedOutcomes` and `AsyncScoring`, and those loaded through
the replay format (replay:DIR, replay:frames) `LiveAnswerKeys`; the toolscale envs
implement `GoldActionTasks`. `runtime_checkable` checks that the members exist, not their signatures: the
signatures here are for the type checker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory
    from toolorchestra.envs.base import Score, Task


@runtime_checkable
class ModelWorld(Protocol):
    """A world with a pool of named models (the replay worlds)."""

    def models(self) -> list[str]:
        """Every model of the world, in a fixed order."""
        ...


@runtime_checkable
class LabeledModels(ModelWorld, Protocol):
    """A model world whose orchestrator sees models under short labels."""

    def label(self, model: str) -> str:
        """The label the orchestrator uses for `model`."""
        ...


@runtime_checkable
class RecordedOutcomes(ModelWorld, Protocol):
    """A model world that knows each model's recorded answer (and its grade) on each task."""

    def record(self, task_id: str, model: str) -> Any:
        """The record of `model` on task `task_id` (envs/replay/base.py's `Recorded`: response, correct, ...)."""
        ...


@runtime_checkable
class PricedOutcomes(RecordedOutcomes, Protocol):
    """Recorded outcomes with what one call of a model on a task costs."""

    def call_cost(self, task: Task, model: str) -> float:
        """Dollars that one call of `model` on `task` costs at the world's current prices."""
        ...

    def call_latency(self, task: Task, model: str) -> float:
        """Seconds that one call of `model` on `task` takes (recorded, else the model's latency prior)."""
        ...


@runtime_checkable
class AsyncScoring(Protocol):
    """An env whose scoring may await (e.g. an LLM judge); preferred over `Env.score` where present."""

    async def ascore(self, task: Task, trajectory: Trajectory) -> Score: ...


@runtime_checkable
class GoldActionTasks(Protocol):
    """An env that says whether its tasks carry `meta["gold_actions"]` and `meta["required_facts"]` (toolscale)."""

    gold_actions: bool


@runtime_checkable
class LiveAnswerKeys(Protocol):
    """A world that can compare replies to questions outside it (live ones) as it compares its own answers: what
    lets the reader consult a live model, adopt its answer when it commits, and escalate otherwise."""

    def live_answer_key(self, text: str) -> str | None:
        """The answer a live reply commits to, in the world's terms; None when it commits to none."""
        ...


__all__ = [
    "AsyncScoring",
    "GoldActionTasks",
    "LabeledModels",
    "LiveAnswerKeys",
    "ModelWorld",
    "PricedOutcomes",
    "RecordedOutcomes",
]
