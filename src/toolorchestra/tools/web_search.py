"""Web search through a Tavily-style HTTP API.

This module owns `WebSearchTool`: one POST `{base_url}/search` per call with the JSON body
`{"query", "max_results", "api_key"}`, and the results (title, url, content) formatted as text for the
orchestrator. The key is sent both as `Authorization: Bearer <key>` (Tavily's current scheme) and as
`api_key` in the body (older Tavily releases and self-hosted look-alikes read it there); both go only
to `base_url`. Every failure (no key, HTTP error, timeout, a body that is not a result list) comes back
as `ToolResult(error=...)`, never as an exception, and no message ever contains the key.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref
from typing import Any

import httpx

from toolorchestra.backends.openai_compat import snippet
from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import Tool, ToolContext, ToolResult, truncate

DEFAULT_DESCRIPTION = (
    "Search the web. Returns the top results, each with a title, a URL and an extract of the page. "
    "Use it for facts that need current or specific information."
)
CONTENT_CHARS_PER_RESULT = 700
"""Extract length per result, so that every result fits in one observation rather than the first alone."""


class WebSearchTool(Tool):
    """A Tavily-compatible web search. `price_per_call` is charged for each successful search only."""

    def __init__(
        self,
        name: str = "web_search",
        description: str | None = None,
        base_url: str = "https://api.tavily.com",
        api_key_env: str | None = "TAVILY_API_KEY",
        top_k: int = 5,
        timeout_s: float = 15,
        price_per_call: float = 0.0,
    ) -> None:
        _check_options(name, top_k, timeout_s, price_per_call)
        self.name = name
        self.description = description or DEFAULT_DESCRIPTION
        self.url = base_url.rstrip("/") + "/search"
        self.api_key_env = api_key_env
        self.top_k = top_k
        self.timeout_s = timeout_s
        self.price_per_call = price_per_call
        self.parameters = {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "what to search for, as a search-engine query",
                }
            },
            "required": ["query"],
        }
        # One HTTP client per event loop: a connection pool cannot outlive the loop it was made on.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(error=f"argument 'query' must be a non-empty string; got {query!r}")
        api_key = self._api_key()
        if api_key == "":
            return ToolResult(
                error=f"web search is not configured: set the environment variable "
                f"{self.api_key_env} to a Tavily API key"
            )
        started = time.perf_counter()
        result = await self._search(query.strip(), api_key)
        result.latency_s = time.perf_counter() - started
        if api_key and result.error:
            result.error = result.error.replace(api_key, "***")  # in case a server echoes the request
        return result

    async def aclose(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _api_key(self) -> str | None:
        """The key, "" when its variable is unset, or None when this tool is configured without one."""
        if self.api_key_env is None:
            return None
        return os.environ.get(self.api_key_env, "").strip()

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = httpx.AsyncClient(timeout=self.timeout_s)
            self._clients[loop] = client
        return client

    async def _search(self, query: str, api_key: str | None) -> ToolResult:
        body: dict[str, Any] = {"query": query, "max_results": self.top_k}
        headers = {"Accept": "application/json"}
        if api_key:
            body["api_key"] = api_key
            headers["Authorization"] = f"Bearer {api_key}"
        try:
            # httpx's timeout bounds each network step; this bounds the whole call.
            async with asyncio.timeout(self.timeout_s):
                response = await self._client().post(self.url, json=body, headers=headers)
        except (TimeoutError, httpx.TimeoutException):
            return ToolResult(error=f"web search timed out after {self.timeout_s:g} s ({self.url})")
        except httpx.HTTPError as exc:
            return ToolResult(error=f"web search request to {self.url} failed: {exc.__class__.__name__}: {exc}")
        if response.status_code >= 400:
            return ToolResult(
                error=f"web search at {self.url} returned HTTP {response.status_code}: {snippet(response.text)}"
            )
        return self._read_results(query, response)

    def _read_results(self, query: str, response: httpx.Response) -> ToolResult:
        try:
            payload = response.json()
        except ValueError:
            return ToolResult(
                error=f"web search at {self.url} returned a body that is not JSON: {snippet(response.text)}"
            )
        results = payload.get("results") if isinstance(payload, dict) else None
        if not isinstance(results, list):
            return ToolResult(error=f"web search at {self.url} returned no 'results' list: {snippet(response.text)}")
        hits = [hit for hit in results if isinstance(hit, dict)][: self.top_k]
        return ToolResult(
            output=format_results(query, hits),
            cost_usd=self.price_per_call,
            meta={"urls": [str(hit.get("url", "")) for hit in hits]},
        )


def format_results(query: str, hits: list[dict[str, Any]]) -> str:
    """Numbered results, each as its title, URL and a cut extract of its content."""
    if not hits:
        return f"No web results for {query!r}."
    blocks = [f"Web results for {query!r}:"]
    for number, hit in enumerate(hits, start=1):
        title = str(hit.get("title") or "(untitled)").strip()
        content = truncate(" ".join(str(hit.get("content") or "").split()), CONTENT_CHARS_PER_RESULT)
        blocks.append(f"[{number}] {title}\nURL: {hit.get('url', '')}\n{content}")
    return "\n\n".join(blocks)


def _check_options(name: str, top_k: Any, timeout_s: Any, price_per_call: Any) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ConfigError(f"tool {name!r}: option 'top_k' must be an integer >= 1; got {top_k!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise ConfigError(f"tool {name!r}: option 'timeout_s' must be a number > 0; got {timeout_s!r}")
    if isinstance(price_per_call, bool) or not isinstance(price_per_call, (int, float)) or price_per_call < 0:
        raise ConfigError(f"tool {name!r}: option 'price_per_call' must be a number >= 0; got {price_per_call!r}")
