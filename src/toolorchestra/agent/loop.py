"""The orchestrator loop: backend turns over the episode engine (agent/engine.py).

One turn: the orchestrator model writes reasoning and tool calls; every call of that turn runs
concurrently; each result becomes a `tool` message. The episode ends when `answer` succeeds, after
`max_turns`, or once the dollars spent reach `max_budget_usd`.

`protocol` (agent/paper.py) is the paper's mode of the same loop: the request is rebuilt from the episode's
steps every turn instead of growing as a chat history, and only the first valid call of a turn runs.
"""

from __future__ import annotations

from typing import Any

from toolorchestra.agent.engine import NO_CALL_HINT, StepCallback, serving, take_turn
from toolorchestra.agent.paper import PaperProtocol
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import initial_messages, task_rules, wording_for
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import Backend, Completion
from toolorchestra.catalog.schema import Price
from toolorchestra.envs.base import Task
from toolorchestra.tools.base import Tool

__all__ = ["NO_CALL_HINT", "Orchestrator", "StepCallback"]


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
        protocol: PaperProtocol | None = None,
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
        self.protocol = protocol

    def initial_messages(self, task: Task) -> list[dict[str, Any]]:
        if self.protocol is not None:
            return self.protocol.messages(task.prompt, None)
        # Envs whose tasks come with rules (a ToolScale domain policy) extend the system prompt with them.
        return initial_messages(
            list(self.tools.values()), task.prompt, self.preference, wording_for(task.id), task_rules(task)
        )

    async def run(self, task: Task) -> Trajectory:
        with serving(task):
            return await self._run(task)

    async def _run(self, task: Task) -> Trajectory:
        trajectory = Trajectory(
            task_id=task.id,
            split=task.split,
            question=task.prompt,
            preference=self.preference.weights(),
            messages=self.initial_messages(task),
        )
        schemas = [tool.schema() for tool in self.tools.values()]
        for turn in range(self.max_turns):
            messages, tools, offered = trajectory.messages, self.tools, schemas
            if self.protocol is not None:  # the paper's mode: a rebuilt request, maybe fewer tools
                if turn:
                    messages = self.protocol.messages(task.prompt, trajectory)
                tools = self.protocol.offered(self.tools, turn, self.max_turns)
                offered = schemas if len(tools) == len(self.tools) else [tool.schema() for tool in tools.values()]
            try:
                completion = await self.backend.complete(
                    messages, offered, max_tokens=self.max_tokens, temperature=self.temperature
                )
            except Exception as exc:  # the episode ends with the error recorded, the batch goes on
                step = Step(turn=turn, kind="orchestrator", name=self.model_name, error=f"orchestrator failed: {exc}")
                trajectory.steps.append(step)
                if self.on_step is not None:
                    self.on_step(step)
                trajectory.stop_reason = "error"
                return trajectory
            calls, call_errors = completion.tool_calls, completion.call_errors
            if self.protocol is not None:
                calls, call_errors = self.protocol.select(calls, call_errors, tools)
            await take_turn(
                trajectory,
                self.tools,
                task,
                self._turn_step(turn, completion, call_errors),
                calls,
                call_errors,
                prose=completion.text,
                on_step=self.on_step,
            )
            if trajectory.stop_reason == "answer":
                return trajectory
            if self.max_budget_usd is not None and trajectory.cost_usd >= self.max_budget_usd:
                trajectory.stop_reason = "budget"
                return trajectory
        trajectory.stop_reason = "max_turns"
        return trajectory

    def _turn_step(self, turn: int, completion: Completion, call_errors: list[str]) -> Step:
        usage = completion.usage
        return Step.model_construct(
            turn=turn,
            kind="orchestrator",
            name=self.model_name,
            model=self.model_name,
            output=completion.text,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=self.price.cost(usage.prompt_tokens, usage.completion_tokens),
            latency_s=completion.latency_s,
            error="; ".join(call_errors) or None,
        )
