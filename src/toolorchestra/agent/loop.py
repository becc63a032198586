"""The orchestrator loop.

One turn: the orchestrator model writes reasoning and tool calls; every call of that turn runs
concurrently; each result becomes a `tool` message. The episode ends when `answer` succeeds, after
`max_turns`, or once the dollars spent reach `max_budget_usd`.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any, Callable

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import initial_messages, task_rules, wording_for
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import Backend, Completion, ToolCall
from toolorchestra.catalog.schema import Price
from toolorchestra.envs.base import Task
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

# The task an episode serves, visible to backends that answer per task (the replay worlds).
current_task: contextvars.ContextVar[Task | None] = contextvars.ContextVar("current_task", default=None)

NO_CALL_HINT = "No tool call found. Call one of the tools; call the answer tool to finish."

StepCallback = Callable[[Step], None]


class Orchestrator:
    def __init__(
        self,
        backend: Backend,
        tools: list[Tool],
        *,
        model_name: str = "orchestrator",
        price: Price | None = None,
        preference: Preference | None = None,
        max_turns: int = 8,
        max_budget_usd: float | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        on_step: StepCallback | None = None,
    ) -> None:
        self.backend = backend
        self.tools = {tool.name: tool for tool in tools}
        self.model_name = model_name
        self.price = price or Price()
        self.preference = preference or Preference()
        self.max_turns = max_turns
        self.max_budget_usd = max_budget_usd
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.on_step = on_step

    def initial_messages(self, task: Task) -> list[dict[str, Any]]:
        # Envs whose tasks come with rules (a ToolScale domain policy) extend the system prompt with them.
        return initial_messages(list(self.tools.values()), task.prompt, self.preference, wording_for(task.id),
                                task_rules(task))

    async def run(self, task: Task) -> Trajectory:
        token = current_task.set(task)
        try:
            return await self._run(task)
        finally:
            current_task.reset(token)

    async def _run(self, task: Task) -> Trajectory:
        trajectory = Trajectory(task_id=task.id, split=task.split, question=task.prompt,
                                preference=self.preference.weights(), messages=self.initial_messages(task))
        schemas = [tool.schema() for tool in self.tools.values()]
        for turn in range(self.max_turns):
            try:
                completion = await self.backend.complete(
                    trajectory.messages, schemas, max_tokens=self.max_tokens, temperature=self.temperature
                )
            except Exception as exc:  # the episode ends with the error recorded, the batch goes on
                self._record(trajectory, Step(turn=turn, kind="orchestrator", name=self.model_name,
                                              error=f"orchestrator failed: {exc}"))
                trajectory.stop_reason = "error"
                return trajectory
            self._record_turn(trajectory, turn, completion)
            trajectory.messages.append(completion.assistant_message())
            if not completion.tool_calls:
                errors = completion.call_errors or [NO_CALL_HINT]
                trajectory.messages.append({"role": "user", "content": "\n".join(errors)})
                trajectory.latency_s += completion.latency_s
            else:
                results = await self._execute(completion.tool_calls, task, trajectory.messages)
                trajectory.latency_s += completion.latency_s + max(r.latency_s for r in results)
                for call, result in zip(completion.tool_calls, results):
                    self._record(trajectory, _tool_step(turn, call, result))
                    trajectory.messages.append(
                        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.observation()}
                    )
                    if result.final and trajectory.final_answer is None:
                        trajectory.final_answer = result.answer
                        trajectory.answered_by = result.model
                if completion.call_errors:
                    trajectory.messages.append({"role": "user", "content": "\n".join(completion.call_errors)})
                if trajectory.final_answer is not None:
                    trajectory.stop_reason = "answer"
                    return trajectory
            if self.max_budget_usd is not None and trajectory.cost_usd >= self.max_budget_usd:
                trajectory.stop_reason = "budget"
                return trajectory
        trajectory.stop_reason = "max_turns"
        return trajectory

    def _record_turn(self, trajectory: Trajectory, turn: int, completion: Completion) -> None:
        usage = completion.usage
        self._record(trajectory, Step.model_construct(
            turn=turn, kind="orchestrator", name=self.model_name, model=self.model_name, output=completion.text,
            prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
            cost_usd=self.price.cost(usage.prompt_tokens, usage.completion_tokens), latency_s=completion.latency_s,
            error="; ".join(completion.call_errors) or None,
        ))

    def _record(self, trajectory: Trajectory, step: Step) -> None:
        trajectory.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)

    async def _execute(self, calls: list[ToolCall], task: Task, messages: list[dict[str, Any]]) -> list[ToolResult]:
        context = ToolContext(task=task, messages=list(messages))
        if len(calls) == 1:  # the common case: no task objects to create and schedule
            return [await self._call(calls[0], context)]
        return list(await asyncio.gather(*(self._call(call, context) for call in calls)))

    async def _call(self, call: ToolCall, context: ToolContext) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolResult(error=f"unknown tool {call.name!r}; available: {sorted(self.tools)}")
        started = time.perf_counter()
        try:
            result = await tool.run(call.arguments, context)
        except Exception as exc:  # a tool bug is shown to the orchestrator, not raised
            result = ToolResult(error=f"tool {call.name} failed: {exc.__class__.__name__}: {exc}")
        if result.latency_s == 0.0 and result.model is None:
            result.latency_s = time.perf_counter() - started
        return result


def _tool_step(turn: int, call: ToolCall, result: ToolResult) -> Step:
    # model_construct: every field comes from already-validated models, so skip re-validation (hot path).
    return Step.model_construct(
        turn=turn, kind="tool", name=call.name, model=result.model, label=result.label, arguments=call.arguments,
        output=result.observation(), prompt_tokens=result.prompt_tokens,
        completion_tokens=result.completion_tokens, cost_usd=result.cost_usd, latency_s=result.latency_s,
        error=result.error,
    )
