"""Episodes per second of `toolorchestra eval` on 1 and 2 Ray workers against a slow orchestrator backend.

The orchestrator is an OpenAI-compatible HTTP server on 127.0.0.1 (stdlib, in this process) that waits
--latency-ms (default 100 ms) per request and answers with a call of the answer tool on its first label, so
an episode costs about one request. Each worker keeps --concurrency episodes in flight (default 1), so the
run is latency-bound, as evaluation against remote models is. Ray starts once before timing; the figures
include the actors' start (env and policy built per actor).

    PYTHONPATH=src python benchmarks/eval_scaling.py --limit 40
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_handler(latency_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency_s)
            label = _first_answer_label(request.get("tools") or [])
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_0", "type": "function",
                "function": {"name": "answer", "arguments": json.dumps({"model": label})}}]}
            body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
                               "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                               "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

    return Handler


def _first_answer_label(tools: list[dict]) -> str:
    for tool in tools:
        function = tool.get("function", {})
        if function.get("name") == "answer":
            return function["parameters"]["properties"]["model"]["enum"][0]
    return "unknown"


def run(limit: int, latency_ms: float, concurrency: int, data_dir: Path | None) -> dict[int, float]:
    import ray

    from toolorchestra.bench.eval import EvalRequest, run_eval

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(latency_ms / 1000))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    rates = {}
    with tempfile.TemporaryDirectory() as folder:
        catalog = Path(folder) / "catalog.yaml"
        catalog.write_text("orchestrator: slow-orchestrator\ntools: []\nmodels:\n  - name: slow-orchestrator\n    backend: {type: openai, base_url: "
                           f"'http://127.0.0.1:{port}/v1', model: slow, max_retries: 0}}\n")
        ray.init(include_dashboard=False, log_to_driver=False)
        try:
            for workers in (1, 2):
                request = EvalRequest(env="replay:routerbench", policy="orchestrator:slow-orchestrator",
                                      out=Path(folder) / f"w{workers}", limit=limit, concurrency=concurrency,
                                      config=catalog, data_dir=data_dir, progress=False, ray=True,
                                      num_workers=workers)
                started = time.perf_counter()
                metrics = run_eval(request)
                elapsed = time.perf_counter() - started
                rates[workers] = limit / elapsed
                print(f"{workers} worker(s): {limit} episodes in {elapsed:.2f} s = {rates[workers]:.2f} episodes/s "
                      f"(accuracy {metrics['accuracy']:.3f})")
        finally:
            ray.shutdown()
            server.shutdown()
    print(f"speed-up 2 vs 1 workers: {rates[2] / rates[1]:.2f}x")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=40, help="episodes (replay:routerbench test tasks)")
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=1, help="episodes in flight per worker")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    run(args.limit, args.latency_ms, args.concurrency, args.data_dir)


if __name__ == "__main__":
    main()
