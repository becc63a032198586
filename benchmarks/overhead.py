"""Framework overhead of the orchestrator loop.

(a) Time the framework itself spends per orchestrator turn (prompt bookkeeping, dispatch of the turn's
    tool call, trajectory records), with an in-process backend that answers instantly. Baseline in the
    same run: the bare minimum work — the same backend and tool awaited in a plain loop.
(b) 256 concurrent episodes against a backend with 100 ms simulated latency per call: wall time divided
    by the ideal wall time (turns x 100 ms, as if every episode ran alone). Goal <= 1.1.

Run: .venv/bin/python benchmarks/overhead.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.backends.base import Backend, Completion, Usage
from toolorchestra.backends.toolcalls import parse_tool_calls
from toolorchestra.envs.base import Task
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

TURNS = 8
TURN_TEXT = 'Checking. <tool_call>{"name": "noop", "arguments": {"x": 1}}</tool_call>'
ANSWER_TEXT = '<tool_call>{"name": "answer", "arguments": {"answer": "42"}}</tool_call>'


class ScriptBackend(Backend):
    """Benchmark harness: `turns - 1` tool-calling turns then an answer, after `latency_s` each."""

    def __init__(self, turns: int, latency_s: float = 0.0) -> None:
        self.turns = turns
        self.latency_s = latency_s

    async def complete(self, messages: list[dict[str, Any]], tools=None, **_: Any) -> Completion:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        done = sum(1 for m in messages if m["role"] == "assistant")
        text = ANSWER_TEXT if done >= self.turns - 1 else TURN_TEXT
        prose, calls, errors = parse_tool_calls(text)
        return Completion(text=prose, tool_calls=calls, call_errors=errors, latency_s=self.latency_s,
                          usage=Usage(prompt_tokens=100, completion_tokens=20))


class NoopTool(Tool):
    name = "noop"
    description = "does nothing"
    parameters = {"type": "object", "properties": {"x": {"type": "integer"}}}

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(output="ok")


class AnswerNow(Tool):
    name = "answer"
    description = "final answer"
    parameters = {"type": "object", "properties": {"answer": {"type": "string"}}}

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(output=arguments["answer"], final=True, answer=arguments["answer"])


async def framework_turn_seconds(episodes: int) -> float:
    orchestrator = Orchestrator(ScriptBackend(TURNS), [NoopTool(), AnswerNow()], max_turns=TURNS)
    started = time.perf_counter()
    for index in range(episodes):
        trajectory = await orchestrator.run(Task(id=str(index), prompt="q"))
        assert trajectory.stop_reason == "answer" and len(trajectory.steps) == 2 * TURNS
    return (time.perf_counter() - started) / (episodes * TURNS)


async def bare_turn_seconds(episodes: int) -> float:
    """Same backend and tool calls awaited in a plain loop: what any harness must pay at least."""
    backend, tool, context = ScriptBackend(TURNS), NoopTool(), ToolContext(task=Task(id="b", prompt="q"))
    started = time.perf_counter()
    for _ in range(episodes):
        messages: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
        for _ in range(TURNS):
            completion = await backend.complete(messages)
            messages.append({"role": "assistant", "content": completion.text})
            for call in completion.tool_calls:
                result = await tool.run(call.arguments, context)
                messages.append({"role": "tool", "content": result.output})
    return (time.perf_counter() - started) / (episodes * TURNS)


async def concurrent_ratio(episodes: int, latency_s: float, turns: int) -> tuple[float, float]:
    orchestrator = Orchestrator(ScriptBackend(turns, latency_s), [NoopTool(), AnswerNow()], max_turns=turns)
    started = time.perf_counter()
    trajectories = await asyncio.gather(*(orchestrator.run(Task(id=str(i), prompt="q")) for i in range(episodes)))
    wall = time.perf_counter() - started
    assert all(t.stop_reason == "answer" for t in trajectories)
    ideal = turns * latency_s
    return wall, wall / ideal


async def sleep_only_ratio(episodes: int, latency_s: float, turns: int) -> float:
    """The floor any asyncio harness pays: the same sleeps with no framework at all."""

    async def episode() -> None:
        for _ in range(turns):
            await asyncio.sleep(latency_s)

    started = time.perf_counter()
    await asyncio.gather(*(episode() for _ in range(episodes)))
    return (time.perf_counter() - started) / (turns * latency_s)


def main() -> None:
    asyncio.run(framework_turn_seconds(20))  # warm-up
    framework = statistics.median(asyncio.run(framework_turn_seconds(200)) for _ in range(5))
    bare = statistics.median(asyncio.run(bare_turn_seconds(200)) for _ in range(5))
    wall, ratio = asyncio.run(concurrent_ratio(256, 0.100, 4))
    floor = asyncio.run(sleep_only_ratio(256, 0.100, 4))
    figures = {
        "framework_ms_per_turn": round(framework * 1e3, 4),
        "bare_loop_ms_per_turn": round(bare * 1e3, 4),
        "framework_overhead_ms_per_turn": round((framework - bare) * 1e3, 4),
        "ratio_framework_vs_bare": round(framework / bare, 2),
        "concurrent_256_wall_s": round(wall, 3),
        "concurrent_256_ideal_s": 0.4,
        "concurrent_256_wall_over_ideal": round(ratio, 3),
        "asyncio_sleep_only_wall_over_ideal": round(floor, 3),
    }
    print(f"(a) framework time per orchestrator turn: {figures['framework_ms_per_turn']:.3f} ms "
          f"(bare loop {figures['bare_loop_ms_per_turn']:.3f} ms, x{figures['ratio_framework_vs_bare']}); goal < 1 ms")
    print(f"(b) 256 concurrent episodes x 4 turns at 100 ms/call: wall {wall:.3f} s, ideal 0.400 s, "
          f"ratio {ratio:.3f}; goal <= 1.1 (asyncio alone, sleeps only: {floor:.3f})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
