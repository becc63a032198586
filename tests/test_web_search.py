"""WebSearchTool against a real HTTP server on 127.0.0.1.

`FakeTavilyServer` is a test-only stand-in for the Tavily API: a real `http.server` in a thread that
answers POST /search with scripted replies and records every request it got.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import ToolSpec
from toolorchestra.envs.base import Task
from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import ToolContext
from toolorchestra.tools.factory import build_tool
from toolorchestra.tools.web_search import WebSearchTool

KEY_ENV = "TOOLORCHESTRA_TEST_TAVILY_KEY"
API_KEY = "tvly-test-secret-456"
CONTEXT = ToolContext(task=Task(id="t1", prompt="Who designed the Eiffel Tower?"))
HITS = [
    {"title": "Eiffel Tower - Wikipedia", "url": "https://en.wikipedia.org/wiki/Eiffel_Tower",
     "content": "The tower was designed by the engineering firm of Gustave Eiffel.", "score": 0.98},
    {"title": "Gustave Eiffel", "url": "https://example.org/eiffel", "content": "Engineer,\n born 1832.",
     "score": 0.91},
    {"title": "Paris landmarks", "url": "https://example.org/paris", "content": "Many landmarks.", "score": 0.5},
]


@dataclass
class Reply:
    status: int = 200
    body: dict[str, Any] | str = ""
    hang_s: float = 0.0


class FakeTavilyServer:
    """Answers the n-th POST with the n-th reply (the last repeats) and records path, headers and JSON body."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._httpd.handle_error = lambda request, address: None  # clients that hung up are expected here
        threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with server._lock:
                    server.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()},
                                            json.loads(raw or b"{}")))
                    reply = server.replies[min(len(server.requests), len(server.replies)) - 1]
                if reply.hang_s:
                    server.stopping.wait(reply.hang_s)
                data = (reply.body if isinstance(reply.body, str) else json.dumps(reply.body)).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def serve() -> Iterator[Callable[[list[Reply]], FakeTavilyServer]]:
    servers: list[FakeTavilyServer] = []

    def start(replies: list[Reply]) -> FakeTavilyServer:
        servers.append(FakeTavilyServer(replies))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)


def make_tool(url: str, **options: Any) -> WebSearchTool:
    return WebSearchTool(base_url=url, api_key_env=options.pop("api_key_env", KEY_ENV), **options)


async def test_results_are_formatted_and_the_request_carries_query_and_key(
        serve: Callable[[list[Reply]], FakeTavilyServer]) -> None:
    server = serve([Reply(200, {"query": "x", "results": HITS, "response_time": 0.4})])
    tool = make_tool(server.url, top_k=2, price_per_call=0.008)

    result = await tool.run({"query": "  Eiffel Tower designer "}, CONTEXT)

    assert result.error is None
    path, headers, body = server.requests[0]
    assert path == "/search"
    assert headers["authorization"] == f"Bearer {API_KEY}" and body["api_key"] == API_KEY
    assert body["query"] == "Eiffel Tower designer" and body["max_results"] == 2
    output = result.output
    assert output.index("[1] Eiffel Tower - Wikipedia") < output.index("[2] Gustave Eiffel")
    assert "URL: https://en.wikipedia.org/wiki/Eiffel_Tower" in output
    assert "engineering firm of Gustave Eiffel" in output and "Engineer, born 1832." in output
    assert "Paris landmarks" not in output  # only top_k results, even if the server sends more
    assert result.cost_usd == 0.008 and result.latency_s > 0
    assert result.meta["urls"] == [HITS[0]["url"], HITS[1]["url"]]
    assert API_KEY not in output
    await tool.aclose()


async def test_no_results_say_so(serve: Callable[[list[Reply]], FakeTavilyServer]) -> None:
    server = serve([Reply(200, {"results": []})])
    result = await make_tool(server.url).run({"query": "qwertyuiop zxcv"}, CONTEXT)
    assert result.error is None and "No web results" in result.output and "qwertyuiop zxcv" in result.output


async def test_an_http_500_is_an_error_result_without_the_key(
        serve: Callable[[list[Reply]], FakeTavilyServer]) -> None:
    server = serve([Reply(500, {"detail": f"internal error handling key {API_KEY}"})])
    tool = make_tool(server.url, price_per_call=0.01)

    result = await tool.run({"query": "anything"}, CONTEXT)

    assert result.error is not None and "HTTP 500" in result.error and "internal error" in result.error
    assert API_KEY not in result.error and "***" in result.error
    assert result.cost_usd == 0.0 and result.output == ""
    assert len(server.requests) == 1


async def test_a_hanging_server_times_out_into_an_error_result(
        serve: Callable[[list[Reply]], FakeTavilyServer]) -> None:
    server = serve([Reply(200, {"results": HITS}, hang_s=20)])
    tool = make_tool(server.url, timeout_s=0.3)

    started = time.perf_counter()
    result = await tool.run({"query": "slow"}, CONTEXT)

    assert result.error is not None and "timed out after 0.3 s" in result.error
    assert time.perf_counter() - started < 0.3 + 2.0  # the slack covers a loaded machine


async def test_a_missing_key_is_an_error_result_naming_the_variable(
        serve: Callable[[list[Reply]], FakeTavilyServer], monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve([Reply(200, {"results": HITS})])
    monkeypatch.delenv(KEY_ENV)

    result = await make_tool(server.url).run({"query": "anything"}, CONTEXT)

    assert result.error is not None and KEY_ENV in result.error
    assert server.requests == []


async def test_no_key_variable_sends_no_key(serve: Callable[[list[Reply]], FakeTavilyServer]) -> None:
    server = serve([Reply(200, {"results": HITS[:1]})])
    result = await make_tool(server.url, api_key_env=None).run({"query": "self-hosted"}, CONTEXT)
    _, headers, body = server.requests[0]
    assert result.error is None and "authorization" not in headers and "api_key" not in body


@pytest.mark.parametrize("body", ["<html>not json</html>", {"error": "quota"}, {"results": "none"}])
async def test_a_body_without_a_result_list_is_an_error_result(
        serve: Callable[[list[Reply]], FakeTavilyServer], body: dict[str, Any] | str) -> None:
    server = serve([Reply(200, body)])
    result = await make_tool(server.url).run({"query": "anything"}, CONTEXT)
    assert result.error is not None and server.url in result.error and result.cost_usd == 0.0


async def test_a_refused_connection_is_an_error_result() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await make_tool(f"http://127.0.0.1:{port}").run({"query": "anything"}, CONTEXT)
    assert result.error is not None and f"127.0.0.1:{port}/search" in result.error and "ConnectError" in result.error


@pytest.mark.parametrize("arguments", [{}, {"query": ""}, {"query": 42}])
async def test_a_bad_query_is_an_error_result_and_sends_nothing(
        serve: Callable[[list[Reply]], FakeTavilyServer], arguments: dict[str, Any]) -> None:
    server = serve([Reply(200, {"results": HITS})])
    result = await make_tool(server.url).run(arguments, CONTEXT)
    assert result.error is not None and "'query'" in result.error and server.requests == []


def test_the_catalog_factory_builds_it_and_bad_options_name_the_field() -> None:
    spec = ToolSpec(name="web", type="web_search", description="Search the web.",
                    options={"top_k": 3, "price_per_call": 0.008, "api_key_env": KEY_ENV})
    tool = build_tool(spec, ModelPool([]))
    assert isinstance(tool, WebSearchTool) and tool.top_k == 3 and tool.name == "web"
    assert tool.price_rows()[0]["per_call"] == 0.008
    assert tool.schema()["function"]["parameters"]["required"] == ["query"]
    with pytest.raises(ConfigError, match="top_k"):
        build_tool(ToolSpec(name="web", type="web_search", options={"top_k": 0}), ModelPool([]))
    with pytest.raises(ConfigError, match="bad options"):
        build_tool(ToolSpec(name="web", type="web_search", options={"depth": "advanced"}), ModelPool([]))
