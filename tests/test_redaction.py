"""The API key stays out of errors, logs, completions and saved trajectories in every form a server may echo it.

`EchoServer` is a test-only fake of a careless OpenAI-compatible server: a real `http.server` on 127.0.0.1 that
reads the key from the request's `Authorization` header and sends it back, in the form the URL names, inside its
error body or its reply. Nothing here knows the key except through what the server echoed.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from toolorchestra.backends.openai_compat import OpenAIBackend
from toolorchestra.catalog.schema import OpenAIBackendSpec
from toolorchestra.errors import BackendError

# Characters that JSON escapes ("\), URL encoding changes (/+=&%"\ and space), letters in both cases: every form
# below differs from the key itself, so each test checks a redaction of its own.
API_KEY = 'sk-Test/Key+Mixed"Case\\Chars=1&Pct%42 Space'
KEY_ENV = "TOOLORCHESTRA_TEST_REDACTION_KEY"
MESSAGES = [{"role": "user", "content": "hi"}]

FORMS: dict[str, Callable[[str], str]] = {
    "raw": lambda key: key,
    "json-escaped": lambda key: json.dumps(key)[1:-1],
    "json-escaped-slash": lambda key: json.dumps(key)[1:-1].replace("/", "\\/"),
    "json-escaped-twice": lambda key: json.dumps(json.dumps(key)[1:-1])[1:-1],
    "url-encoded": lambda key: quote(key, safe=""),
    "url-encoded-lower-hex": lambda key: quote(key, safe="").replace("%2F", "%2f").replace("%2B", "%2b"),
    "url-encoded-plus": quote_plus,
    "lower-case": str.lower,
    "upper-case": str.upper,
    "base64-user-key": lambda key: base64.b64encode(f"user:{key}".encode()).decode(),
    "base64-empty-user": lambda key: base64.b64encode(f":{key}".encode()).decode(),
    "base64-key": lambda key: base64.b64encode(key.encode()).decode(),
    "base64-urlsafe-user-key": lambda key: base64.urlsafe_b64encode(f"apikey:{key}".encode()).decode(),
}


def every_form(key: str) -> set[str]:
    return {form(key) for form in FORMS.values()}


def assert_no_key(text: str) -> None:
    leaked = sorted(name for name, form in FORMS.items() if form(API_KEY) in text)
    assert not leaked, f"key leaked as {leaked}: {text[:500]}"


def test_the_forms_differ_from_each_other_and_from_the_key() -> None:
    assert len(every_form(API_KEY)) == len(FORMS)


class EchoServer:
    """Answers POST /<form>/<reply>/v1/chat/completions by echoing the bearer key in that form.

    reply: `error400` (a JSON error body, not retried), `error500` (retried), `html200` (a 200 that is not a chat
    completion, retried), `chat200` (a chat completion whose text and tool-call arguments hold the key)."""

    def __init__(self) -> None:
        self.requests = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def url(self, form: str, reply: str) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/{form}/{reply}/v1"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests += 1
                _, form, reply, *_ = self.path.split("/")
                key = self.headers["Authorization"].removeprefix("Bearer ")
                echoed = FORMS[form](key)
                status, body = _reply(reply, echoed)
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if reply == "html200" else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def _reply(kind: str, echoed: str) -> tuple[int, str]:
    # the echo is pasted into the body as text, as a server that builds its messages by formatting would
    if kind == "error400":
        return 400, '{"error": {"message": "invalid api key: ' + echoed + '", "type": "invalid_request_error"}}'
    if kind == "padded400":  # the key starts 10 characters before the 300-character snippet ends
        return 400, '{"error": "' + "x" * 278 + echoed + '"}'
    if kind == "error500":
        return 500, '{"error": "upstream refused credentials ' + echoed + '"}'
    if kind == "html200":
        return 200, f"<html><body>login failed for {echoed}</body></html>"
    message = {"role": "assistant", "content": "you sent " + echoed,
               "tool_calls": [{"id": "c1", "type": "function",
                               "function": {"name": "answer", "arguments": json.dumps({"answer": echoed})}}]}
    completion = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                  "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return 200, json.dumps(completion)


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)


def make_backend(url: str, max_retries: int = 0) -> OpenAIBackend:
    spec = OpenAIBackendSpec(base_url=url, model="m", api_key_env=KEY_ENV, timeout_s=10, max_retries=max_retries)
    return OpenAIBackend(spec, name="expert", backoff_base_s=0.01, backoff_max_s=0.02, rng=random.Random(0))


@pytest.mark.parametrize("form", list(FORMS))
async def test_an_error_body_that_echoes_the_key_is_redacted(echo: EchoServer, form: str) -> None:
    backend = make_backend(echo.url(form, "error400"))
    with pytest.raises(BackendError) as raised:
        await backend.complete(MESSAGES)
    await backend.aclose()
    message = str(raised.value)
    assert "HTTP 400" in message and "invalid api key: ***" in message
    assert_no_key(message)


@pytest.mark.parametrize("form", list(FORMS))
async def test_a_completion_that_echoes_the_key_is_redacted(echo: EchoServer, form: str) -> None:
    backend = make_backend(echo.url(form, "chat200"))
    completion = await backend.complete(MESSAGES)
    await backend.aclose()
    assert completion.text == "you sent ***"
    assert completion.tool_calls[0].arguments == {"answer": "***"}


@pytest.mark.parametrize("reply", ["error500", "html200"])
async def test_retried_failures_keep_the_key_out_of_the_log_and_the_error(
        echo: EchoServer, caplog: pytest.LogCaptureFixture, reply: str) -> None:
    caplog.set_level(logging.DEBUG)
    for form in FORMS:
        backend = make_backend(echo.url(form, reply), max_retries=1)
        with pytest.raises(BackendError) as raised:
            await backend.complete(MESSAGES)
        await backend.aclose()
        assert "***" in str(raised.value)
        assert_no_key(str(raised.value))
    assert "attempt 1/2 failed" in caplog.text
    assert_no_key(caplog.text)


async def test_a_long_echo_is_redacted_before_it_is_cut_to_a_snippet(echo: EchoServer) -> None:
    """The error quotes at most 300 characters of the body; a key straddling that cut must not leave its head."""
    backend = make_backend(echo.url("raw", "padded400"))
    with pytest.raises(BackendError) as raised:
        await backend.complete(MESSAGES)
    await backend.aclose()
    assert "x" * 250 in str(raised.value) and API_KEY[:8] not in str(raised.value)


def test_run_save_keeps_every_form_off_the_console_and_out_of_the_saved_trajectory(
        echo: EchoServer, tmp_path: Path) -> None:
    """`run --save` against servers that echo the key (in an error, then in a reply): stdout, stderr and the
    saved JSONL hold no form of it; the episode that ended in an error exits 1."""
    saved = tmp_path / "trajectories.jsonl"
    outputs = []
    for form, reply in [("json-escaped", "error400"), ("base64-user-key", "error400"), ("url-encoded", "chat200"),
                        ("lower-case", "chat200")]:
        catalog = tmp_path / f"{form}-{reply}.yaml"
        catalog.write_text(f"""
orchestrator: remote
models:
  - name: remote
    backend: {{type: openai, base_url: "{echo.url(form, reply)}", model: m, api_key_env: {KEY_ENV},
               max_retries: 0, timeout_s: 10}}
tools:
  - {{name: answer, type: answer, description: Give the final answer.}}
""")
        result = subprocess.run(
            [str(Path(sys.executable).parent / "toolorchestra"), "run", "hi", "--config", str(catalog),
             "--max-turns", "1", "--save", str(saved)],
            capture_output=True, text=True, timeout=120, env={**_env(), KEY_ENV: API_KEY})
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == (1 if reply == "error400" else 0), result.stdout + result.stderr
        outputs += [result.stdout, result.stderr]
    saved_text = saved.read_text()
    assert len(saved_text.splitlines()) == 4 and "***" in saved_text
    for text in [*outputs, saved_text]:
        assert_no_key(text)


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "COLUMNS": "400"}
