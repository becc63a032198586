"""The orchestrator loop against a scripted in-test backend (a fake, named as such)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from toolorchestra.agent import Orchestrator, Preference, current_task, read_trajectories, write_trajectory
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.backends.toolcalls import parse_tool_calls
from toolorchestra.catalog.schema import ModelSpec, Price
from toolorchestra.envs.base import Task
from toolorchestra.tools.base import Tool, ToolContext, ToolResult
from toolorchestra.tools.llm import AnswerTool, ExpertTool


class FakeScriptedBackend(Backend):
    """Test fake: replies with the next scripted text, parsed like a local model's output."""

    def __init__(self, script: list[str], latency_s: float = 0.0, usage: tuple[int, int] = (100, 20)) -> None:
        self.script = list(script)
        self.latency_s = latency_s
        self.usage = usage
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, messages, tools=None, **_: Any) -> Completion:
        self.seen.append([dict(m) for m in messages])
        text = self.script.pop(0) if self.script else "nothing left"
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        prose, calls, errors = parse_tool_calls(text)
        return Completion(text=prose, tool_calls=calls, call_errors=errors, latency_s=self.latency_s,
                          usage=Usage(prompt_tokens=self.usage[0], completion_tokens=self.usage[1]))


class FakeSleepTool(Tool):
    """Test fake: sleeps, then echoes; records the task it saw through the contextvar."""

    name = "sleep"
    description = "sleep then echo"
    parameters = {"type": "object", "properties": {"s": {"type": "number"}}}

    def __init__(self) -> None:
        self.tasks_seen: list[str] = []

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.tasks_seen.append(current_task.get().id)
        await asyncio.sleep(arguments.get("s", 0))
        return ToolResult(output=f"slept {arguments.get('s', 0)}")


def call(name: str, **arguments: Any) -> str:
    import json

    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def expert_pool() -> ModelPool:
    spec = ModelSpec(name="gpt-x", backend={"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "x"},
                     price=Price(input_per_m=2.0, output_per_m=8.0))
    return ModelPool([spec], backends={"gpt-x": FakeScriptedBackend(["391"], usage=(1000, 500))})


async def test_answer_ends_episode_and_costs_add_up():
    pool = expert_pool()
    tools = [ExpertTool("expert", "", {"expert-1": "gpt-x"}, pool), AnswerTool("answer", "", {}, pool)]
    orchestrator_backend = FakeScriptedBackend([
        "I will ask. " + call("expert", model="expert-1", question="17*23?"),
        call("answer", answer="391"),
    ])
    orchestrator = Orchestrator(orchestrator_backend, tools, price=Price(input_per_m=1.0, output_per_m=1.0))
    trajectory = await orchestrator.run(Task(id="t1", prompt="What is 17*23?"))
    assert trajectory.stop_reason == "answer"
    assert trajectory.final_answer == "391"
    assert trajectory.calls_per_tool() == {"expert": 1, "answer": 1}
    assert trajectory.calls_per_model() == {"gpt-x": 1}
    # Orchestrator: 2 turns x (100 + 20 tokens) at $1/M = 0.00024; expert: 1000 x $2/M + 500 x $8/M = 0.006.
    assert trajectory.cost_usd == pytest.approx(0.00024 + 0.006)
    expert_step = trajectory.tool_steps[0]
    assert (expert_step.label, expert_step.prompt_tokens, expert_step.completion_tokens) == ("expert-1", 1000, 500)
    # The price table and preference are in the system prompt.
    system = trajectory.messages[0]["content"]
    assert "expert-1" in system and "| 2 | 8 |" in system
    assert trajectory.messages[3]["role"] == "tool" and trajectory.messages[3]["content"] == "391"


async def test_calls_of_one_turn_run_concurrently_and_latency_is_the_slowest():
    tool = FakeSleepTool()
    backend = FakeScriptedBackend([call("sleep", s=0.3) + call("sleep", s=0.3) + call("sleep", s=0.1)])
    orchestrator = Orchestrator(backend, [tool], max_turns=1)
    started = time.perf_counter()
    trajectory = await orchestrator.run(Task(id="t2", prompt="sleep"))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.6  # sequential would take 0.7 s
    assert trajectory.stop_reason == "max_turns"
    assert len(trajectory.tool_steps) == 3
    assert trajectory.latency_s == pytest.approx(max(s.latency_s for s in trajectory.tool_steps))
    assert tool.tasks_seen == ["t2"] * 3


async def test_malformed_and_unknown_calls_become_observations():
    backend = FakeScriptedBackend(['<tool_call>{"name": "answer", "arguments": {oops}</tool_call>',
                                   call("nonexistent", x=1), "no call at all", call("answer", answer="done")])
    orchestrator = Orchestrator(backend, [AnswerTool("answer", "", {}, expert_pool())], max_turns=5)
    trajectory = await orchestrator.run(Task(id="t3", prompt="q"))
    assert trajectory.stop_reason == "answer"
    assert trajectory.malformed_calls() == 1
    user_feedback = [m["content"] for m in trajectory.messages if m["role"] == "user"][1:]
    assert "malformed tool call" in user_feedback[0]
    assert "No tool call found" in user_feedback[1]
    unknown = [s for s in trajectory.tool_steps if s.name == "nonexistent"][0]
    assert "unknown tool 'nonexistent'" in unknown.error


async def test_budget_stops_the_episode():
    pool = expert_pool()
    pool._backends["gpt-x"] = FakeScriptedBackend(["a"] * 5, usage=(1000, 500))
    tools = [ExpertTool("expert", "", {"expert-1": "gpt-x"}, pool)]
    backend = FakeScriptedBackend([call("expert", model="expert-1", question="q")] * 5)
    orchestrator = Orchestrator(backend, tools, max_turns=5, max_budget_usd=0.01)
    trajectory = await orchestrator.run(Task(id="t4", prompt="q"))
    assert trajectory.stop_reason == "budget"
    assert len(trajectory.tool_steps) == 2  # $0.006 per call: stops once $0.012 >= $0.01


async def test_expert_label_errors_are_reported():
    pool = expert_pool()
    tools = [ExpertTool("expert", "", {"expert-1": "gpt-x", "expert-2": "gpt-x"}, pool)]
    backend = FakeScriptedBackend([call("expert", model="expert-9", question="q")])
    trajectory = await Orchestrator(backend, tools, max_turns=1).run(Task(id="t5", prompt="q"))
    assert "must be one of ['expert-1', 'expert-2']" in trajectory.tool_steps[0].error


async def test_trajectory_jsonl_round_trip_survives_a_torn_line(tmp_path):
    backend = FakeScriptedBackend([call("answer", answer="x")])
    trajectory = await Orchestrator(backend, [AnswerTool("answer", "", {}, expert_pool())],
                                    preference=Preference.parse("cost")).run(Task(id="t6", prompt="q"))
    path = tmp_path / "t.jsonl"
    write_trajectory(path, trajectory)
    with open(path, "a") as handle:
        handle.write('{"task_id": "torn", "ste')
    loaded = list(read_trajectories(path))
    assert [t.task_id for t in loaded] == ["t6"]
    assert loaded[0].cost_usd == trajectory.cost_usd
    assert loaded[0].preference == {"accuracy": 1.0, "cost": 1.0, "latency": 0.0}


def test_preference_parsing():
    assert Preference.parse("cost").weights() == {"accuracy": 1.0, "cost": 1.0, "latency": 0.0}
    mixed = Preference.parse("accuracy=1,cost=0.5,tool:python=2")
    assert mixed.weights() == {"accuracy": 1.0, "cost": 0.5, "latency": 0.0, "calls:python": 2.0}
    local = Preference.parse("local", local_tools=["python", "search"])
    assert "prefer local tools" in local.describe()
    from toolorchestra.errors import UserError

    with pytest.raises(UserError, match="unknown preference 'speed'"):
        Preference.parse("speed")
    with pytest.raises(UserError, match="not a number"):
        Preference.parse("cost=lots")
