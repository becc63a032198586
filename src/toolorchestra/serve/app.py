"""The FastAPI application: routes, OpenAI-style error responses, and server-sent-event streams.

Request bodies are read and validated by hand (`protocol.parse_chat_request`) rather than declared as
FastAPI body parameters, so that every malformed body is a 400 in OpenAI's error shape instead of
FastAPI's 422.

A streamed request still waits for the whole answer before its first byte: backends return whole turns,
and waiting lets a failed backend be reported with its real status (502) rather than as an error in the
middle of a 200 stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

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


def build_app(served: ServedModels) -> FastAPI:
    """The OpenAI-compatible app over `served` (its episodes are kept in `served.episodes`)."""
    started = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await served.aclose()  # on the server's own loop, where the backends' connections live

    app = FastAPI(title="toolorchestra", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(ApiError, _api_error_response)
    app.add_exception_handler(HTTPException, _http_error_response)
    app.add_exception_handler(ClientGone, _client_gone_response)
    app.add_exception_handler(Exception, _internal_error_response)

    @app.get("/v1/models")
    async def list_models() -> JSONResponse:
        return JSONResponse(models_body(served.names(), started))

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(model_id: str) -> JSONResponse:
        served.check_known(model_id)
        return JSONResponse(model_entry(model_id, started))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        limits = served.limits
        raw = await _read_body(request, limits.max_body_bytes)
        with served.admitted(heavy=len(raw) > HEAVY_BODY_BYTES):
            chat = parse_chat_request(raw, limits)
            del raw  # a body of megabytes is not kept for the whole generation
            answer = await _unless_gone(request, served.answer(chat), limits.request_timeout_s)
        headers = {}
        if answer.trajectory is not None:
            headers[TRAJECTORY_HEADER] = answer.trajectory.task_id
        ids = ResponseIds.new(chat.model)
        if chat.stream:
            include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
            return StreamingResponse(
                _server_sent_events(stream_chunks(answer, ids, include_usage)),
                media_type="text/event-stream",
                headers=headers,
            )
        return Response(_json_bytes(completion_body(answer, ids)), media_type="application/json", headers=headers)

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


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, or ApiError 413 as soon as it is known to exceed `limit` bytes: from Content-Length before
    reading a byte of it, else (chunked) once the bytes read pass the limit. The connection is closed after
    the 413, so the rest of a huge body is never read."""
    declared = request.headers.get("content-length")
    too_large = ApiError(
        413,
        f"request body exceeds {limit} bytes (--max-body-bytes)",
        code="body_too_large",
        headers={"Connection": "close"},
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


class ClientGone(Exception):
    """The client hung up before its answer was ready; its work was cancelled."""


async def _unless_gone(request: Request, work: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """`work`'s result, cancelling it when the client disconnects (ClientGone) or after `timeout_s`
    (ApiError 504). Cancelling reaches the backend: the local backend drops the request from its batch,
    an orchestrator episode stops at its current call.

    `work` runs in this task (no task of its own, which would cost CPU on every request); a watcher task
    cancels this one when the disconnect arrives."""
    this = asyncio.current_task()
    assert this is not None
    gone = False

    def cancel_on_disconnect(watcher: asyncio.Task[None]) -> None:
        nonlocal gone
        if not watcher.cancelled() and watcher.exception() is None:
            gone = True
            this.cancel()

    watcher = asyncio.ensure_future(_disconnected(request))
    watcher.add_done_callback(cancel_on_disconnect)
    try:
        async with asyncio.timeout(timeout_s):
            return await work
    except asyncio.CancelledError:
        if gone and this.uncancel() == 0:  # our own cancellation, not the server shutting down
            raise ClientGone() from None
        raise
    except TimeoutError:
        raise ApiError(
            504,
            f"the request took longer than {timeout_s:g} s (--request-timeout) and was cancelled",
            type="server_error",
            code="timeout",
        ) from None
    finally:
        watcher.remove_done_callback(cancel_on_disconnect)
        watcher.cancel()


async def _disconnected(request: Request) -> None:
    # The body has been read, so the next ASGI message is the disconnect (uvicorn sends it when the socket
    # closes). Starlette's `is_disconnected` only peeks; waiting here costs nothing while the client stays.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def _server_sent_events(chunks: Iterable[dict[str, Any]]) -> AsyncIterator[bytes]:
    """`data: {chunk}` events then `data: [DONE]`. A client that hangs up ends this generator (Starlette
    cancels it or the write fails); nothing else depends on it, so the server just goes on."""
    for chunk in chunks:
        yield b"data: " + _json_bytes(chunk) + b"\n\n"
    yield b"data: [DONE]\n\n"


async def _api_error_response(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    if exc.status >= 500:
        log.warning("%s", exc.message)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error_response(_: Request, exc: Exception) -> JSONResponse:
    # Unknown paths (404) and wrong methods (405), in the same error shape as everything else.
    assert isinstance(exc, HTTPException)
    error = ApiError(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _client_gone_response(_: Request, exc: Exception) -> Response:
    # Nobody reads it; 499 (nginx's "client closed request") names the case in the access log.
    return Response(status_code=499)


async def _internal_error_response(_: Request, exc: Exception) -> JSONResponse:
    # Our own bug: the details go to the log, the client gets the exception's class only (no paths).
    log.exception("internal error", exc_info=exc)
    error = ApiError(
        500, f"internal error ({exc.__class__.__name__}); the server log has the details", type="server_error"
    )
    return JSONResponse(error.body(), status_code=500)
