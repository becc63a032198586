"""Stop a training run that cannot learn, naming why, instead of training on without signal.

Tool and model failures inside an episode are observations (the loop shows them to the orchestrator), so a
broken environment (a missing package, an unreachable model server) does not crash the rollouts: every call
just returns an error. `check_trajectories` looks at a step's episodes right after the rollouts and raises
`TrainingError` with the first distinct errors when no episode got a single tool result without error and
either every episode errored or some call failed by raising (a tool, model or orchestrator exception, as
opposed to the policy's own bad arguments). The SFT warm start raises the same error when it finds no example
(train/sft.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from toolorchestra.errors import TrainingError

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

MAX_SHOWN = 3
# How the loop, the rollout engine and the LLM tools word a failure that came from an exception.
RAISED_PREFIXES = ("orchestrator failed", "tool ", "model ")
RAISED_MARKER = " failed: "


def first_distinct(errors: Iterable[str | None], limit: int = MAX_SHOWN) -> list[str]:
    """The first `limit` non-empty messages with distinct causes, in order ("model A failed: X" and
    "model B failed: X" are one cause)."""
    shown: list[str] = []
    causes: set[str] = set()
    for error in errors:
        if error and _cause(error) not in causes:
            causes.add(_cause(error))
            shown.append(error)
            if len(shown) == limit:
                break
    return shown


def _cause(error: str) -> str:
    return error.split(RAISED_MARKER, 1)[1] if raised(error) else error


def format_errors(errors: list[str]) -> str:
    return "; ".join(f"({index}) {error}" for index, error in enumerate(errors, 1))


def trajectory_errors(trajectory: Trajectory) -> tuple[list[str], bool]:
    """(the episode's failures: tool call errors, orchestrator failures, a recorded error; whether any tool call
    returned a result without error)."""
    errors = [step.error for step in trajectory.tool_steps if step.error]
    errors += [
        step.error
        for step in trajectory.steps
        if step.kind == "orchestrator" and step.error and step.error.startswith("orchestrator failed")
    ]
    recorded = trajectory.score_details.get("error")
    if recorded:
        errors.append(str(recorded))
    succeeded = any(not step.error for step in trajectory.tool_steps)
    return errors, succeeded


def raised(error: str) -> bool:
    """Whether a failure message comes from an exception (not from a tool refusing bad arguments)."""
    return error.startswith(RAISED_PREFIXES) and RAISED_MARKER in error


def check_trajectories(trajectories: list[Trajectory], step: int) -> None:
    """Raise TrainingError when the trajectories of a step's episodes show a broken environment (see the module
    docstring)."""
    if not trajectories:
        return
    per_episode = [trajectory_errors(trajectory) for trajectory in trajectories]
    if any(succeeded for _, succeeded in per_episode):
        return
    every_episode_errored = all(errors for errors, _ in per_episode)
    some_call_raised = any(raised(error) for errors, _ in per_episode for error in errors)
    if not (every_episode_errored or some_call_raised):
        return
    errored = sum(1 for errors, _ in per_episode if errors)
    shown = first_distinct(error for errors, _ in per_episode for error in errors)
    raise TrainingError(
        f"step {step}: no tool call of any of the {len(trajectories)} episodes succeeded ({errored} of them "
        f"errored), so there is nothing to learn from: the environment looks broken. First errors: "
        f"{format_errors(shown)}"
    )
