"""Running the app under uvicorn: in the foreground for `toolorchestra serve`, or in a background thread
for tests and benchmarks (`ServerThread`).

The listening socket is bound here, before uvicorn starts, so that a port in use is one clear
`UserError` naming --host/--port (uvicorn would log it and exit), and so that a thread server can take
a free port (port 0) and report which one it got.
"""

from __future__ import annotations

import gc
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from toolorchestra.errors import UserError

LISTEN_BACKLOG = 2048  # room for bursts of hundreds of concurrent connections
# Young objects allowed before a generation-0 collection (CPython's default is 700). A burst of hundreds of
# requests in flight keeps tens of thousands of young objects alive; at 700 the collector ran hundreds of
# times per 1,000 requests, traversing the same live requests and promoting them, and each full collection
# that followed took tens of ms (benchmarks/serve.py: a third of the server's CPU and its slowest bursts).
# What a request leaves as cyclic garbage is a few objects, so this bounds it to a few MB.
GC_GEN0_THRESHOLD = 50_000


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port); port 0 picks a free one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UserError(f"--host {host} --port {port}: cannot listen there ({exc.strerror})") from None
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def uvicorn_server(app: Any, log_level: str = "info", access_log: bool = True) -> uvicorn.Server:
    config = uvicorn.Config(
        app, log_level=log_level, access_log=access_log, backlog=LISTEN_BACKLOG, timeout_graceful_shutdown=5
    )
    return uvicorn.Server(config)


def serve_forever(app: Any, sock: socket.socket, log_level: str = "info", access_log: bool = True) -> None:
    """Serve until interrupted (uvicorn handles SIGINT/SIGTERM and shuts down gracefully), in a process of
    its own: its garbage collector is tuned for serving (`tune_gc_for_serving`)."""
    tune_gc_for_serving()
    uvicorn_server(app, log_level, access_log).run(sockets=[sock])


def tune_gc_for_serving() -> None:
    """Freeze what exists now (modules, the app, the models' tables: never garbage, so never traversed
    again by a collection) and raise the generation-0 threshold to GC_GEN0_THRESHOLD. For a process that
    only serves; a server thread inside another program leaves that program's collector alone."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class ServerThread:
    """The app served on 127.0.0.1 at a free port from a daemon thread, for as long as the `with` block.

    `base_url` is the OpenAI-style base URL (`http://127.0.0.1:PORT/v1`).
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", start_timeout_s: float = 30.0) -> None:
        self._sock = listen_socket(host, 0)
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        self._server = uvicorn_server(app, log_level="warning", access_log=False)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name=f"toolorchestra-serve-{self.port}",
        )
        self._start_timeout_s = start_timeout_s

    def __enter__(self) -> ServerThread:
        self._thread.start()
        # uvicorn sets `started` once the socket accepts; poll rather than sleep a fixed time.
        deadline = time.monotonic() + self._start_timeout_s
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError(f"server on port {self.port} did not start")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
