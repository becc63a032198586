"""Retrievers for the paper's search tool: `query, top_k -> documents`, each document a passage's text.

- `bm25` (default): bm25s over a JSON/JSONL `{title, text}` corpus file, the index cached on disk (tools/search.py);
- `dense`: the same corpus embedded once through an OpenAI-compatible `/embeddings` endpoint (vLLM, TEI,
  OpenAI), the vectors cached on disk per corpus file and embedding model, cosine similarity at query time;
- `web`: the Tavily-style web search of tools/web_search.py, each result's title and extract a document.

Which one a catalog's `paper_search` tool uses is its `options.retriever` (tools/factory.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from toolorchestra.errors import ConfigError

Retriever = Callable[[str, int], Awaitable[list[str]]]
EMBED_BATCH = 64


def passage_text(passage: dict[str, str]) -> str:
    return f"{passage['title']}\n{passage['text']}".strip()


def bm25_retriever(corpus: str) -> Retriever:
    """BM25 over a corpus file (checked now, indexed on first use and cached on disk)."""
    from toolorchestra.tools.search import get_index, load_corpus

    path = Path(corpus).resolve()
    if not path.exists():
        load_corpus(path)  # raises the one-line error naming the file

    async def retrieve(query: str, top_k: int) -> list[str]:
        index = await asyncio.to_thread(get_index, str(path))
        hits = await asyncio.to_thread(index.search, query, top_k)
        return [passage_text(passage) for passage, _ in hits]

    return retrieve


class DenseIndex:
    """A corpus embedded through an OpenAI-compatible embeddings endpoint; vectors cached under
    $TOOLORCHESTRA_CACHE/dense/<key>.npy (key: corpus path, size, mtime and the embedding model)."""

    def __init__(self, corpus: Path, base_url: str, model: str, api_key_env: str | None = None) -> None:
        from toolorchestra.tools.search import load_corpus

        self.corpus = corpus.resolve()
        self.passages = load_corpus(self.corpus)
        self.model = model
        key = api_key_env and os.environ.get(api_key_env)
        if api_key_env and not key:
            raise ConfigError(f"dense retrieval: environment variable {api_key_env} (api_key_env) is not set")
        self.base_url = base_url
        self._api_key = key or "EMPTY"
        self._vectors: Any = None
        self._lock = asyncio.Lock()

    def _cache_file(self) -> Path:
        from toolorchestra.cache import cache_dir

        stat = self.corpus.stat()
        fingerprint = f"{self.corpus}|{stat.st_size}|{stat.st_mtime_ns}|{self.model}"
        return cache_dir("dense") / f"{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}.npy"

    async def _embed(self, texts: list[str]) -> Any:
        import numpy as np
        from openai import AsyncOpenAI

        async with AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, max_retries=3) as client:
            rows: list[list[float]] = []
            for start in range(0, len(texts), EMBED_BATCH):
                response = await client.embeddings.create(model=self.model, input=texts[start : start + EMBED_BATCH])
                rows.extend(item.embedding for item in sorted(response.data, key=lambda item: item.index))
        vectors = np.asarray(rows, dtype=np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    async def vectors(self) -> Any:
        import numpy as np

        async with self._lock:
            if self._vectors is None:
                cached = self._cache_file()
                if cached.exists():
                    self._vectors = np.load(cached)
                else:
                    self._vectors = await self._embed([passage_text(p) for p in self.passages])
                    staging = cached.with_suffix(f".{os.getpid()}.tmp.npy")
                    np.save(staging, self._vectors)
                    os.replace(staging, cached)  # a killed build never leaves a half-written file
        return self._vectors

    async def search(self, query: str, top_k: int) -> list[str]:
        import numpy as np

        vectors = await self.vectors()
        scores = vectors @ (await self._embed([query]))[0]
        best = np.argsort(-scores)[:top_k]
        return [passage_text(self.passages[int(i)]) for i in best]


def dense_retriever(corpus: str, embeddings: dict[str, Any]) -> Retriever:
    unknown = sorted(set(embeddings) - {"base_url", "model", "api_key_env"})
    if unknown or not embeddings.get("base_url") or not embeddings.get("model"):
        raise ConfigError(
            "paper_search options.embeddings needs base_url and model (and optionally api_key_env)"
            + (f"; unknown keys {unknown}" if unknown else "")
        )
    index = DenseIndex(
        Path(corpus), str(embeddings["base_url"]), str(embeddings["model"]), embeddings.get("api_key_env")
    )
    return index.search


def web_retriever(web: dict[str, Any]) -> Retriever:
    from toolorchestra.envs.base import Task
    from toolorchestra.tools.base import ToolContext
    from toolorchestra.tools.web_search import WebSearchTool

    tool = WebSearchTool(**web)

    async def retrieve(query: str, top_k: int) -> list[str]:
        result = await tool.run({"query": query}, ToolContext(task=Task(id="search", prompt=query)))
        if result.error:
            raise RuntimeError(result.error)
        return [block for block in result.output.split("\n\n")[1:] if block.strip()][:top_k]

    return retrieve


def make_retriever(options: dict[str, Any], tool: str) -> Retriever:
    """The retriever a paper_search tool's options name (their retrieval keys are removed from `options`)."""
    kind = options.pop("retriever", "bm25")
    corpus = options.pop("corpus", None)
    embeddings = options.pop("embeddings", None)
    web = options.pop("web", None) or {}
    if kind == "web":
        return web_retriever(web)
    if not corpus:
        raise ConfigError(f"tool {tool!r} of type paper_search needs options.corpus (a JSON/JSONL corpus file)")
    if kind == "dense":
        if not isinstance(embeddings, dict):
            raise ConfigError(f"tool {tool!r}: retriever dense needs options.embeddings {{base_url, model}}")
        return dense_retriever(str(corpus), embeddings)
    if kind != "bm25":
        raise ConfigError(f"tool {tool!r}: options.retriever must be bm25, dense or web; got {kind!r}")
    return bm25_retriever(str(corpus))


__all__ = ["DenseIndex", "Retriever", "bm25_retriever", "dense_retriever", "make_retriever", "web_retriever"]
