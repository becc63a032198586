"""Throughput of `toolorchestra serve` under a burst of concurrent requests.

A server on 127.0.0.1 (its own process, as in real use, with its default limits) serves a pool whose one
model is a benchmark stand-in backend that sleeps 100 ms per call. Two load generators, each in this
process, separate from the server's:

- a minimal raw-socket client: 200 keep-alive connections opened beforehand, a pre-built HTTP/1.1 request
  written to each at once, the replies collected by an asyncio Protocol (no task or stream reader per
  request) on uvloop where installed, as the server runs. It spends about 0.04 ms of CPU per request
  (printed as the load generator's CPU), a quarter of the server's, so the wall time it sees is the
  server's. This is the figure the goal is about: wall <= 1.3x the ideal;
- the official `openai.AsyncOpenAI` client (openai 3.x, over its own `httpx2` client class allowed 256
  connections), for comparison: on 2 cores the SDK's own CPU per request dominates its wall time.

- ideal wall time: 100 ms x ceil(200 / max_concurrency); with --max-concurrency 256 all 200 fit in one
  slot-round, so the ideal is 0.100 s;
- baseline in the same run: the same 200 backend calls awaited directly with asyncio.gather under the
  same concurrency bound (no HTTP, no server) — the floor any asyncio harness pays.

Each figure is the median of --rounds bursts, after one warm-up burst. Per-request latency (p50, p99) is
over every request of the measured raw bursts; server CPU per request is the server process's user+system
CPU over the measured bursts divided by their requests (summed, not a median per burst: /proc counts CPU
in 10 ms ticks, 0.05 ms per request of a 200-request burst).

Run: .venv/bin/python benchmarks/serve.py [--no-sdk]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.backends.base import Backend, Completion, Usage

MODEL = "sleep-100ms"
LATENCY_S = 0.100


class SleepBackendStandIn(Backend):
    """Benchmark stand-in for a model: answers after `latency_s` of asyncio sleep, using no CPU."""

    name = MODEL

    def __init__(self, latency_s: float = LATENCY_S) -> None:
        self.latency_s = latency_s

    async def complete(self, messages: list[dict[str, Any]], tools=None, **_: Any) -> Completion:
        await asyncio.sleep(self.latency_s)
        return Completion(text="ok", usage=Usage(prompt_tokens=10, completion_tokens=1), latency_s=self.latency_s)


def run_server(max_concurrency: int) -> None:
    """Child process: serve the stand-in on a free port and print `PORT <n>` once listening."""
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.catalog.schema import ModelSpec
    from toolorchestra.serve.app import build_app
    from toolorchestra.serve.models import ServedModels
    from toolorchestra.serve.server import listen_socket, serve_forever

    spec = ModelSpec(name=MODEL, backend={"type": "replay", "world": "benchmark", "model": MODEL})
    served = ServedModels(ModelPool([spec], {MODEL: SleepBackendStandIn()}), max_concurrency)
    sock = listen_socket("127.0.0.1", 0)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    serve_forever(build_app(served), sock, log_level="warning", access_log=False)  # as `toolorchestra serve`


@dataclass
class Burst:
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float | None


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def served_burst(client: Any, requests: int, server_pid: int) -> Burst:
    server_cpu, client_cpu, started = process_cpu_s(server_pid), time.process_time(), time.perf_counter()
    responses = await asyncio.gather(*(
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"request {index}"}])
        for index in range(requests)))
    wall = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    server_cpu_after = process_cpu_s(server_pid)
    assert all(response.choices[0].message.content == "ok" for response in responses)
    server_used = None if server_cpu is None or server_cpu_after is None else server_cpu_after - server_cpu
    return Burst(wall, client_cpu, server_used)


async def served_bursts(base_url: str, requests: int, rounds: int, server_pid: int) -> list[Burst]:
    """Each burst: the cold first one, then `rounds` more on warm connections."""
    import httpx2  # the HTTP library of openai 3.x (`DefaultAsyncHttpxClient` is an httpx2.AsyncClient)
    import openai

    limits = httpx2.Limits(max_connections=256, max_keepalive_connections=256)
    async with openai.DefaultAsyncHttpxClient(limits=limits, timeout=60) as http:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, http_client=http)
        return [await served_burst(client, requests, server_pid) for _ in range(rounds + 1)]


async def direct_wall(requests: int, max_concurrency: int) -> float:
    """Baseline: the same backend calls awaited together in this process, under the server's bound."""
    backend, slots = SleepBackendStandIn(), asyncio.Semaphore(max_concurrency)

    async def bounded_call(index: int) -> Completion:
        async with slots:
            return await backend.complete([{"role": "user", "content": str(index)}])

    started = time.perf_counter()
    await asyncio.gather(*(bounded_call(index) for index in range(requests)))
    return time.perf_counter() - started


class RawConnection(asyncio.Protocol):
    """One keep-alive connection of the minimal client: writes a pre-built request and collects the
    reply's bytes until Content-Length says it is whole. No stream reader, no task per request: the
    client's CPU per request is a write call and a few buffer operations."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.reply: asyncio.Future[tuple[bytes, float]] | None = None
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP transport (uvloop's is no subclass)

    def send(self, request: bytes) -> asyncio.Future[tuple[bytes, float]]:
        """Write `request`; the future gets the reply's body and its latency in seconds."""
        assert self.transport is not None
        self.buffer.clear()
        self.reply = asyncio.get_running_loop().create_future()
        self.sent_at = time.perf_counter()
        self.transport.write(request)
        return self.reply

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0 or self.reply is None or self.reply.done():
            return
        head = bytes(self.buffer[:head_end]).lower()
        length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        if len(self.buffer) - head_end - 4 >= length:
            body = bytes(self.buffer[head_end + 4 : head_end + 4 + length])
            self.reply.set_result((body, time.perf_counter() - self.sent_at))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.set_exception(ConnectionError(f"server closed the connection ({exc})"))


@dataclass
class RawBurst:
    wall_s: float
    latencies_s: list[float]
    server_cpu_s: float | None
    client_cpu_s: float


async def raw_client_bursts(port: int, requests: int, rounds: int, server_pid: int) -> list[RawBurst]:
    """Bursts from the minimal client over `requests` keep-alive connections opened beforehand: pre-built
    HTTP/1.1 requests written straight to the sockets, so the client spends next to no CPU per request.
    A burst's wall time runs from the first write to the last reply's last byte; the replies are checked
    after that."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "request"}]}).encode()
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    loop = asyncio.get_running_loop()
    connections = []
    for _ in range(requests):
        _, connection = await loop.create_connection(RawConnection, "127.0.0.1", port)
        connections.append(connection)
    bursts = []
    for _ in range(rounds + 1):
        server_cpu, client_cpu, started = process_cpu_s(server_pid), time.process_time(), time.perf_counter()
        replies = await asyncio.gather(*[connection.send(request) for connection in connections])
        wall = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        server_cpu_after = process_cpu_s(server_pid)
        assert [json.loads(reply)["choices"][0]["message"]["content"] for reply, _ in replies] == ["ok"] * requests
        used = None if server_cpu is None or server_cpu_after is None else server_cpu_after - server_cpu
        bursts.append(RawBurst(wall, [latency for _, latency in replies], used, client_cpu))
    for connection in connections:
        assert connection.transport is not None
        connection.transport.close()
    return bursts


def fast_event_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where installed (as the server's): the load generator's own loop then costs
    about a third less CPU per request than asyncio's default one, which on 2 cores the server shares."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def start_server_process(max_concurrency: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, __file__, "--serve", "--max-concurrency", str(max_concurrency)],
                               stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    if not line.startswith("PORT "):
        process.kill()
        raise SystemExit(f"benchmark server did not start (printed {line!r})")
    return process, int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-concurrency", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5, help="measured bursts after the warm-up one")
    parser.add_argument("--no-sdk", action="store_true", help="skip the openai-SDK bursts")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args()
    if args.serve:
        run_server(args.max_concurrency)
        return

    ideal = LATENCY_S * math.ceil(args.requests / args.max_concurrency)
    process, port = start_server_process(args.max_concurrency)
    try:
        with asyncio.Runner(loop_factory=fast_event_loop()) as runner:
            raw_bursts = runner.run(raw_client_bursts(port, args.requests, args.rounds, process.pid))
        bursts = [] if args.no_sdk else asyncio.run(
            served_bursts(f"http://127.0.0.1:{port}/v1", args.requests, args.rounds, process.pid))
    finally:
        process.terminate()
        process.wait(timeout=10)
    baseline = statistics.median(asyncio.run(direct_wall(args.requests, args.max_concurrency))
                                 for _ in range(args.rounds))

    warm_raw = raw_bursts[1:]
    raw = statistics.median(burst.wall_s for burst in warm_raw)
    latencies = [latency for burst in warm_raw for latency in burst.latencies_s]
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    raw_cpu = [burst.server_cpu_s for burst in warm_raw if burst.server_cpu_s is not None]
    raw_server_ms = 1e3 * sum(raw_cpu) / (len(raw_cpu) * args.requests) if raw_cpu else None
    raw_client_ms = 1e3 * sum(burst.client_cpu_s for burst in warm_raw) / (len(warm_raw) * args.requests)
    figures: dict[str, Any] = {
        "requests": args.requests, "max_concurrency": args.max_concurrency, "ideal_s": round(ideal, 3),
        "raw_wall_s": round(raw, 3), "raw_over_ideal": round(raw / ideal, 3),
        "raw_walls_s": [round(burst.wall_s, 3) for burst in warm_raw],
        "raw_cold_wall_s": round(raw_bursts[0].wall_s, 3),
        "latency_p50_ms": round(1e3 * p50, 1), "latency_p99_ms": round(1e3 * p99, 1),
        "raw_server_cpu_ms_per_request": None if raw_server_ms is None else round(raw_server_ms, 3),
        "raw_client_cpu_ms_per_request": round(raw_client_ms, 3),
        "direct_wall_s": round(baseline, 3), "direct_over_ideal": round(baseline / ideal, 3),
    }
    server_text = "n/a" if raw_server_ms is None else f"{raw_server_ms:.3f} ms"
    print(f"served, raw-socket load generator (a separate process from the server): {args.requests} concurrent chat "
          f"requests at 100 ms/call, max-concurrency {args.max_concurrency}: wall {raw:.3f} s (median of "
          f"{args.rounds}), ideal {ideal:.3f} s, ratio {raw / ideal:.2f}; goal <= 1.3")
    print(f"  latency p50 {1e3 * p50:.1f} ms, p99 {1e3 * p99:.1f} ms over {len(latencies)} requests; "
          f"CPU per request: server {server_text}, load generator {raw_client_ms:.3f} ms")
    if bursts:
        cold, warm_bursts = bursts[0], bursts[1:]
        warm = statistics.median(burst.wall_s for burst in warm_bursts)
        client_ms = 1e3 * statistics.median(burst.client_cpu_s for burst in warm_bursts) / args.requests
        server_cpu = [burst.server_cpu_s for burst in warm_bursts if burst.server_cpu_s is not None]
        server_ms = 1e3 * sum(server_cpu) / (len(server_cpu) * args.requests) if server_cpu else None
        figures.update({
            "sdk_wall_s": round(warm, 3), "sdk_over_ideal": round(warm / ideal, 3),
            "sdk_cold_wall_s": round(cold.wall_s, 3), "sdk_walls_s": [round(burst.wall_s, 3) for burst in warm_bursts],
            "sdk_client_cpu_ms_per_request": round(client_ms, 3),
            "sdk_server_cpu_ms_per_request": None if server_ms is None else round(server_ms, 3),
        })
        sdk_server = "n/a" if server_ms is None else f"{server_ms:.2f} ms"
        print(f"same server, openai SDK as the load generator: wall {warm:.3f} s, ratio {warm / ideal:.2f} "
              f"(cold first burst {cold.wall_s:.3f} s); CPU per request: SDK {client_ms:.2f} ms, server {sdk_server}")
    print(f"baseline: the same {args.requests} backend calls via asyncio.gather, no HTTP: wall {baseline:.3f} s, "
          f"ratio {baseline / ideal:.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
