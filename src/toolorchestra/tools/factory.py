"""Build the tools a catalog describes."""

from __future__ import annotations

from collections.abc import Callable

from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import ToolSpec
from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import Tool
from toolorchestra.tools.llm import AnswerTool, ExpertTool


def build_tool(spec: ToolSpec, pool: ModelPool) -> Tool:
    options = dict(spec.options)
    try:
        tool = _build(spec, pool, options)
    except TypeError as exc:
        raise ConfigError(f"tool {spec.name!r}: bad options {sorted(spec.options)}: {exc}") from None
    if spec.parameters is not None:
        tool.parameters = spec.parameters
    return tool


def _build(spec: ToolSpec, pool: ModelPool, options: dict) -> Tool:
    if spec.type == "python":
        from toolorchestra.tools.python_sandbox import PythonTool

        return PythonTool(name=spec.name, description=spec.description or None, **options)
    if spec.type == "search":
        from toolorchestra.tools.search import SearchTool

        return SearchTool(name=spec.name, description=spec.description or None, **options)
    if spec.type == "search_query_writer":
        from toolorchestra.tools.search import QueryWriterSearchTool

        return QueryWriterSearchTool(
            name=spec.name, description=spec.description or None, labels=spec.models, pool=pool, **options
        )
    if spec.type == "web_search":
        from toolorchestra.tools.web_search import WebSearchTool

        return WebSearchTool(name=spec.name, description=spec.description or None, **options)
    if spec.type in ("paper_search", "paper_reasoning", "paper_answer"):
        return _paper_tool(spec, pool, options)
    if spec.type == "llm":
        return ExpertTool(spec.name, spec.description, spec.models, pool, **options)
    if spec.type == "answer":
        return AnswerTool(spec.name, spec.description, spec.models, pool, **options)
    raise ConfigError(f"tool {spec.name!r}: unknown type {spec.type!r}")


def build_tools(specs: list[ToolSpec], pool: ModelPool) -> list[Tool]:
    return [build_tool(spec, pool) for spec in specs]


def _paper_tool(spec: ToolSpec, pool: ModelPool, options: dict) -> Tool:
    """The paper's search / enhance_reasoning / answer (tools/paper.py); `options` set the retrieval (corpus,
    top_k), the sandbox (timeout_s) and the models' budgets (max_tokens, context_tokens, document_chars)."""
    from toolorchestra.tools import paper

    if spec.type == "paper_search":
        corpus = options.pop("corpus", None)
        if not corpus:
            raise ConfigError(
                f"tool {spec.name!r} of type paper_search needs options.corpus (a JSON/JSONL corpus file)"
            )
        return paper.PaperSearchTool(
            spec.name, spec.description, spec.models, pool, retriever=bm25_retriever(str(corpus)), **options
        )
    if spec.type == "paper_reasoning":
        from toolorchestra.tools.python_sandbox import PythonTool

        sandbox = PythonTool(name=spec.name, timeout_s=float(options.pop("timeout_s", 60.0)))
        return paper.PaperReasoningTool(spec.name, spec.description, spec.models, pool, sandbox=sandbox, **options)
    return paper.PaperAnswerTool(spec.name, spec.description, spec.models, pool, **options)


def bm25_retriever(corpus: str) -> Callable[[str, int], list[str]]:
    """query, top_k -> the top passages of a corpus file as "title\ntext" (BM25, index cached on disk)."""
    from pathlib import Path

    from toolorchestra.tools.search import get_index, load_corpus

    if not Path(corpus).exists():
        load_corpus(Path(corpus))  # raises the one-line error naming the file

    def retrieve(query: str, top_k: int) -> list[str]:
        hits = get_index(str(Path(corpus).resolve())).search(query, top_k)
        return [f"{passage['title']}\n{passage['text']}".strip() for passage, _ in hits]

    return retrieve
