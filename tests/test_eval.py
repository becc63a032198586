"""`toolorchestra eval`: baselines through the real replay tools, metrics, resume after SIGKILL, errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import wording_for

from toolorchestra.agent.trajectory import read_trajectories
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.bench.eval import EvalRequest, evaluate, run_eval
from toolorchestra.bench.policies import OrchestratorPolicy, parse_policy
from toolorchestra.bench.router import SWEEP
from toolorchestra.envs.registry import make_env
from toolorchestra.errors import UserError

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data").resolve()
TOOLORCHESTRA = Path(sys.executable).parent / "toolorchestra"
GPT4 = "gpt-4-1106-preview"


@pytest.fixture(autouse=True)
def _needs_data():
    if not DATA.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the shared data beside the repo at {DATA}")
        pytest.skip(f"shared data not found at {DATA}")


def _eval(tmp_path: Path, policy: str, env: str = "replay:routerbench", **options: Any) -> dict[str, Any]:
    out = tmp_path / policy.replace(":", "_").replace("/", "_")
    return run_eval(EvalRequest(env=env, policy=policy, out=out, data_dir=DATA, progress=False, **options))


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(TOOLORCHESTRA), *args, "--data-dir", str(DATA), "--no-progress"],
                          capture_output=True, text=True, timeout=timeout)


def test_single_gpt4_and_oracle_on_routerbench_test(tmp_path):
    single = _eval(tmp_path, f"single:{GPT4}")
    assert (single["n"], single["correct"], round(single["accuracy"], 4), round(single["cost_usd"], 4)) == \
        (945, 831, 0.8794, 4.7282)
    assert single["calls_per_model"] == {GPT4: 945} and single["calls_per_tool"] == {"answer": 945}
    assert single["scoring"] == {"inherit": 945}
    assert set(single["per_subtask"]) == {"arc-challenge", "mbpp", "winogrande"}
    assert sum(entry["correct"] for entry in single["per_subtask"].values()) == 831
    assert 0 < single["latency_s"]["p50"] <= single["latency_s"]["p95"] <= single["latency_s"]["max"]
    oracle = _eval(tmp_path, "oracle")
    assert (oracle["correct"], round(oracle["accuracy"], 4), round(oracle["cost_usd"], 4)) == (922, 0.9757, 0.1995)
    trajectories = list(read_trajectories(tmp_path / "oracle" / "trajectories.jsonl"))
    assert len(trajectories) == 945 and all(t.policy == "oracle" and t.env == "replay:routerbench" for t in trajectories)


def test_frames_single_sonnet(tmp_path):
    metrics = _eval(tmp_path, "single:claude-sonnet4_frames_budget4096", env="replay:frames")
    assert (metrics["n"], metrics["correct"], round(metrics["accuracy"], 4)) == (412, 224, 0.5437)
    assert metrics["cost_usd"] > 0 and metrics["tokens"]["tools_completion"] > 0


def test_cascade_and_router_run_fitted_on_train(tmp_path):
    cheapest = _eval(tmp_path, "cheapest")
    oracle = _eval(tmp_path, "oracle")
    cascade = _eval(tmp_path, "cascade")
    assert cheapest["accuracy"] < cascade["accuracy"] < oracle["accuracy"]
    assert cascade["calls_per_tool"]["expert"] > 0  # it consulted the cheap pair
    sweep = _eval(tmp_path, "router")
    points = sweep["sweep"]
    assert sweep["kind"] == "sweep" and [p["threshold"] for p in points] == list(SWEEP)
    assert all(point["n"] == 945 for point in points)
    # threshold 0 buys the most likely model, a high threshold the cheapest
    assert points[0]["cost_usd"] > points[-1]["cost_usd"] and points[0]["accuracy"] > points[-1]["accuracy"]
    single = _eval(tmp_path, "router:0.3")
    assert single["policy"] == "router:0.3" and single["accuracy"] == points[SWEEP.index(0.3)]["accuracy"]


def test_random_per_subtask_and_concurrency_are_deterministic(tmp_path):
    first = _eval(tmp_path / "a", "random", limit=120, seed=3, concurrency=1)
    second = _eval(tmp_path / "b", "random", limit=120, seed=3, concurrency=16)
    assert {k: v for k, v in first.items() if k != "limit"} == {k: v for k, v in second.items() if k != "limit"}
    assert len(first["calls_per_model"]) > 5
    other_seed = _eval(tmp_path / "c", "random", limit=120, seed=4)
    assert other_seed["calls_per_model"] != first["calls_per_model"]
    per_subtask = _eval(tmp_path, "per-subtask", limit=120)
    assert per_subtask["n"] == 120 and per_subtask["accuracy"] > first["accuracy"]


def test_policy_parsing_errors_list_valid_values():
    env = make_env("replay:routerbench", DATA)
    with pytest.raises(UserError, match="valid: single:MODEL, random, cheapest"):
        parse_policy("best", env)
    with pytest.raises(UserError, match="gpt-4-1106-preview"):
        parse_policy("single:gpt-5", env)
    with pytest.raises(UserError, match="THRESHOLD"):
        parse_policy("router:high", env)
    with pytest.raises(UserError, match="takes no"):
        parse_policy("oracle:1", env)


def test_cli_bad_arguments_are_one_clear_message(tmp_path):
    bad_policy = _cli("eval", "--env", "replay:routerbench", "--policy", "smart", "--out", str(tmp_path / "x"))
    assert bad_policy.returncode == 2 and "Traceback" not in bad_policy.stderr
    assert "orchestrator:MODEL" in bad_policy.stderr and "cascade" in bad_policy.stderr
    bad_env = _cli("eval", "--env", "replay:nope", "--policy", "oracle", "--out", str(tmp_path / "y"))
    assert bad_env.returncode == 2 and "replay:routerbench" in bad_env.stderr
    bad_model = _cli("eval", "--env", "replay:frames", "--policy", "single:gpt-4", "--out", str(tmp_path / "z"))
    assert bad_model.returncode == 2 and "claude-sonnet4_frames_budget4096" in bad_model.stderr
    bad_orchestrator = _cli("eval", "--env", "replay:routerbench", "--policy", "orchestrator:gpt-9",
                            "--out", str(tmp_path / "w"))
    assert bad_orchestrator.returncode == 2 and "smollm2-135m" in bad_orchestrator.stderr


def test_out_dir_of_another_run_is_refused(tmp_path):
    _eval(tmp_path, "oracle", limit=5)
    with pytest.raises(UserError, match="holds a different run"):
        run_eval(EvalRequest(env="replay:routerbench", policy="cheapest", out=tmp_path / "oracle", data_dir=DATA,
                             progress=False))


def test_resume_after_sigkill_redoes_nothing(tmp_path):
    """A real `toolorchestra eval` killed mid-run, resumed, equals an uninterrupted run."""
    args = ["eval", "--env", "replay:routerbench", "--policy", "cascade", "--limit", "60", "--concurrency", "2"]
    out = tmp_path / "killed"
    process = subprocess.Popen([str(TOOLORCHESTRA), *args, "--out", str(out), "--data-dir", str(DATA), "--no-progress",
                                "--delay", "0.2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    trajectories = out / "trajectories.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not trajectories.exists() or _lines(trajectories) < 8):
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    finished_before = _lines(trajectories)
    assert 8 <= finished_before < 60, "the kill must land mid-run"
    assert not (out / "metrics.json").exists()
    resumed = _cli(*args, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    ids = [t.task_id for t in read_trajectories(trajectories)]
    assert len(ids) == len(set(ids)) == 60
    fresh = _cli(*args, "--out", str(tmp_path / "fresh"))
    assert fresh.returncode == 0, fresh.stderr
    killed_metrics = json.loads((out / "metrics.json").read_text())
    fresh_metrics = json.loads((tmp_path / "fresh" / "metrics.json").read_text())
    assert killed_metrics == fresh_metrics


async def test_torn_last_line_is_redone_once(tmp_path):
    env = make_env("replay:routerbench", DATA)
    tasks = env.tasks("test")[:10]
    policies = parse_policy("cheapest", env)
    await evaluate(env, policies, tasks[:6], tmp_path, progress=False)
    path = tmp_path / "trajectories.jsonl"
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # a kill in the middle of writing the sixth line
    metrics = await evaluate(env, policies, tasks, tmp_path, progress=False)
    ids = [trajectory.task_id for trajectory in read_trajectories(path)]
    assert sorted(ids) == sorted(task.id for task in tasks) and metrics["n"] == 10


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


class FakeBackend(Backend):
    """Unit-test stand-in for an orchestrator model: asks gpt-4, then passes its reply on."""

    name = "fake"

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> Completion:
        observations = [m for m in messages if m["role"] == "tool"]
        if not observations:
            call = ToolCall(id="c1", name="expert", arguments={"model": "gpt-4", "question": messages[-1]["content"]})
        else:
            call = ToolCall(id="c2", name="answer", arguments={"answer": observations[-1]["content"]})
        return Completion(text="", tool_calls=[call], usage=Usage(prompt_tokens=100, completion_tokens=10),
                          latency_s=0.5)


async def test_orchestrator_policy_runs_the_loop_over_replay_tools(tmp_path):
    env = make_env("replay:routerbench", DATA)
    tasks = env.tasks("test")[:30]
    policy = OrchestratorPolicy("orchestrator:fake", FakeBackend(), model_name="fake")
    metrics = await evaluate(env, [policy], tasks, tmp_path, concurrency=4, progress=False,
                             header={"env": env.name, "split": "test"})
    expected = sum(env.record(task.id, GPT4).correct for task in tasks if len(env.record(task.id, GPT4).response) <= 4000)
    assert metrics["calls_per_tool"] == {"answer": 30, "expert": 30}
    assert metrics["tokens"]["orchestrator_prompt"] == 100 * 60
    assert metrics["correct"] == expected
    trajectory = next(read_trajectories(tmp_path / "trajectories.jsonl"))
    # the orchestrator saw the question without RouterBench's few-shot exemplars, then the preference
    question, preference = trajectory.messages[1]["content"].rsplit("\n\nPreference: ", 1)
    assert question == env.task(trajectory.task_id).meta["query"]
    assert preference == Preference().describe(wording_for(trajectory.task_id))
    assert trajectory.latency_s == pytest.approx(sum(s.latency_s for s in trajectory.steps))


@pytest.mark.slow
def test_smollm2_orchestrator_produces_valid_metrics(tmp_path):
    """The real embedded SmolLM2 through the same eval (one short episode). Without profile columns: with them
    the untrained model answers this first task with the text " " (which the answer tool refuses), and the run
    rightly exits 2; the profile path with the real model is tests/test_pool_reading.py's."""
    result = _cli("eval", "--env", "replay:routerbench", "--policy", "orchestrator:smollm2-135m", "--limit", "1",
                  "--max-turns", "1", "--max-tokens", "24", "--tools", "answer", "--out", str(tmp_path / "smol"),
                  "--profiles", "none", timeout=900)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((tmp_path / "smol" / "metrics.json").read_text())
    assert metrics["n"] == 1 and metrics["policy"] == "orchestrator:smollm2-135m"
    assert metrics["tokens"]["orchestrator_prompt"] > 0 and metrics["tokens"]["orchestrator_completion"] > 0
    trajectory = next(read_trajectories(tmp_path / "smol" / "trajectories.jsonl"))
    assert trajectory.steps[0].kind == "orchestrator" and trajectory.correct is not None


def _closed_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _orchestrator_catalog(tmp_path: Path, base_url: str) -> Path:
    """A catalog whose orchestrator is an OpenAI-compatible server at `base_url`, tried once."""
    path = tmp_path / "catalog.yaml"
    path.write_text(f"""
orchestrator: remote
models:
  - name: remote
    backend: {{type: openai, base_url: "{base_url}", model: served-model, max_retries: 0, timeout_s: 10}}
tools: []
""")
    return path


def test_eval_where_every_episode_failed_shows_the_errors_and_exits_non_zero(tmp_path):
    port = _closed_port()
    catalog = _orchestrator_catalog(tmp_path, f"http://127.0.0.1:{port}/v1")
    out = tmp_path / "dead"
    result = _cli("eval", "--env", "replay:routerbench", "--policy", "orchestrator:remote", "--config", str(catalog),
                  "--limit", "3", "--out", str(out))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "every episode failed (3 of 3" in result.stderr and f"127.0.0.1:{port}" in result.stderr
    assert "3 of 3 episodes failed; first errors:" in result.stdout and "orchestrator failed:" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())  # written before the exit
    assert metrics["errors"] == 3 and metrics["accuracy"] == 0.0
    assert len(metrics["first_errors"]) == 1 and metrics["first_errors"][0].startswith("orchestrator failed:")
    assert f"127.0.0.1:{port}" in metrics["first_errors"][0]


def test_unit_eval_where_some_episodes_failed_exits_zero_and_shows_the_count(tmp_path):
    """The orchestrator is test_openai_backend's ScriptedServer, a test-only fake OpenAI-compatible endpoint on
    127.0.0.1 (real HTTP, scripted replies)."""
    from test_openai_backend import Reply, ScriptedServer, chat_body

    answer = {"id": "c1", "type": "function", "function": {"name": "answer", "arguments": json.dumps({"answer": "B"})}}
    # The first request is refused (a 400 is not retried), every later one answers at once.
    server = ScriptedServer([Reply(status=400, body={"error": {"message": "bad request: prompt too long"}}),
                             Reply(body=chat_body(content=None, tool_calls=[answer]))]).start()
    try:
        catalog = _orchestrator_catalog(tmp_path, server.url)
        out = tmp_path / "some"
        result = _cli("eval", "--env", "replay:routerbench", "--policy", "orchestrator:remote", "--config",
                      str(catalog), "--limit", "3", "--concurrency", "1", "--out", str(out))
    finally:
        server.stop()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 of 3 episodes failed; first errors:" in result.stdout and "prompt too long" in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["errors"] == 1 and metrics["stop_reasons"] == {"answer": 2, "error": 1}
    assert len(metrics["first_errors"]) == 1 and "prompt too long" in metrics["first_errors"][0]


def test_unit_eval_where_no_episode_answers_exits_non_zero_and_names_the_missing_answer_tool(tmp_path):
    """--tools without the answer tool: every episode runs out of turns. The orchestrator is test_openai_backend's
    ScriptedServer (a test-only fake endpoint on 127.0.0.1) calling the expert tool every turn."""
    from test_openai_backend import Reply, ScriptedServer, chat_body

    consult = {"id": "c1", "type": "function", "function": {"name": "expert", "arguments": json.dumps({"model": GPT4})}}
    server = ScriptedServer([Reply(body=chat_body(content=None, tool_calls=[consult]))]).start()
    try:
        catalog = _orchestrator_catalog(tmp_path, server.url)
        out = tmp_path / "unanswered"
        result = _cli("eval", "--env", "replay:routerbench", "--policy", "orchestrator:remote", "--config",
                      str(catalog), "--limit", "2", "--tools", "expert", "--max-turns", "1", "--out", str(out))
    finally:
        server.stop()
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "no episode gave an answer (2 of 2; stop reasons max_turns 2)" in result.stderr
    assert "--tools expert offers no answer tool" in result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stop_reasons"] == {"max_turns": 2} and metrics["errors"] == 0


def test_summarize_counts_failed_episodes_and_their_first_distinct_errors():
    from toolorchestra.agent.trajectory import Step, Trajectory
    from toolorchestra.bench.metrics import summarize

    def crashed(message: str) -> Trajectory:
        return Trajectory(task_id="t", stop_reason="error", steps=[
            Step(turn=0, kind="orchestrator", name="o", error=f"orchestrator failed: {message}")])

    malformed = Trajectory(task_id="t", stop_reason="max_turns", steps=[
        Step(turn=0, kind="orchestrator", name="o", error="malformed tool call (invalid JSON): '{'")])
    policy_crash = Trajectory(task_id="t", stop_reason="error", score_details={"error": "KeyError: 'x'"})
    scripted = Trajectory(task_id="t", stop_reason="error", steps=[
        Step(turn=0, kind="tool", name="answer", error="model m failed: boom")])
    fine = Trajectory(task_id="t", stop_reason="answer", final_answer="B", correct=True)
    trajectories = [fine, crashed("No module named 'xgrammar'"), malformed, crashed("No module named 'xgrammar'"),
                    policy_crash, scripted, crashed("third"), fine]
    metrics = summarize(trajectories)
    assert metrics["errors"] == 5  # a malformed call is the policy's mistake, not a failed episode
    assert metrics["first_errors"] == ["orchestrator failed: No module named 'xgrammar'", "KeyError: 'x'",
                                       "model m failed: boom"]
    assert summarize([fine])["errors"] == 0 and summarize([])["first_errors"] == []


ONE_TURN = ("--tools", "answer", "--max-turns", "1")
ESCALATION = ("--tools", "expert,answer", "--max-turns", "4")  # consult, read, adopt or escalate


@pytest.mark.slow
@pytest.mark.parametrize(("world", "env", "orchestrator", "preference", "tools"), [
    ("routerbench", "replay:routerbench", "smollm2-135m-orchestrator", "accuracy", ONE_TURN),
    ("routerbench", "replay:routerbench", "smollm2-135m-orchestrator", "cost", ONE_TURN),
    ("frames", "replay:frames-typed", "smollm2-135m-frames-orchestrator", "cost", ONE_TURN),
    ("frames", "replay:frames", "smollm2-135m-frames-escalation", "accuracy", ESCALATION),
])
def test_shipped_orchestrator_reproduces_its_committed_decisions(tmp_path, world, env, orchestrator, preference,
                                                                 tools):
    """A committed adapter, rerun greedily on the first test tasks, names the labels that
    results/<world>/orchestrator-<name>/decisions.csv records for them (and, consulting first, spends the
    same dollars: the same models consulted)."""
    import csv

    committed_csv = REPO / "results" / world / f"orchestrator-{orchestrator}" / "decisions.csv"
    with committed_csv.open() as handle:
        committed = [row for row in csv.DictReader(handle) if row["preference"] == preference]
    out = tmp_path / preference
    result = _cli("eval", "--env", env, "--split", "test", "--limit", "8", "--prefer", preference,
                  "--policy", f"orchestrator:{orchestrator}", *tools, "--max-tokens", "40", "--concurrency", "8",
                  "--out", str(out), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    with (out / "decisions.csv").open() as handle:
        rerun = {row["task_id"]: (row["label"], float(row["cost_usd"])) for row in csv.DictReader(handle)}
    expected = {row["task_id"]: (row["label"], float(row["cost_usd"])) for row in committed if row["task_id"] in rerun}
    assert len(expected) == 8
    assert {task: label for task, (label, _) in rerun.items()} == {task: label for task, (label, _) in expected.items()}
    for task, (_, cost) in expected.items():
        assert rerun[task][1] == pytest.approx(cost, rel=1e-9, abs=1e-12)


def test_ray_without_ray_installed_is_one_clear_error(shared_data, tmp_path, monkeypatch) -> None:
    from toolorchestra.bench.eval import EvalRequest, run_eval
    from toolorchestra.errors import UserError

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the ray extra were not installed
    request = EvalRequest(env="replay:routerbench", policy="cheapest", out=tmp_path / "run", limit=3,
                          data_dir=shared_data, ray=True, progress=False)
    with pytest.raises(UserError, match=r"--ray needs Ray: pip install 'toolorchestra\[ray\]'"):
        run_eval(request)


def test_task_ids_pick_those_tasks_of_the_split_and_name_a_missing_one(tmp_path):
    env = make_env("replay:routerbench", DATA)
    test = env.tasks("test")
    wanted = [test[7].id, test[2].id, test[30].id]
    metrics = _eval(tmp_path, f"single:{GPT4}", task_ids=wanted)
    assert metrics["n"] == 3
    ran = [json.loads(line)["task_id"] for line in (tmp_path / f"single_{GPT4}" / "trajectories.jsonl").open()]
    assert sorted(ran) == sorted(wanted)
    assert metrics["correct"] == sum(env.record(task_id, GPT4).correct for task_id in wanted)
    train_id = env.tasks("train")[0].id
    with pytest.raises(UserError, match=f"--task-ids: --env replay:routerbench --split test has no task {train_id}"):
        _eval(tmp_path / "bad", f"single:{GPT4}", task_ids=[test[0].id, train_id])
