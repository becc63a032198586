"""The episode engine: the one implementation of an orchestrator turn, and the one place tool calls run.

A turn is: the orchestrator's output (already parsed into prose, calls and call errors) -> its `Step` and
assistant message -> every call run concurrently with `current_task` set -> one `Step` and one `tool` message
per call -> the final answer, if a call gave one. The live loop (agent/loop.py), the rollout engine
(train/rollout.py, which observes the same turns at the token level), SFT rendering, counterfactual label
scoring, the tau2 agent and the scripted baselines all go through `take_turn` or `run_calls`, so costs,
latencies, error wordings and stop reasons are the same on every path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import ToolCall
from toolorchestra.envs.base import Env, Task, current_task
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

NO_CALL_HINT = "No tool call found. Call one of the tools; call the answer tool to finish."

Message = dict[str, Any]
StepCallback = Callable[[Step], None]


@contextmanager
def serving(task: Task) -> Iterator[None]:
    """Make `task` the episode's task for backends that answer per task (the replay worlds)."""
    token = current_task.set(task)
    try:
        yield
    finally:
        current_task.reset(token)


async def run_calls(
    tools: Mapping[str, Tool],
    calls: Sequence[ToolCall],
    task: Task,
    messages: Sequence[Message] = (),
    *,
    wall_clock: bool = True,
    steps: Sequence[Step] = (),
) -> list[ToolResult]:
    """Run `calls` concurrently. Never raises for a tool's failure: an unknown tool or a tool that raises
    becomes a `ToolResult` with the error as the orchestrator will read it. `wall_clock`: a tool without a
    model that reports no latency is charged its wall time (live runs); training leaves it 0 s so that
    rewards are reproducible (exact resume)."""
    context = ToolContext(task=task, messages=list(messages), steps=list(steps))
    with serving(task):
        if len(calls) == 1:  # the common case: no task objects to create and schedule
            return [await _run_one(tools, calls[0], context, wall_clock)]
        return list(await asyncio.gather(*(_run_one(tools, call, context, wall_clock) for call in calls)))


async def _run_one(tools: Mapping[str, Tool], call: ToolCall, context: ToolContext, wall_clock: bool) -> ToolResult:
    tool = tools.get(call.name)
    if tool is None:
        return ToolResult(error=f"unknown tool {call.name!r}; available: {sorted(tools)}")
    started = time.perf_counter()
    try:
        result = await tool.run(call.arguments, context)
    except Exception as exc:  # a tool bug is shown to the orchestrator, not raised
        result = ToolResult(error=f"tool {call.name} failed: {exc.__class__.__name__}: {exc}")
    if wall_clock and result.latency_s == 0.0 and result.model is None:
        result.latency_s = time.perf_counter() - started
    return result


def tool_step(turn: int, call: ToolCall, result: ToolResult) -> Step:
    # model_construct: every field comes from already-validated models, so skip re-validation (hot path).
    return Step.model_construct(
        turn=turn,
        kind="tool",
        name=call.name,
        model=result.model,
        label=result.label,
        arguments=call.arguments,
        output=result.observation(),
        prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens,
        cost_usd=result.cost_usd,
        latency_s=result.latency_s,
        error=result.error,
        meta=result.meta,
    )


def tool_message(call: ToolCall, result: ToolResult) -> Message:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.observation()}


def assistant_message(prose: str, calls: Sequence[ToolCall]) -> Message:
    message: Message = {"role": "assistant", "content": prose}
    if calls:
        message["tool_calls"] = [call.to_openai() for call in calls]
    return message


@dataclass
class TurnRecord:
    """What one turn added after the orchestrator's own message: messages and the results of its calls."""

    messages: list[Message] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)


async def take_turn(
    trajectory: Trajectory,
    tools: Mapping[str, Tool],
    task: Task,
    orchestrator: Step,
    calls: Sequence[ToolCall],
    call_errors: Sequence[str],
    *,
    prose: str | None = None,
    on_step: StepCallback | None = None,
    wall_clock: bool = True,
) -> TurnRecord:
    """Record one orchestrator turn in `trajectory` and run its calls.

    `orchestrator` is the turn's own Step (its tokens, cost and latency as the caller measured them); the
    assistant message carries `prose` (default: the step's output) and the calls. With no call, the
    orchestrator is told so. The episode's latency grows by the orchestrator's latency plus the slowest call
    of the turn. Sets `stop_reason = "answer"` when a call gave the final answer."""
    record = on_step or (lambda step: None)
    trajectory.steps.append(orchestrator)
    record(orchestrator)
    trajectory.messages.append(assistant_message(orchestrator.output if prose is None else prose, calls))
    first_new = len(trajectory.messages)
    if not calls:
        trajectory.messages.append({"role": "user", "content": "\n".join(call_errors or [NO_CALL_HINT])})
        trajectory.latency_s += orchestrator.latency_s
        return TurnRecord(trajectory.messages[first_new:])
    results = await run_calls(tools, calls, task, trajectory.messages, wall_clock=wall_clock, steps=trajectory.steps)
    trajectory.latency_s += orchestrator.latency_s + max(result.latency_s for result in results)
    for call, result in zip(calls, results, strict=True):
        step = tool_step(orchestrator.turn, call, result)
        trajectory.steps.append(step)
        record(step)
        trajectory.messages.append(tool_message(call, result))
        if result.final and trajectory.final_answer is None:
            trajectory.final_answer = result.answer
            trajectory.answered_by = result.model
    if call_errors:
        trajectory.messages.append({"role": "user", "content": "\n".join(call_errors)})
    if trajectory.final_answer is not None:
        trajectory.stop_reason = "answer"
    return TurnRecord(trajectory.messages[first_new:], results)


@dataclass
class Attempt:
    """One call tried alone as a one-turn episode, and its score."""

    call: ToolCall
    result: ToolResult
    trajectory: Trajectory

    @property
    def correct(self) -> bool:
        return bool(self.trajectory.correct)


async def try_each(env: Env, task: Task, tools: Mapping[str, Tool], calls: Sequence[ToolCall]) -> list[Attempt]:
    """Run each call alone, as the first and only turn of an episode, and score it with the env: e.g. every
    label of the answer tool. A call that does not end the episode scores as wrong. No wall-clock latency
    (training reproducibility)."""
    attempts = []
    for call in calls:
        (result,) = await run_calls(tools, [call], task, wall_clock=False)
        trajectory = Trajectory(
            task_id=task.id,
            question=task.prompt,
            final_answer=result.answer,
            answered_by=result.model,
            latency_s=result.latency_s,
            steps=[tool_step(0, call, result)],
        )
        with serving(task):
            trajectory.correct = bool(env.score(task, trajectory).correct) if result.final else False
        attempts.append(Attempt(call, result, trajectory))
    return attempts
