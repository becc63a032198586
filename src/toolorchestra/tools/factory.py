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
    if spec.type == "llm":
        return ExpertTool(spec.name, spec.description, spec.models, pool, **options)
    if spec.type == "answer":
        return AnswerTool(spec.name, spec.description, spec.models, pool, **options)
    raise ConfigError(f"tool {spec.name!r}: unknown type {spec.type!r}")


def build_tools(specs: list[ToolSpec], pool: ModelPool) -> list[Tool]:
    return [build_tool(spec, pool) for spec in specs]
