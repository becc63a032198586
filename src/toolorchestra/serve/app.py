"""The application: routes, OpenAI-style error responses, and server-sent-event streams.

Request bodies are read and validated by hand (`protocol.parse_chat_request`) rather than declared as
FastAPI body parameters, so that every malformed body is a 400 in OpenAI's error shape instead of
FastAPI's 422.

The hot endpoint, `POST /v1/chat/completions`, is a plain ASGI handler (`ChatEndpoint`) that the app
calls before FastAPI's middleware, routing and dependency machinery: under a burst of small requests on
2 cores those layers cost more CPU per request than everything the endpoint itself does (see
benchmarks/serve.py). The other routes are rare and stay FastAPI routes.

A streamed request still waits for the whole answer before its first byte: backends return whole turns,
and waiting lets a failed backend be reported with its real status (502) rather than as an error in the
middle of a 200 stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic_core import to_json
from starlette.exceptions import HTTPException
from starlette.routing import Route

from toolorchestra.serve.models import TRAJECTORY_HEADER, ServedModels
from toolorchestra.serve.protocol import (
    ApiError,
    ResponseIds,
    completion_body,
    model_entry,
    models_body,
    parse_chat_request,
    stream_chunks,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
Start = Callable[[int, Headers], Awaitable[None]]  # sends a response's status and headers

CHAT_PATH = "/v1/chat/completions"


class ServeApp(FastAPI):
    """FastAPI, with `POST /v1/chat/completions` answered by `chat` directly (see the module docstring).
    Middleware added to this app therefore does not see that endpoint."""

    chat: ChatEndpoint | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.chat is not None and scope["type"] == "http" and scope["path"] == CHAT_PATH:
            if scope["method"] == "POST":
                await self.chat(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def build_app(served: ServedModels) -> ServeApp:
    """The OpenAI-compatible app over `served` (its episodes are kept in `served.episodes`)."""
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await served.aclose()  # on the server's own loop, where the backends' connections live

    app = ServeApp(title="toolorchestra", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.chat = ChatEndpoint(served)
    # Only other methods reach the router here (POST is taken above): this route answers them 405.
    app.router.routes.append(Route(CHAT_PATH, app.chat, methods=["POST"]))
    app.add_exception_handler(ApiError, _error_response)
    app.add_exception_handler(HTTPException, _http_error_response)
    app.add_exception_handler(Exception, _error_response)

    @app.get("/v1/models")
    async def list_models() -> JSONResponse:
        return JSONResponse(models_body(served.names(), started))

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(model_id: str) -> JSONResponse:
        served.check_known(model_id)
        return JSONResponse(model_entry(model_id, started))

    @app.get("/v1/trajectories/{trajectory_id}")
    async def get_trajectory(trajectory_id: str) -> JSONResponse:
        trajectory = served.episodes.get(trajectory_id)
        if trajectory is None:
            raise ApiError(
                404,
                f"no recent trajectory {trajectory_id!r} (only the last {served.episodes.kept} "
                "are kept; start the server with --trajectories FILE to keep all)",
                param="trajectory_id",
                code="trajectory_not_found",
            )
        return JSONResponse(trajectory.to_record())

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


HEAVY_BODY_BYTES = 256 * 1024  # a body this large leaves enough freed heap behind to hand back
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]


class ChatEndpoint:
    """`POST /v1/chat/completions` as a plain ASGI app: the body read within --max-body-bytes, admitted
    against the queue limit, parsed and validated, answered within the deadline unless the client leaves.
    Every failure is answered here in OpenAI's error shape, as the FastAPI routes' handlers answer theirs."""

    def __init__(self, served: ServedModels) -> None:
        self.served = served

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False  # whether the response has begun (a stream), after which no error can be sent

        async def start(status: int, headers: Headers) -> None:
            nonlocal started
            started = True
            await send({"type": "http.response.start", "status": status, "headers": headers})

        try:
            await self._answer(scope, receive, start, send)
        except ClientGone:
            if not started:  # nobody reads it; 499 (nginx's "client closed request") names the case
                await start(499, [(b"content-length", b"0")])
                await send({"type": "http.response.body", "body": b""})
        except Exception as exc:
            error = _logged(exc)
            if not started:
                await _send_json(start, send, error.status, error.body(), error.headers)

    async def _answer(self, scope: Scope, receive: Receive, start: Start, send: Send) -> None:
        served = self.served
        limits = served.limits
        raw = await _read_body(scope, receive, limits.max_body_bytes)
        with served.admitted(heavy=len(raw) > HEAVY_BODY_BYTES):
            chat = parse_chat_request(raw, limits)
            del raw  # a body of megabytes is not kept for the whole generation
            answer = await _unless_gone(receive, served.answer(chat), limits.request_timeout_s)
        extra: Headers = []
        if answer.trajectory is not None:
            extra.append((TRAJECTORY_HEADER.encode(), answer.trajectory.task_id.encode("latin-1")))
        ids = ResponseIds.new(chat.model)
        if not chat.stream:
            await _send_json(start, send, 200, completion_body(answer, ids), extra)
            return
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        await start(200, SSE_HEADERS + extra)
        # A client that hangs up mid-stream makes the rest of these sends no-ops (uvicorn drops them);
        # nothing else depends on the stream, so the server just goes on.
        async for event in _server_sent_events(stream_chunks(answer, ids, include_usage)):
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _send_json(
    start: Start, send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | Headers
) -> None:
    data = _json_bytes(body)
    extra = (
        [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
        if isinstance(headers, dict)
        else headers
    )
    await start(status, [*JSON_HEADERS, (b"content-length", str(len(data)).encode()), *extra])
    await send({"type": "http.response.body", "body": data})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:  # ASGI servers give header names lower-cased
            return bytes(value)
    return None


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The body, or ApiError 413 as soon as it is known to exceed `limit` bytes: from Content-Length before
    reading a byte of it, else (chunked) once the bytes read pass the limit. The connection is closed after
    the 413, so the rest of a huge body is never read. ClientGone if the client hangs up first."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"request body exceeds {limit} bytes (--max-body-bytes)",
        code="body_too_large",
        headers={"Connection": "close"},
    )


class ClientGone(Exception):
    """The client hung up before its answer was ready; its work was cancelled."""


async def _unless_gone(receive: Receive, work: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """`work`'s result, cancelling it when the client disconnects (ClientGone) or after `timeout_s`
    (ApiError 504). Cancelling reaches the backend: the local backend drops the request from its batch,
    an orchestrator episode stops at its current call.

    `work` runs in this task (no task of its own, which would cost CPU on every request); a watcher task
    and a timer cancel this one, whichever comes first. (One timer handle, rather than asyncio.timeout's
    context manager around it, is one of the few things per request that is ours to trim.)"""
    this = asyncio.current_task()
    assert this is not None
    reason: str | None = None  # "gone" or "timeout", once this task has been cancelled for it

    def stop(why: str) -> None:
        nonlocal reason
        if reason is None:
            reason = why
            this.cancel()

    def stop_on_disconnect(watcher: asyncio.Task[None]) -> None:
        if not watcher.cancelled() and watcher.exception() is None:
            stop("gone")

    timer = asyncio.get_running_loop().call_later(timeout_s, stop, "timeout")
    watcher = asyncio.ensure_future(_disconnected(receive))
    watcher.add_done_callback(stop_on_disconnect)
    try:
        return await work
    except asyncio.CancelledError:
        if reason is None or this.uncancel() > 0:  # cancelled from outside too: the server shutting down
            raise
        if reason == "gone":
            raise ClientGone() from None
        raise ApiError(
            504,
            f"the request took longer than {timeout_s:g} s (--request-timeout) and was cancelled",
            type="server_error",
            code="timeout",
        ) from None
    finally:
        timer.cancel()
        watcher.remove_done_callback(stop_on_disconnect)
        watcher.cancel()


async def _disconnected(receive: Receive) -> None:
    # The body has been read, so the next ASGI message is the disconnect (uvicorn sends it when the socket
    # closes); waiting here costs nothing while the client stays.
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _json_bytes(body: dict[str, Any]) -> bytes:
    # pydantic's serializer (Rust): compact UTF-8 JSON, as json.dumps(ensure_ascii=False) with compact
    # separators writes it, in a sixth of the time; NaN or infinity become null rather than invalid JSON.
    return to_json(body)


async def _server_sent_events(chunks: Iterable[dict[str, Any]]) -> AsyncIterator[bytes]:
    """`data: {chunk}` events then `data: [DONE]`. A client that hangs up ends this generator (Starlette
    cancels it or the write fails); nothing else depends on it, so the server just goes on."""
    for chunk in chunks:
        yield b"data: " + _json_bytes(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"


def _logged(exc: Exception) -> ApiError:
    """The error response for `exc`, logged: an ApiError of 500 or more as a warning; any other exception is our
    own bug, whose details go to the log while the client gets the exception's class only (no paths)."""
    if isinstance(exc, ApiError):
        if exc.status >= 500:
            log.warning("%s", exc.message)
        return exc
    log.exception("internal error", exc_info=exc)
    return ApiError(
        500, f"internal error ({exc.__class__.__name__}); the server log has the details", type="server_error"
    )


async def _error_response(_: Request, exc: Exception) -> JSONResponse:
    """An ApiError, or (our own bug) any other exception, in OpenAI's error shape."""
    error = _logged(exc)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


async def _http_error_response(_: Request, exc: Exception) -> JSONResponse:
    # Unknown paths (404) and wrong methods (405), in the same error shape as everything else.
    assert isinstance(exc, HTTPException)
    error = ApiError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)
