"""Reading catalog YAML files into a validated `Catalog`, with errors that name file and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from toolorchestra.catalog.schema import Catalog
from toolorchestra.errors import ConfigError, UserError
from toolorchestra.lines import read_text_file

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
    if not path.is_file():
        raise ConfigError(f"{path}: not a file (expected a YAML file)")
    try:
        text = read_text_file(path, "a YAML file")
    except UserError as exc:  # too large, or not UTF-8 (a binary given by mistake)
        raise ConfigError(str(exc)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc, text)
        raise ConfigError(f"{path}{f':{line}' if line else ''}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a usable YAML file: nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits, which Python refuses to convert
        raise ConfigError(f"{path}: not a usable YAML file: {str(exc)[:200]}") from None


def yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The 1-based line and the one-line reason of a YAML error (PyYAML's own text spans several lines)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow, e.g. a control byte
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        return text.count("\n", 0, exc.position) + 1, f"character #x{code:04x} is not allowed in YAML"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    reason = " ".join(f"{problem}{f' ({context})' if context else ''}".split())
    return (mark.line + 1 if mark is not None else None), reason


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
    return load_yaml_model(path, Catalog, "a mapping with keys orchestrator, models, tools")


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
