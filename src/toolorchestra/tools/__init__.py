"""Tools the orchestrator can call: a Python sandbox, local BM25 search, a web-search API adapter,
and LLM-backed tools (experts, answer models, a search-query writer) that charge the tokens of the
model behind the chosen label at its price.
"""

from toolorchestra.tools.base import Tool, ToolContext, ToolResult

__all__ = ["Tool", "ToolContext", "ToolResult"]
