"""Soak test of `toolorchestra serve`: minutes of mixed traffic, then the server's memory and latency.

A server on 127.0.0.1 (its own process, default limits) serves the benchmark stand-in backend of
benchmarks/serve.py (100 ms of asyncio sleep per call). --workers client tasks in this process each send,
one after another, a random mix of
- normal chat requests (expected: 200), half of them streamed and read to the end;
- streams cut midway: the client hangs up before its answer, or after the first bytes of it;
- oversize bodies: a Content-Length of 50 MB with only the first KB sent (expected: 413);
- malformed bodies: bad JSON, JSON nested 100,000 deep, a NaN temperature, invalid tool schemas (400).

It prints the server's resident memory every --sample-s seconds, then the error count (any answer other
than the expected one), p50 and p99 latency of the valid requests and the memory after warm-up (the first
--warmup-s seconds) and at the end. Exit status 1 if the RSS at the end is over 1.2x the RSS after warm-up,
any valid request failed, or p99 > 3x p50.

Run: .venv/bin/python benchmarks/serve_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve import MODEL, percentile, start_server_process  # noqa: E402  (the sibling benchmark)

NORMAL = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "soak"}]}).encode()
STREAMED = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "soak"}], "stream": True}).encode()
BAD_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 5}}}
MALFORMED = [
    b'{"model": "sleep-100ms", "messages": [',
    b'{"model": "sleep-100ms", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"model": "sleep-100ms", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": [BAD_TOOL]}).encode(),
    b"\xff\xfe not utf-8",
]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request_bytes(body: bytes, content_length: int | None = None) -> bytes:
    length = len(body) if content_length is None else content_length
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(length).encode() + b"\r\n\r\n" + body)


@dataclass
class Tally:
    latencies_s: list[float] = field(default_factory=list)
    valid_failed: int = 0
    errors: int = 0  # any answer other than the expected one, valid requests included
    sent: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, kind: str, what: str, valid: bool) -> None:
        self.errors += 1
        self.valid_failed += valid
        if len(self.failures) < 10:
            self.failures.append(f"{kind}: {what}")


async def exchange(port: int, data: bytes, timeout_s: float = 30.0) -> bytes:
    """Send `data` on a new connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()


def status_of(answer: bytes) -> int:
    try:
        return int(answer.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


async def normal(port: int, tally: Tally, streamed: bool) -> None:
    started = time.perf_counter()
    try:
        answer = await exchange(port, request_bytes(STREAMED if streamed else NORMAL))
    except (OSError, TimeoutError) as exc:
        tally.fail("normal", repr(exc), valid=True)
        return
    ok = status_of(answer) == 200 and (b"data: [DONE]" in answer if streamed else b'"content":"ok"' in answer)
    if not ok:
        tally.fail("normal", answer[:120].decode(errors="replace"), valid=True)
        return
    tally.latencies_s.append(time.perf_counter() - started)


async def cut_stream(port: int, tally: Tally) -> None:
    """Hang up before the answer (half the time) or after its first bytes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request_bytes(STREAMED))
        if random.random() < 0.5:
            await asyncio.sleep(0.03)  # while the backend call runs
        else:
            first = await asyncio.wait_for(reader.read(64), 30)
            if status_of(first) != 200:
                tally.fail("cut", first[:120].decode(errors="replace"), valid=False)
    except (OSError, TimeoutError) as exc:
        tally.fail("cut", repr(exc), valid=False)
    finally:
        writer.close()


async def expect(port: int, tally: Tally, kind: str, data: bytes, status: int) -> None:
    try:
        answer = await exchange(port, data)
    except (OSError, TimeoutError) as exc:
        tally.fail(kind, repr(exc), valid=False)
        return
    if status_of(answer) != status:
        tally.fail(kind, answer[:160].decode(errors="replace"), valid=False)


async def worker(port: int, tally: Tally, until: float) -> None:
    while time.monotonic() < until:
        draw = random.random()
        if draw < 0.6:
            kind = "normal"
            await normal(port, tally, streamed=random.random() < 0.5)
        elif draw < 0.75:
            kind = "cut"
            await cut_stream(port, tally)
        elif draw < 0.85:
            kind = "oversize"
            await expect(port, tally, kind, request_bytes(b"{" + b" " * 1024, content_length=50_000_000), 413)
        else:
            kind = "malformed"
            await expect(port, tally, kind, request_bytes(random.choice(MALFORMED)), 400)
        tally.sent[kind] = tally.sent.get(kind, 0) + 1


async def soak(port: int, pid: int, args: argparse.Namespace) -> tuple[Tally, list[tuple[float, float]], float]:
    tally = Tally()
    started = time.monotonic()
    until = started + 60 * args.minutes
    workers = [asyncio.ensure_future(worker(port, tally, until)) for _ in range(args.workers)]
    samples: list[tuple[float, float]] = []
    warm_rss = float("nan")
    warm_latencies = 0
    while not all(task.done() for task in workers):
        await asyncio.sleep(min(args.sample_s, max(0.0, until - time.monotonic()) + 0.1))
        elapsed = time.monotonic() - started
        samples.append((elapsed, rss_mib(pid)))
        print(f"  {elapsed:6.0f} s  RSS {samples[-1][1]:7.1f} MiB  valid {len(tally.latencies_s)}  "
              f"errors {tally.errors}", flush=True)
        if warm_rss != warm_rss and elapsed >= args.warmup_s:  # NaN: not taken yet
            warm_rss, warm_latencies = samples[-1][1], len(tally.latencies_s)
    await asyncio.gather(*workers)
    # Latencies of warm-up requests (first connections, lazy imports) are not the server's steady state.
    tally.latencies_s = tally.latencies_s[warm_latencies:]
    return tally, samples, warm_rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=8, help="client tasks sending requests one after another")
    parser.add_argument("--warmup-s", type=float, default=30.0)
    parser.add_argument("--sample-s", type=float, default=30.0, help="seconds between RSS samples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    args.warmup_s = min(args.warmup_s, 30 * args.minutes)  # short runs keep half their time measured
    process, port = start_server_process(max_concurrency=64)
    try:
        print(f"soak: {args.minutes:g} min of mixed traffic from {args.workers} workers against the server "
              f"(pid {process.pid}, port {port}); RSS every {args.sample_s:g} s", flush=True)
        tally, samples, warm_rss = asyncio.run(soak(port, process.pid, args))
        final_rss = rss_mib(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)
    p50 = percentile(tally.latencies_s, 0.50) if tally.latencies_s else float("nan")
    p99 = percentile(tally.latencies_s, 0.99) if tally.latencies_s else float("nan")
    checks = {
        "rss_end_within_1.2x_warm": final_rss <= 1.2 * warm_rss,
        "no_valid_request_failed": tally.valid_failed == 0,
        "p99_within_3x_p50": p99 <= 3 * p50,
    }
    print(f"sent: {json.dumps(tally.sent)}; errors {tally.errors} (valid requests failed: {tally.valid_failed})")
    for failure in tally.failures:
        print(f"  {failure}")
    print(f"valid requests after warm-up: {len(tally.latencies_s)}, latency p50 {1e3 * p50:.1f} ms, "
          f"p99 {1e3 * p99:.1f} ms ({p99 / p50:.2f}x p50)")
    print(f"server RSS: after warm-up {warm_rss:.1f} MiB, at the end {final_rss:.1f} MiB "
          f"({final_rss / warm_rss:.3f}x), max {max(rss for _, rss in samples):.1f} MiB")
    print(json.dumps({"minutes": args.minutes, "workers": args.workers, "sent": tally.sent, "errors": tally.errors,
                      "valid_failed": tally.valid_failed, "p50_ms": round(1e3 * p50, 1),
                      "p99_ms": round(1e3 * p99, 1), "rss_warm_mib": round(warm_rss, 1),
                      "rss_end_mib": round(final_rss, 1), "rss_samples_mib": [round(r, 1) for _, r in samples],
                      "checks": checks}))
    if not all(checks.values()):
        print("FAILED: " + ", ".join(name for name, ok in checks.items() if not ok))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
