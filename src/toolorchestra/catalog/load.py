"""Reading catalog YAML files into a validated `Catalog`, with errors that name file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolorchestra.catalog.schema import Catalog
from toolorchestra.errors import ConfigError
from toolorchestra.files import load_yaml_model

DEFAULT_CORPUS = Path("../shared/data/corpus/2wikimultihopqa_corpus.json")


def load_catalog(path: Path | str) -> Catalog:
    catalog = load_yaml_model(path, Catalog, "a mapping with keys orchestrator, models, tools")
    if any(model.backend.type == "replay" for model in catalog.models):
        # the replay package registers the `replay` backend type with the model pool when imported
        import toolorchestra.envs.replay  # noqa: F401
    return catalog


TRAINED_ORCHESTRATOR = "smollm2-135m-orchestrator"
"""The shipped trained orchestrator (toolorchestra/data/orchestrators/): the default of `run`; the untrained
embedded model stays available as `smollm2-135m`."""


def default_catalog(corpus: Path | str | None = None) -> Catalog:
    """The embedded pool: the trained SmolLM2 orchestrator, the untrained SmolLM2 as a weak expert, python, and
    local search.

    Search is offered when `corpus` (or the shared 2WikiMultiHopQA corpus beside the repo) exists.
    """
    corpus_path = Path(corpus) if corpus else DEFAULT_CORPUS
    if corpus is not None and not corpus_path.exists():
        raise ConfigError(f"--corpus {corpus_path}: file not found (expected JSON or JSONL of {{title, text}})")
    tools: list[dict[str, Any]] = [
        {
            "name": "python",
            "type": "python",
            "description": "Run Python 3 code in a sandbox; returns stdout and stderr.",
        },
        {
            "name": "expert",
            "type": "llm",
            "description": "Ask a language model a self-contained question.",
            "models": {"expert-1": "smollm2-135m"},
        },
        {"name": "answer", "type": "answer", "description": "Give the final answer and end the episode."},
    ]
    if corpus_path.exists():
        tools.insert(
            1,
            {
                "name": "search",
                "type": "search",
                "description": "Search a local Wikipedia corpus; returns the top passages.",
                "options": {"corpus": str(corpus_path.resolve()), "top_k": 3},
            },
        )
    in_process = {
        "price": {"input_per_m": 0.0, "output_per_m": 0.0},
        "latency": {"overhead_s": 0.05, "output_tokens_per_s": 25.0},
    }
    return Catalog.model_validate(
        {
            "orchestrator": TRAINED_ORCHESTRATOR,
            "models": [
                {
                    "name": TRAINED_ORCHESTRATOR,
                    "backend": {"type": "local", "path": TRAINED_ORCHESTRATOR},
                    **in_process,
                    "description": "SmolLM2-135M-Instruct with the shipped routing adapter (trained on "
                    "replay:routerbench, see its model card), in process on the CPU",
                },
                {
                    "name": "smollm2-135m",
                    "backend": {"type": "local", "path": "smollm2-135m"},
                    **in_process,
                    "description": "SmolLM2-135M-Instruct, in process on the CPU",
                },
            ],
            "tools": tools,
        }
    )


def catalog_from_options(config: Path | None, corpus: Path | None) -> Catalog:
    """The pool of `run` and `serve`: the catalog of --config, else the embedded one with --corpus for search."""
    if config is not None and corpus is not None:
        # the corpus feeds the default pool's search tool; a catalog names its own (a search tool's options)
        raise ConfigError(
            "--corpus is read with the default pool only; with --config, set the corpus in the catalog's search "
            "tool (options: corpus)"
        )
    return load_catalog(config) if config else default_catalog(corpus)
