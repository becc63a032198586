"""`toolorchestra serve`: the pool's models and its orchestrator as an OpenAI-compatible HTTP endpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from toolorchestra.errors import UserError

SERVE_EXTRA_HINT = "pip install 'toolorchestra[serve]' (FastAPI and uvicorn)"


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Catalog YAML (models and tools). Default: the embedded SmolLM2 pool."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port to listen on."),
    max_concurrency: int = typer.Option(64, "--max-concurrency", min=1, help="Backend calls in flight at once, over all requests."),
    trajectories: Optional[Path] = typer.Option(None, "--trajectories", help="Append every orchestrator episode to this JSONL file."),
    prefer: Optional[str] = typer.Option(None, "--prefer", help="The orchestrator's preference: accuracy | cost | latency | local | tool:NAME | KEY=WEIGHT,..."),
    max_turns: int = typer.Option(6, "--max-turns", min=1, help="Orchestrator turns per episode."),
    max_budget: Optional[float] = typer.Option(None, "--max-budget", min=0.0, help="Stop an episode once this many dollars are spent."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="JSON/JSONL {title, text} corpus for the search tool of the default pool."),
) -> None:
    """Serve every pool model (passed through) and the orchestrator (`orchestrator:NAME`, one episode per
    request) at /v1/chat/completions and /v1/models."""
    from toolorchestra.catalog import default_catalog, load_catalog
    from toolorchestra.serve.models import ServedModels
    from toolorchestra.serve.trajectories import TrajectoryLog

    if config is not None and not config.is_file():
        raise UserError(f"--config {config}: file not found")
    if trajectories is not None and not trajectories.parent.is_dir():
        raise UserError(f"--trajectories {trajectories}: folder {trajectories.parent} does not exist")
    build_app, listen_socket, serve_forever = _web_modules()
    catalog = load_catalog(config) if config else default_catalog(corpus)
    served = ServedModels.from_catalog(catalog, max_concurrency=max_concurrency, episodes=TrajectoryLog(trajectories),
                                       prefer=prefer, max_turns=max_turns, max_budget_usd=max_budget)
    sock = listen_socket(host, port)
    bound_port = sock.getsockname()[1]
    typer.echo(f"serving {len(served.pool.names())} models and {', '.join(served.orchestrators)} "
               f"at http://{host}:{bound_port}/v1 (max {max_concurrency} backend calls at once)")
    serve_forever(build_app(served), sock)


def _web_modules():  # type: ignore[no-untyped-def]
    """FastAPI and uvicorn are an optional extra; without them, say how to install them."""
    try:
        from toolorchestra.serve.app import build_app
        from toolorchestra.serve.server import listen_socket, serve_forever
    except ImportError as exc:
        if exc.name not in ("fastapi", "starlette", "uvicorn"):
            raise
        raise UserError(f"toolorchestra serve needs {exc.name}: {SERVE_EXTRA_HINT}") from None
    return build_app, listen_socket, serve_forever
