"""Reading catalog YAML files into a validated `Catalog`, with errors that name file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from toolorchestra.catalog.schema import Catalog
from toolorchestra.errors import ConfigError

DEFAULT_CORPUS = Path("../shared/data/corpus/2wikimultihopqa_corpus.json")


def format_validation_error(path: Path | str, error: ValidationError) -> str:
    lines = [f"{path}: invalid configuration"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        got = item.get("input")
        got_text = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  field {where}: {item['msg']}{got_text}")
    return "\n".join(lines)


def read_yaml(path: Path | str) -> Any:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_model(path: Path | str, model: type[ModelT], expected: str, empty_ok: bool = False) -> ModelT:
    """Read a YAML mapping into pydantic `model`; every failure is a ConfigError naming the file."""
    data = read_yaml(path)
    if data is None and empty_ok:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected {expected}; got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, exc)) from None


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
    """The embedded pool: the trained SmolLM2 orchestrator, the untrained SmolLM2 as a weak expert, python, and local search.

    Search is offered when `corpus` (or the shared 2WikiMultiHopQA corpus beside the repo) exists.
    """
    corpus_path = Path(corpus) if corpus else DEFAULT_CORPUS
    if corpus is not None and not corpus_path.exists():
        raise ConfigError(f"--corpus {corpus_path}: file not found (expected JSON or JSONL of {{title, text}})")
    local = {"type": "local", "path": "smollm2-135m"}
    tools: list[dict[str, Any]] = [
        {"name": "python", "type": "python", "description": "Run Python 3 code in a sandbox; returns stdout and stderr."},
        {
            "name": "expert",
            "type": "llm",
            "description": "Ask a language model a self-contained question.",
            "models": {"expert-1": "smollm2-135m"},
        },
        {
            "name": "answer",
            "type": "answer",
            "description": "Give the final answer and end the episode.",
        },
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
    return Catalog.model_validate(
        {
            "orchestrator": TRAINED_ORCHESTRATOR,
            "models": [
                {
                    "name": TRAINED_ORCHESTRATOR,
                    "backend": {"type": "local", "path": TRAINED_ORCHESTRATOR},
                    "price": {"input_per_m": 0.0, "output_per_m": 0.0},
                    "latency": {"overhead_s": 0.05, "output_tokens_per_s": 25.0},
                    "description": "SmolLM2-135M-Instruct with the shipped routing adapter (trained on "
                                   "replay:routerbench, see its model card), in process on the CPU",
                },
                {
                    "name": "smollm2-135m",
                    "backend": local,
                    "price": {"input_per_m": 0.0, "output_per_m": 0.0},
                    "latency": {"overhead_s": 0.05, "output_tokens_per_s": 25.0},
                    "description": "SmolLM2-135M-Instruct, in process on the CPU",
                }
            ],
            "tools": tools,
        }
    )
