"""`toolorchestra serve` over real HTTP on 127.0.0.1, driven by the official `openai` SDK.

The pool's models are test fakes defined here (an echo backend, a tool-calling one, a failing one, one
with a very long reply); the orchestrator is the scripted backend of tests/_scripted_orchestrator.py, so
an episode takes milliseconds. No real model is loaded.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import ModelSpec, Price
from toolorchestra.serve.app import build_app
from toolorchestra.serve.models import TRAJECTORY_HEADER, OrchestratorModel, ServedModels
from toolorchestra.serve.server import ServerThread
from toolorchestra.serve.trajectories import TrajectoryLog
from toolorchestra.tools.llm import AnswerTool, ExpertTool

sys.path.insert(0, str(Path(__file__).parent))
from _scripted_orchestrator import ScriptedBackend  # noqa: E402

ORCHESTRATOR = "orchestrator:scripted-orchestrator"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
LONG_REPLY_CHARS = 4_000_000  # far more than socket buffers hold, so the server is mid-write at the hang-up


class FakeEchoBackend(Backend):
    """Test fake: after `delay_s`, replies 'echo: <last message>' and records each call's arguments."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        self.calls.append({"messages": messages, "tools": tools, **sampling})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        return Completion(text=f"echo: {messages[-1]['content']}", usage=Usage(prompt_tokens=11, completion_tokens=3))


class FakeToolCallingBackend(Backend):
    """Test fake: calls the first offered tool with {"city": "Paris"}; answers in text when offered none."""

    def __init__(self) -> None:
        self.offered: list[list[dict[str, Any]] | None] = []

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        self.offered.append(tools)
        usage = Usage(prompt_tokens=20, completion_tokens=7)
        if not tools:
            return Completion(text="no tools offered", usage=usage)
        call = ToolCall(id="call_1", name=tools[0]["function"]["name"], arguments={"city": "Paris"})
        return Completion(text="", tool_calls=[call], usage=usage)


class FakeFailingBackend(Backend):
    """Test fake: an upstream that is down."""

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        raise RuntimeError("upstream down")


class FakeLongReplyBackend(Backend):
    """Test fake: a reply of LONG_REPLY_CHARS characters."""

    async def complete(self, messages, tools=None, **sampling: Any) -> Completion:
        return Completion(text="x" * LONG_REPLY_CHARS, usage=Usage(prompt_tokens=1, completion_tokens=1))


def _spec(name: str, dollars_per_m: float = 0.0) -> ModelSpec:
    # The backend spec is never built (every backend is given); replay is the spec that needs nothing.
    return ModelSpec(name=name, backend={"type": "replay", "world": "fake", "model": name},
                     price=Price(input_per_m=dollars_per_m, output_per_m=dollars_per_m))


def _served(backends: dict[str, Backend], prices: dict[str, float], max_concurrency: int,
            trajectories: Path | None = None) -> ServedModels:
    pool = ModelPool([_spec(name, prices.get(name, 0.0)) for name in backends], backends)
    return ServedModels(pool, max_concurrency, TrajectoryLog(trajectories))


@pytest.fixture(scope="module")
def fakes() -> dict[str, Backend]:
    return {
        "echo": FakeEchoBackend(),
        "tool-caller": FakeToolCallingBackend(),
        "failing": FakeFailingBackend(),
        "long-reply": FakeLongReplyBackend(),
        # asks expert-1 (the echo model), then answers with the expert's reply
        "scripted-orchestrator": ScriptedBackend(expert="expert-1", answer_model=None),
    }


@pytest.fixture(scope="module")
def trajectories_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve") / "trajectories.jsonl"


@pytest.fixture(scope="module")
def server(fakes, trajectories_file):
    prices = {"echo": 2.0, "scripted-orchestrator": 1.0}
    served = _served(fakes, prices, max_concurrency=8, trajectories=trajectories_file)
    tools = [ExpertTool("expert", "", {"expert-1": "echo"}, served.pool), AnswerTool("answer", "", {}, served.pool)]
    served.add_orchestrator(OrchestratorModel("scripted-orchestrator", tools, max_turns=4))
    with ServerThread(build_app(served)) as running:
        yield running


@pytest.fixture
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=30)


def _hello(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}], **extra}


# --- models --------------------------------------------------------------------------------------------


def test_models_lists_every_pool_model_and_the_orchestrator(client):
    ids = [model.id for model in client.models.list()]
    assert ids == ["echo", "tool-caller", "failing", "long-reply", "scripted-orchestrator", ORCHESTRATOR]
    assert client.models.retrieve(ORCHESTRATOR).id == ORCHESTRATOR
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


# --- pass-through --------------------------------------------------------------------------------------


def test_completion_passes_through_with_usage_and_cost(client, fakes):
    response = client.chat.completions.create(model="echo", **_hello())
    assert response.object == "chat.completion" and response.model == "echo"
    choice = response.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == "echo: hello"
    assert choice.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (11, 3, 14)
    assert response.model_extra["cost_usd"] == pytest.approx(14 * 2.0 / 1e6)
    sent = fakes["echo"].calls[-1]["messages"]
    assert sent == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]


def test_sampling_fields_reach_the_backend_and_omitted_ones_keep_its_defaults(client, fakes):
    client.chat.completions.create(model="echo", max_completion_tokens=17, temperature=0.7, top_p=0.9, seed=5,
                                   **_hello())
    call = fakes["echo"].calls[-1]
    assert (call["max_tokens"], call["temperature"], call["top_p"], call["seed"]) == (17, 0.7, 0.9, 5)
    response = client.chat.completions.create(model="echo", max_tokens=9, **_hello())
    call = fakes["echo"].calls[-1]
    assert call["max_tokens"] == 9 and not {"temperature", "top_p", "seed"} & set(call)
    assert response.choices[0].finish_reason == "stop"
    # the echo's 3 completion tokens use up a limit of 3: the reply was cut at the limit
    response = client.chat.completions.create(model="echo", max_tokens=3, **_hello())
    assert response.choices[0].finish_reason == "length"


def test_text_content_parts_are_joined(client, fakes):
    parts = [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}]
    response = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": parts}])
    assert response.choices[0].message.content == "echo: two\nparts"


def test_stream_sends_chunks_then_usage_then_done(client):
    chunks = list(client.chat.completions.create(model="echo", stream=True, stream_options={"include_usage": True},
                                                 **_hello()))
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "echo: hello"
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 14


def test_stream_raw_lines_are_server_sent_events(server):
    body = {"model": "echo", "stream": True, **_hello()}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in events) and events[-1] == "data: [DONE]"
    assert "usage" not in json.loads(events[-2][len("data: "):])  # no usage chunk unless asked for


def test_tool_calls_come_back_as_openai_tool_calls(client, fakes):
    response = client.chat.completions.create(model="tool-caller", tools=[WEATHER_TOOL], **_hello())
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.id, call.type, call.function.name) == ("call_1", "function", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert fakes["tool-caller"].offered[-1] == [WEATHER_TOOL]


def test_streamed_tool_calls_accumulate_to_the_call(client):
    chunks = list(client.chat.completions.create(model="tool-caller", tools=[WEATHER_TOOL], stream=True, **_hello()))
    deltas = [call for chunk in chunks for call in (chunk.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.id, d.function.name) for d in deltas] == [(0, "call_1", "get_weather")]
    assert json.loads(deltas[0].function.arguments) == {"city": "Paris"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_choice_none_offers_no_tools(client, fakes):
    response = client.chat.completions.create(model="tool-caller", tools=[WEATHER_TOOL], tool_choice="none", **_hello())
    assert response.choices[0].message.content == "no tools offered"
    assert fakes["tool-caller"].offered[-1] is None


def test_a_conversation_with_tool_results_reaches_the_backend(client, fakes):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    response = client.chat.completions.create(model="echo", messages=messages)
    assert response.choices[0].message.content == "echo: sunny"
    sent = fakes["echo"].calls[-1]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert sent[2] == {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}


# --- the orchestrator ----------------------------------------------------------------------------------


def test_orchestrator_answers_with_a_whole_episode(client, server, trajectories_file):
    raw = client.chat.completions.with_raw_response.create(model=ORCHESTRATOR, messages=[
        {"role": "user", "content": "earlier question"}, {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": "What is the answer?"},
    ])
    response = raw.parse()
    trajectory_id = raw.headers[TRAJECTORY_HEADER]
    # the scripted orchestrator asked the echo expert "the task", then answered with its reply
    assert response.choices[0].message.content == "echo: the task"
    assert response.choices[0].finish_reason == "stop" and response.model == ORCHESTRATOR
    # two orchestrator turns (100 + 10 tokens each) and one expert call (11 + 3)
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (211, 23)
    expected_cost = 220 * 1.0 / 1e6 + 14 * 2.0 / 1e6
    assert response.model_extra["cost_usd"] == pytest.approx(expected_cost)
    assert response.model_extra["trajectory_id"] == trajectory_id

    kept = httpx.get(f"{server.base_url}/trajectories/{trajectory_id}", timeout=10).json()
    assert kept["question"] == "What is the answer?" and kept["final_answer"] == "echo: the task"
    assert kept["cost_usd"] == pytest.approx(expected_cost)
    logged = [json.loads(line) for line in trajectories_file.read_text().splitlines()]
    assert trajectory_id in [record["task_id"] for record in logged]


def test_orchestrator_streams_its_final_answer(client):
    chunks = list(client.chat.completions.create(model=ORCHESTRATOR, stream=True, stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": "q"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: the task"
    assert chunks[-1].usage.total_tokens == 234


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, param", [
    (b"{not json", None),
    (b"[1, 2]", None),
    (json.dumps({"model": "echo"}).encode(), "messages"),
    (json.dumps({"model": "echo", "messages": []}).encode(), "messages"),
    (json.dumps({"model": "echo", "messages": "hello"}).encode(), "messages"),
    (json.dumps({"model": "echo", "messages": [{"role": "wizard", "content": "hi"}]}).encode(), "messages.0.role"),
    (json.dumps({"model": "echo", "temperature": "hot", **_hello()}).encode(), "temperature"),
    (json.dumps({"model": "echo", "max_tokens": 0, **_hello()}).encode(), "max_tokens"),
    (json.dumps({"model": "echo", "stream": "yes", **_hello()}).encode(), "stream"),
    (json.dumps({"model": 5, **_hello()}).encode(), "model"),
    (json.dumps({"model": "echo", "n": 2, **_hello()}).encode(), "n"),
])
def test_malformed_body_is_400_in_openai_shape(server, body, param):
    response = httpx.post(f"{server.base_url}/chat/completions", content=body,
                          headers={"content-type": "application/json"}, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_malformed_request_raises_bad_request_in_the_sdk(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": "hi"}], top_p=3)
    assert caught.value.body["param"] == "top_p"
    image = [{"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}]
    with pytest.raises(openai.BadRequestError, match="only text parts"):
        client.chat.completions.create(model="echo", messages=[{"role": "user", "content": image}])


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="gpt-nonexistent", **_hello())
    assert caught.value.status_code == 404
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"
    assert caught.value.body["type"] == "invalid_request_error"


def test_backend_failure_is_502_and_the_server_goes_on(client):
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="failing", stream=stream, **_hello())
        assert caught.value.status_code == 502
        assert "upstream down" in caught.value.body["message"] and caught.value.body["code"] == "backend_error"
    assert client.chat.completions.create(model="echo", **_hello()).choices[0].message.content == "echo: hello"


def test_unknown_path_is_404_in_openai_shape(server):
    response = httpx.get(f"{server.base_url}/nothing-here", timeout=10)
    assert response.status_code == 404 and "error" in response.json()


def test_client_disconnecting_mid_stream_does_not_break_the_server(server, client):
    body = {"model": "long-reply", "stream": True, **_hello()}
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", f"{server.base_url}/chat/completions", json=body) as response:
            assert response.status_code == 200
            first = next(response.iter_bytes())
            assert first.startswith(b"data: ")
        # leaving the block closes the connection with most of the reply unsent
    for _ in range(3):
        assert client.chat.completions.create(model="echo", **_hello()).choices[0].message.content == "echo: hello"


# --- concurrency and the command line ------------------------------------------------------------------


def test_max_concurrency_bounds_backend_calls_in_flight():
    echo = FakeEchoBackend(delay_s=0.05)
    served = _served({"echo": echo}, {}, max_concurrency=2)

    async def twelve_requests(base_url: str) -> list[str]:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0) as client:
            responses = await asyncio.gather(*(
                client.chat.completions.create(model="echo", messages=[{"role": "user", "content": str(i)}])
                for i in range(12)))
        return [response.choices[0].message.content for response in responses]

    with ServerThread(build_app(served)) as running:
        answers = asyncio.run(twelve_requests(running.base_url))
    assert answers == [f"echo: {i}" for i in range(12)]
    assert echo.max_in_flight == 2


def _cli(*args: str) -> list[str]:
    launcher = "import sys; from toolorchestra.cli.main import main; sys.argv[0] = 'toolorchestra'; main()"
    return [sys.executable, "-c", launcher, *args]


def test_cli_missing_config_is_one_clear_line(tmp_path):
    missing = tmp_path / "pool.yaml"
    result = subprocess.run(_cli("serve", "--config", str(missing)), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: --config {missing}: file not found"


def test_cli_import_and_help_do_not_load_the_web_stack():
    code = ("import sys, toolorchestra, toolorchestra.cli.main, toolorchestra.serve; "
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'torch') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip() == "[]"
    result = subprocess.run(_cli("--help"), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "serve" in result.stdout


def test_cli_serves_a_catalog_whose_model_is_another_openai_server(server, tmp_path):
    """`toolorchestra serve --config` in a subprocess, its one model an `openai` backend that points at the
    in-process test server: a request goes client -> CLI server -> OpenAIBackend -> test server -> echo."""
    config = tmp_path / "pool.yaml"
    config.write_text(
        "orchestrator: upstream\n"
        f"models: [{{name: upstream, backend: {{type: openai, base_url: '{server.base_url}', model: echo}}}}]\n"
        "tools: []\n"
    )
    process = subprocess.Popen(_cli("serve", "--config", str(config), "--port", "0"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stdout.readline()
        assert "orchestrator:upstream" in banner, process.stderr.read() if process.poll() is not None else banner
        base_url = banner.split(" at ")[1].split()[0]
        client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30)
        assert [model.id for model in client.models.list()] == ["upstream", "orchestrator:upstream"]
        response = client.chat.completions.create(model="upstream", **_hello())
        assert response.choices[0].message.content == "echo: hello" and response.usage.total_tokens == 14
    finally:
        process.terminate()
        process.wait(timeout=20)
