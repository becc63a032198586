"""Test helper: SYNTHETIC orchestrator runs. A scripted backend (no model) plays the orchestrator through
the real OrchestratorPolicy, loop, replay tools, scoring and `evaluate`, with the run's --prefer in its
header, so trajectories.jsonl, metrics.json and decisions.csv are what a real orchestrator eval of these
choices writes; only the choices themselves are scripted per preference:
- accuracy: answer(model=gpt-4) on every task;
- cost: ask expert mistral-7b, then pass its reply on as the orchestrator's own answer (answered_by empty).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from toolorchestra.agent.preference import Preference
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.bench.eval import evaluate
from toolorchestra.bench.policies import OrchestratorPolicy
from toolorchestra.envs.registry import make_env

POLICY = "orchestrator:scripted"


class ScriptedBackend(Backend):
    name = "scripted"

    def __init__(self, expert: str | None, answer_model: str | None) -> None:
        self.expert, self.answer_model = expert, answer_model

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> Completion:
        observations = [m for m in messages if m["role"] == "tool"]
        if self.expert and not observations:
            call = ToolCall(id="c1", name="expert", arguments={"model": self.expert, "question": "the task"})
        elif self.answer_model:
            call = ToolCall(id="c2", name="answer", arguments={"model": self.answer_model})
        else:
            call = ToolCall(id="c2", name="answer", arguments={"answer": observations[-1]["content"]})
        return Completion(text="", tool_calls=[call], usage=Usage(prompt_tokens=100, completion_tokens=10),
                          latency_s=0.2)


SCRIPTS = {"accuracy": (None, "gpt-4"), "cost": ("mistral-7b", None)}


def scripted_orchestrator_runs(data: Path, root: Path, limit: int = 40) -> dict[str, Path]:
    """One eval dir per preference (root/accuracy, root/cost) over the first `limit` test tasks."""
    env = make_env("replay:routerbench", data)
    tasks = env.tasks("test")[:limit]
    dirs = {}
    for prefer, (expert, answer_model) in SCRIPTS.items():
        policy = OrchestratorPolicy(POLICY, ScriptedBackend(expert, answer_model), model_name="scripted",
                                    preference=Preference.parse(prefer))
        header = {"env": env.name, "split": "test", "policy": POLICY, "seed": 0, "config": None, "prefer": prefer,
                  "max_turns": 4, "max_tokens": 256, "tools": None, "limit": limit}
        asyncio.run(evaluate(env, [policy], tasks, root / prefer, concurrency=4, progress=False, header=header))
        dirs[prefer] = root / prefer
    return dirs
