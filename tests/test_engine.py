"""The episode engine: one turn, one place where tool calls run, one wording for tool errors."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

from toolorchestra.agent.engine import NO_CALL_HINT, run_calls, take_turn, try_each
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import ToolCall
from toolorchestra.envs.base import Env, Score, Task, current_task
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

SRC = Path(__file__).resolve().parents[1] / "src" / "toolorchestra"
TASK = Task(id="t1", prompt="what is 2+2?", gold="4")


class EchoTool(Tool):
    """Unit-test tool: echoes its argument after a short sleep, and records the task it saw."""

    name = "echo"
    description = "echo"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

    def __init__(self) -> None:
        self.seen_tasks: list[str | None] = []

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        task = current_task.get()
        self.seen_tasks.append(task.id if task else None)
        await asyncio.sleep(0.01)
        return ToolResult(output=str(arguments.get("text")))


class BrokenTool(Tool):
    """Unit-test tool that raises, as a buggy tool would."""

    name = "broken"
    description = "raises"
    parameters = {"type": "object", "properties": {}}

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError("boom")


class AnswerStub(Tool):
    """Unit-test answer tool: answers with the `model` argument and ends the episode."""

    name = "answer"
    description = "answer"
    parameters = {"type": "object", "properties": {"model": {"type": "string"}}}

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        model = str(arguments["model"])
        return ToolResult(output=model, final=True, answer=model, model=model, label=model, cost_usd=0.5,
                          latency_s=1.0)


class ExactEnv(Env):
    """Unit-test env: right when the final answer equals the gold."""

    name = "exact"

    def tasks(self, split: str) -> list[Task]:
        return [TASK]

    def tools_for(self, task: Task) -> list[Tool]:
        return []

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        return Score(correct=trajectory.final_answer == task.gold)


def _orchestrator_step(turn: int = 0) -> Step:
    return Step(turn=turn, kind="orchestrator", name="orch", output="thinking", latency_s=0.25)


async def test_a_turn_runs_its_calls_concurrently_with_the_task_set_and_words_failures_once() -> None:
    echo, broken = EchoTool(), BrokenTool()
    tools = {tool.name: tool for tool in (echo, broken)}
    trajectory = Trajectory(task_id=TASK.id)
    calls = [ToolCall(id="a", name="echo", arguments={"text": "hi"}), ToolCall(id="b", name="broken", arguments={}),
             ToolCall(id="c", name="nosuch", arguments={})]
    record = await take_turn(trajectory, tools, TASK, _orchestrator_step(), calls, ["bad call"])
    assert echo.seen_tasks == ["t1"] and current_task.get() is None
    assert [step.kind for step in trajectory.steps] == ["orchestrator", "tool", "tool", "tool"]
    assert trajectory.steps[2].error == "tool broken failed: RuntimeError: boom"
    assert trajectory.steps[3].error is not None and "unknown tool 'nosuch'" in trajectory.steps[3].error
    assert [m["role"] for m in record.messages] == ["tool", "tool", "tool", "user"]
    assert record.messages[-1]["content"] == "bad call"
    assert trajectory.messages[0]["tool_calls"][0]["function"]["name"] == "echo"
    assert trajectory.stop_reason is None and trajectory.final_answer is None
    assert trajectory.latency_s >= 0.25 + 0.01  # the orchestrator, then the slowest call (wall clock)


async def test_a_turn_without_calls_tells_the_orchestrator_and_an_answer_ends_the_episode() -> None:
    trajectory = Trajectory(task_id=TASK.id)
    record = await take_turn(trajectory, {}, TASK, _orchestrator_step(), [], [])
    assert record.messages == [{"role": "user", "content": NO_CALL_HINT}] and record.results == []
    assert trajectory.latency_s == 0.25
    answer = AnswerStub()
    await take_turn(trajectory, {"answer": answer}, TASK, _orchestrator_step(1),
                    [ToolCall(id="x", name="answer", arguments={"model": "4"})], [], wall_clock=False)
    assert trajectory.stop_reason == "answer" and trajectory.final_answer == "4" and trajectory.answered_by == "4"
    assert trajectory.latency_s == 0.25 + 0.25 + 1.0 and trajectory.cost_usd == 0.5


async def test_try_each_scores_every_call_alone_and_a_raising_tool_is_an_error_not_an_exception() -> None:
    tools = {"answer": AnswerStub(), "broken": BrokenTool()}
    calls = [ToolCall(id="c", name="answer", arguments={"model": m}) for m in ("3", "4")]
    calls.append(ToolCall(id="c", name="broken", arguments={}))
    attempts = await try_each(ExactEnv(), TASK, tools, calls)
    assert [attempt.correct for attempt in attempts] == [False, True, False]
    assert attempts[2].result.error == "tool broken failed: RuntimeError: boom"
    assert attempts[1].trajectory.cost_usd == 0.5 and attempts[1].trajectory.latency_s == 1.0


async def test_run_calls_charges_wall_time_only_when_asked() -> None:
    call = [ToolCall(id="a", name="echo", arguments={"text": "x"})]
    (live,) = await run_calls({"echo": EchoTool()}, call, TASK)
    (train,) = await run_calls({"echo": EchoTool()}, call, TASK, wall_clock=False)
    assert live.latency_s > 0 and train.latency_s == 0.0


def _two_argument_run_calls(path: Path) -> list[int]:
    """Lines calling `<something>.run(<...>arguments, context)`: the shape of `Tool.run(call.arguments, context)`
    (a policy's `run(task, tools)` has another first argument)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
            and len(node.args) == 2 and "arguments" in ast.unparse(node.args[0])]


def test_tool_calls_execute_in_one_place_outside_tools() -> None:
    sites = {str(path.relative_to(SRC)): lines for path in sorted(SRC.rglob("*.py"))
             if path.parent.name != "tools" and (lines := _two_argument_run_calls(path))}
    assert list(sites) == ["agent/engine.py"] and len(sites["agent/engine.py"]) == 1, sites
