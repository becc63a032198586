"""`toolorchestra eval` on the toolscale envs: the gold policy (replays gold actions through the real tools
and scorer, must score 1.0), the noop floor, clear errors elsewhere, and a scripted orchestrator run."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolorchestra.envs.base import current_task
from toolorchestra.agent.trajectory import read_trajectories
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.bench.eval import EvalRequest, evaluate, run_eval
from toolorchestra.bench.policies import OrchestratorPolicy, parse_policy
from toolorchestra.cli.main import app
from toolorchestra.envs.registry import make_env
from toolorchestra.envs.toolscale.tasks import WRITE_FAMILIES
from toolorchestra.errors import UserError


def _eval_cli(data: Path, out: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["eval", "--env", "toolscale:bank", "--split", "test", *args, "--out", str(out),
                                      "--data-dir", str(data), "--no-progress"])
    assert result.exit_code == 0, result.output
    return json.loads((out / "metrics.json").read_text())


def test_gold_policy_scores_one_through_the_cli(shared_data, tmp_path):
    out = tmp_path / "gold"
    metrics = _eval_cli(shared_data, out, "--policy", "gold", "--limit", "50")
    assert metrics["env"] == "toolscale:bank" and metrics["policy"] == "gold"
    assert metrics["n"] == 50 and metrics["accuracy"] == 1.0 and metrics.get("errors", 0) == 0
    with open(out / "decisions.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 50 and all(row["correct"] == "1" for row in rows)
    env = make_env("toolscale:bank", shared_data)
    tasks = {task.id: task for task in env.tasks("test")}
    trajectories = list(read_trajectories(out / "trajectories.jsonl"))
    assert {t.meta["family"] for t in (tasks[tr.task_id] for tr in trajectories)} >= {"single_write", "multi_write",
                                                                                       "lookup"}
    for trajectory in trajectories:  # the gold actions went through the episode's tools, then one answer
        gold = [action["name"] for action in tasks[trajectory.task_id].meta["gold_actions"]]
        assert [step.name for step in trajectory.tool_steps] == [*gold, "answer"]
        assert trajectory.stop_reason == "answer" and trajectory.score_details["db_match"]
    again = _eval_cli(shared_data, out, "--policy", "gold", "--limit", "50")  # rerun resumes: nothing new
    assert again["accuracy"] == 1.0 and len(list(read_trajectories(out / "trajectories.jsonl"))) == 50


def test_noop_policy_fails_every_write_task(shared_data, tmp_path):
    out = tmp_path / "noop"
    metrics = _eval_cli(shared_data, out, "--policy", "noop", "--limit", "300")
    assert metrics["n"] == 300 and metrics["tool_calls_per_task"] == 1.0  # the answer call only
    env = make_env("toolscale:bank", shared_data)
    family = {task.id: task.meta["family"] for task in env.tasks("test")}
    trajectories = list(read_trajectories(out / "trajectories.jsonl"))
    writes = [t for t in trajectories if family[t.task_id] in WRITE_FAMILIES]
    assert writes and not any(t.correct for t in writes)
    assert metrics["accuracy"] < 0.2


def test_gold_and_noop_need_an_env_with_gold_actions(shared_data, tmp_path):
    env = make_env("replay:routerbench", shared_data)
    for spec in ("gold", "noop"):
        with pytest.raises(UserError, match=rf"--policy {spec}: .*'replay:routerbench'.*toolscale"):
            parse_policy(spec, env)
    with pytest.raises(UserError, match="no ':' argument"):
        parse_policy("gold:x", make_env("toolscale:bank", shared_data))
    with pytest.raises(UserError, match="gold"):
        run_eval(EvalRequest(env="replay:routerbench", policy="gold", out=tmp_path / "x", data_dir=shared_data,
                             progress=False))
    assert not (tmp_path / "x").exists()  # refused before claiming the dir


class GoldOrchestrator(Backend):
    """Scripted orchestrator: plays the current task's gold actions, one per turn, then answers with the
    tool outputs it saw. Stateless (reads the turn from the messages), so episodes may run concurrently."""

    name = "scripted-gold"

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> Completion:
        task = current_task.get()
        actions = task.meta["gold_actions"]
        turn = sum(1 for message in messages if message["role"] == "assistant" and message.get("tool_calls"))
        if turn < len(actions):
            call = ToolCall(id=f"c{turn}", name=actions[turn]["name"], arguments=dict(actions[turn]["arguments"]))
        else:
            seen = "\n".join(m["content"] for m in messages if m["role"] == "tool")
            call = ToolCall(id="final", name="answer", arguments={"answer": seen or "I cannot help with that."})
        return Completion(text="", tool_calls=[call], usage=Usage(prompt_tokens=10, completion_tokens=5))


def test_scripted_orchestrator_runs_on_a_toolscale_env(shared_data, tmp_path):
    env = make_env("toolscale:bank", shared_data)
    tasks = env.tasks("test")[:30]
    policy = OrchestratorPolicy("orchestrator:scripted", GoldOrchestrator(), model_name="scripted", max_turns=8)
    metrics = asyncio.run(evaluate(env, [policy], tasks, tmp_path, concurrency=4, progress=False,
                                   header={"env": env.name, "split": "test", "policy": policy.name}))
    assert metrics["n"] == 30 and metrics["accuracy"] == 1.0
    assert (tmp_path / "decisions.csv").exists()
