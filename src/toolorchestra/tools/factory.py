"""Build the tools a catalog describes."""

from __future__ import annotations

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
    """The paper's search / enhance_reasoning / answer (tools/paper.py); `options` set the retrieval (retriever:
    bm25 | dense | web, corpus, embeddings, web, top_k; tools/retrieval.py), the sandbox (timeout_s) and the
    models' budgets (max_tokens, context_tokens, document_chars, label_enum)."""
    from toolorchestra.tools import paper

    if spec.type == "paper_search":
        from toolorchestra.tools.retrieval import make_retriever

        retriever = make_retriever(options, spec.name)
        return paper.PaperSearchTool(spec.name, spec.description, spec.models, pool, retriever=retriever, **options)
    if spec.type == "paper_reasoning":
        from toolorchestra.tools.python_sandbox import PythonTool

        sandbox = PythonTool(name=spec.name, timeout_s=float(options.pop("timeout_s", 60.0)))
        return paper.PaperReasoningTool(spec.name, spec.description, spec.models, pool, sandbox=sandbox, **options)
    return paper.PaperAnswerTool(spec.name, spec.description, spec.models, pool, **options)
