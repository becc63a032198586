"""ToolScale: derived tools never raise or touch db.json; every test task is solved by its gold actions
and not by doing nothing; split sizes and the `envs describe` table."""

from __future__ import annotations

import asyncio
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolorchestra.agent import Orchestrator
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.bench.policies import ScriptedEpisode
from toolorchestra.envs.registry import make_env
from toolorchestra.envs.toolscale.actions import domain_specs
from toolorchestra.envs.toolscale.data import DOMAINS, load_domain
from toolorchestra.envs.toolscale.environment import ToolScaleEnv
from toolorchestra.envs.toolscale.tasks import ACTION_FAMILIES, WRITE_FAMILIES


@cache
def env_for(data_dir: Path, name: str) -> ToolScaleEnv:
    env = make_env(name, data_dir)
    assert isinstance(env, ToolScaleEnv)
    return env


async def gold_trajectory(env: ToolScaleEnv, task) -> Trajectory:
    """Play the gold actions one per turn through the env's tools, then answer with what they returned."""
    episode = ScriptedEpisode(task, env.tools_for(task), policy="gold")
    outputs = []
    for call in task.meta["gold_actions"]:
        (result,) = await episode.calls((call["name"], call["arguments"]))
        outputs.append(result.output)
    await episode.calls(("answer", {"answer": "\n".join(outputs) or "I cannot do that."}))
    return episode.trajectory


def do_nothing(task) -> Trajectory:
    return Trajectory(task_id=task.id, final_answer="I cannot help with that.", stop_reason="answer")


@pytest.mark.parametrize("domain", DOMAINS)
def test_gold_actions_solve_every_test_task(shared_data, domain):
    env = env_for(shared_data, f"toolscale:{domain}")
    tasks = env.tasks("test")
    assert len(tasks) >= 200

    async def score_all() -> list[tuple[str, dict[str, Any]]]:
        failures = []
        for task in tasks:
            score = env.score(task, await gold_trajectory(env, task))
            if not score.correct:
                failures.append((task.id, score.details))
        return failures

    assert asyncio.run(score_all()) == []


@pytest.mark.parametrize("domain", DOMAINS)
def test_doing_nothing_fails_every_write_task(shared_data, domain):
    env = env_for(shared_data, f"toolscale:{domain}")
    writes = [task for task in env.tasks("test") if task.meta["family"] in WRITE_FAMILIES]
    assert all(not env.score(task, do_nothing(task)).correct for task in writes)


def test_an_episode_without_a_reply_fails_even_a_refusal(shared_data):
    env = env_for(shared_data, "toolscale:bank")
    task = next(task for task in env.tasks("test") if task.meta["family"] == "refusal")
    assert env.score(task, do_nothing(task)).correct
    silent = Trajectory(task_id=task.id, stop_reason="max_turns")
    score = env.score(task, silent)
    assert not score.correct and score.details["answered"] is False and score.details["db_match"]


def test_forbidden_write_fails_a_refusal_task(shared_data):
    env = env_for(shared_data, "toolscale:bank")
    task = next(task for task in env.tasks("test") if task.meta["family"] == "refusal")
    rule = task.meta["forbidden_actions"][0]
    status_tool = next(t for t in env.tools_for(task) if t.name == rule["name"])
    arguments = {rule["argument"]: rule["value"]}
    if "status" in status_tool.parameters["properties"]:
        arguments["status"] = status_tool.parameters["properties"]["status"]["enum"][0]
    trajectory = asyncio.run(gold_trajectory(env, task))
    trajectory.steps.insert(0, trajectory.steps[0].model_copy(update={"name": rule["name"], "arguments": arguments}))
    score = env.score(task, trajectory)
    assert not score.correct and score.details["forbidden_taken"] == [rule["name"]]


def test_splits_share_no_user_and_all_holds_2000_test_tasks(shared_data):
    env = env_for(shared_data, "toolscale:all")
    test, train = env.tasks("test"), env.tasks("train")
    assert len(test) >= 2000
    owners = lambda tasks: {(t.meta["domain"], t.meta["owner"]) for t in tasks}
    assert owners(test).isdisjoint(owners(train))
    assert [t.id for t in test] == [t.id for t in make_env("toolscale:all", shared_data).tasks("test")]  # seeded


def test_tools_validate_arguments_with_clear_errors(shared_data):
    domain = load_domain(shared_data, "bank")
    tools = {spec.name: spec.bind(domain.new_database()) for spec in domain_specs(domain)}
    assert "client_id" in tools["get_client"].call({}).error
    assert "no client with client_id 'nope'" in tools["get_client"].call({"client_id": "nope"}).error
    assert "status" in tools["set_loan_status"].call({"loan_id": "DHT44YS1", "status": "gone"}).error
    assert "unknown field 'bogus'" in tools["list_loans"].call({"filters": {"bogus": 1}}).error
    assert json.loads(tools["find_client_id_by_email"].call({"email": "istvan.nagy@example.hu"}).output) == {
        "client_id": "03DZE1C1"}


def file_fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=6)


@pytest.mark.parametrize("domain_name", DOMAINS)
def test_random_tool_calls_never_raise_nor_touch_the_file(shared_data, domain_name):
    domain = load_domain(shared_data, domain_name)
    specs = domain_specs(domain)
    db_file = shared_data / "toolscale" / domain_name / "db.json"
    before = file_fingerprint(db_file)
    real_ids = [key for records in domain.base.values() for key in list(records)[:5]]
    real_ids += [key for shape in domain.nested.values() if shape.parent and shape.parent_field
                 for parent in list(domain.base[shape.parent].values())[:3] for key in parent.get(shape.parent_field) or {}]
    statuses = [s for shape in domain.shapes.values() for s in shape.status_values] or ["active"]
    # the policy actions (bank transfers, ...) need coherent arguments to get past their first check: start
    # from the gold calls of the domain's action tasks and override some arguments at random
    env = env_for(shared_data, f"toolscale:{domain_name}")
    gold_calls = [call for task in env.all_tasks() if task.meta["family"] in ACTION_FAMILIES
                  for call in task.meta["gold_actions"] + task.meta.get("refused_actions", [])][:400]
    real_ids += sorted({v for call in gold_calls for v in call["arguments"].values() if isinstance(v, str)})[:50]
    amounts = st.sampled_from([0, -1, 0.01, 1e12, float("nan"), float("inf")]) | st.floats(0, 1e6)

    def arguments_for(spec) -> st.SearchStrategy:
        names = list(spec.parameters.get("properties", {})) + ["unexpected"]
        value = JSON_VALUES | st.sampled_from(real_ids + statuses + ["x@example.org"]) | amounts
        random_arguments = st.dictionaries(st.sampled_from(names), value, max_size=4) | JSON_VALUES
        seeds = [call["arguments"] for call in gold_calls if call["name"] == spec.name]
        if not seeds:
            return random_arguments
        overrides = st.dictionaries(st.sampled_from(names), value, max_size=2)
        return random_arguments | st.tuples(st.sampled_from(seeds), overrides).map(lambda pair: {**pair[0], **pair[1]})

    calls = st.lists(st.sampled_from(specs).flatmap(lambda spec: st.tuples(st.just(spec), arguments_for(spec))),
                     max_size=8)

    @settings(max_examples=60 if gold_calls else 40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(calls)
    def check(sequence):
        database = domain.new_database()
        for spec, arguments in sequence:
            result = spec.bind(database).call(arguments)
            assert bool(result.error) != bool(result.output)
            if result.error:
                assert result.error.startswith(spec.name)
        assert file_fingerprint(db_file) == before

    check()
    assert json.loads(db_file.read_text(encoding="utf-8")) == {**json.loads(db_file.read_text(encoding="utf-8")),
                                                                **domain.base}  # the shared base stays pristine


def test_envs_describe_prints_counts_per_domain_and_family(shared_data):
    from typer.testing import CliRunner

    from toolorchestra.cli.main import app

    result = CliRunner().invoke(app, ["envs", "describe", "toolscale:weather", "--data-dir", str(shared_data)])
    assert result.exit_code == 0, result.output
    assert "toolscale:weather split=test" in result.output
    header, row = result.output.splitlines()[1:3]
    assert header.split("\t")[0] == "domain" and "lookup" in header
    assert row.startswith("weather\t")


def test_policy_actions_on_nested_records_are_derived(shared_data):
    domain = load_domain(shared_data, "bank")
    database = domain.new_database()
    tools = {spec.name: spec.bind(database) for spec in domain_specs(domain)}
    assert {"freeze_card", "unfreeze_card", "freeze_account", "unfreeze_account"} <= set(tools)
    card = "CRM6JY91"  # active in db.json
    pristine = database.digest()
    assert json.loads(tools["freeze_card"].call({"card_id": card}).output)["status"] == "blocked"
    assert json.loads(tools["get_card"].call({"card_id": card}).output)["status"] == "blocked"
    assert database.digest() != pristine
    tools["unfreeze_card"].call({"card_id": card})
    assert database.digest() == pristine  # back to the same state, the same hash
    assert domain.base["clients"]["03DZE1C1"]["cards"][card]["status"] == "active"  # base untouched


class GoldBackend(Backend):
    """Test fake: plays a task's gold actions one per turn through the real orchestrator loop, then answers."""

    def __init__(self, actions: list[dict[str, Any]]) -> None:
        self.actions = list(actions)
        self.outputs: list[str] = []

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> Completion:
        if messages[-1]["role"] == "tool":
            self.outputs.append(messages[-1]["content"])
        if self.actions:
            gold = self.actions.pop(0)
            call = ToolCall(id=f"c{len(self.outputs)}", name=gold["name"], arguments=gold["arguments"])
        else:
            call = ToolCall(id="final", name="answer", arguments={"answer": "\n".join(self.outputs)})
        return Completion(text="", tool_calls=[call], usage=Usage(prompt_tokens=1, completion_tokens=1))


async def test_orchestrator_loop_sees_the_policy_and_solves_a_multi_write_task(shared_data):
    env = env_for(shared_data, "toolscale:bank")
    task = next(task for task in env.tasks("test") if task.meta["family"] == "multi_write")
    orchestrator = Orchestrator(GoldBackend(task.meta["gold_actions"]), env.tools_for(task), max_turns=8)
    trajectory = await orchestrator.run(task)
    assert "find_client_id_by_email" in trajectory.messages[0]["content"]  # the bank policy is in the system prompt
    assert trajectory.stop_reason == "answer"
    assert env.score(task, trajectory).correct
