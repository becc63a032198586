"""`toolorchestra serve`: the pool's models and its orchestrator as an OpenAI-compatible HTTP endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from toolorchestra.errors import UserError

SERVE_EXTRA_HINT = "pip install 'toolorchestra[serve]' (FastAPI and uvicorn)"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    config: Path | None = typer.Option(
        None, "--config", "-c", help="Catalog YAML (models and tools). Default: the embedded SmolLM2 pool."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
    max_concurrency: int = typer.Option(
        64, "--max-concurrency", min=1, help="Backend calls in flight at once, over all requests."
    ),
    trajectories: Path | None = typer.Option(
        None, "--trajectories", help="Append every orchestrator episode to this JSONL file."
    ),
    prefer: str | None = typer.Option(
        None,
        "--prefer",
        help="The orchestrator's preference: accuracy | cost | latency | local | tool:NAME | KEY=WEIGHT,...",
    ),
    max_turns: int = typer.Option(6, "--max-turns", min=1, help="Orchestrator turns per episode."),
    max_budget: float | None = typer.Option(
        None, "--max-budget", min=0.0, help="Stop an episode once this many dollars are spent."
    ),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="JSON/JSONL {title, text} corpus for the search tool of the default pool."
    ),
    max_body_bytes: int = typer.Option(
        4 * 1024 * 1024,
        "--max-body-bytes",
        min=1,
        help="Largest request body; a larger one is answered 413 before it is read.",
    ),
    max_json_depth: int = typer.Option(64, "--max-json-depth", min=1, help="Deepest JSON nesting of a request body."),
    max_prompt_tokens: int = typer.Option(
        4096,
        "--max-prompt-tokens",
        min=1,
        help="Longest prompt of a local model (its context, if shorter); max_tokens must fit in the context left.",
    ),
    max_tool_schema_bytes: int = typer.Option(
        64 * 1024, "--max-tool-schema-bytes", min=1, help="JSON size of a request's tool definitions together."
    ),
    max_enum_values: int = typer.Option(512, "--max-enum-values", min=1, help="Values of one enum in a tool schema."),
    request_timeout: float = typer.Option(
        300.0,
        "--request-timeout",
        min=0.001,
        help="Seconds a request may take, queueing included; then it is cancelled (504).",
    ),
    max_queued: int = typer.Option(
        256,
        "--max-queued",
        min=0,
        help="Requests waiting beyond --max-concurrency; more are answered 429 with Retry-After.",
    ),
    policy: str = typer.Option(
        "auto",
        "--policy",
        help="auto: as reader when the catalog's answer tool offers two or more labels that all carry a "
        "`profile:` (or --profiles is given), else as orchestrator | orchestrator: serve the catalog's "
        "orchestrator | reader[:MODEL]: serve `orchestrator:reader` too, which answers with the label whose "
        "price and profile give the highest expected reward (as `run --policy reader`).",
    ),
    calibration: str | None = typer.Option(
        None,
        "--calibration",
        help="With --policy reader: the replay world that places questions among the profiles' task types "
        "(default: their `measured_on`).",
    ),
    profiles: Path | None = typer.Option(
        None, "--profiles", help="With --policy reader: a file `toolorchestra profile` wrote, for the catalog."
    ),
) -> None:
    """Serve every pool model (passed through) and the orchestrator (`orchestrator:NAME`, one episode per
    request) at /v1/chat/completions and /v1/models."""
    from toolorchestra.catalog import catalog_from_options
    from toolorchestra.serve.limits import ServeLimits
    from toolorchestra.serve.models import ServedModels
    from toolorchestra.serve.trajectories import TrajectoryLog

    if config is not None and not config.is_file():
        raise UserError(f"--config {config}: file not found")
    if trajectories is not None and not trajectories.parent.is_dir():
        problem = "is a file, not a folder" if trajectories.parent.exists() else "does not exist"
        raise UserError(f"--trajectories {trajectories}: folder {trajectories.parent} {problem}")
    build_app, listen_socket, serve_forever = _web_modules()
    catalog = catalog_from_options(config, corpus)
    from toolorchestra.bench.policies import live_reader

    catalog, reader = live_reader(catalog, policy, prefer, calibration, profiles)
    limits = ServeLimits(
        max_body_bytes=max_body_bytes,
        max_json_depth=max_json_depth,
        max_prompt_tokens=max_prompt_tokens,
        max_tool_schema_bytes=max_tool_schema_bytes,
        max_enum_values=max_enum_values,
        request_timeout_s=request_timeout,
        max_queued=max_queued,
    )
    served = ServedModels.from_catalog(
        catalog,
        max_concurrency=max_concurrency,
        episodes=TrajectoryLog(trajectories),
        prefer=prefer,
        max_turns=max_turns,
        max_budget_usd=max_budget,
        limits=limits,
        reader=reader,
    )
    sock = listen_socket(host, port)
    bound_port = sock.getsockname()[1]
    typer.echo(
        f"serving {len(served.pool.names())} models and {', '.join(served.orchestrators)} "
        f"at http://{host}:{bound_port}/v1 (max {max_concurrency} backend calls at once)"
    )
    serve_forever(build_app(served), sock)


def _web_modules() -> tuple[Any, Any, Any]:
    """FastAPI and uvicorn are an optional extra; without them, say how to install them."""
    try:
        from toolorchestra.serve.app import build_app
        from toolorchestra.serve.server import listen_socket, serve_forever
    except ImportError as exc:
        if exc.name not in ("fastapi", "starlette", "uvicorn"):
            raise
        raise UserError(f"toolorchestra serve needs {exc.name}: {SERVE_EXTRA_HINT}") from None
    return build_app, listen_socket, serve_forever
