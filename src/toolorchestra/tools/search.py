"""Local search: BM25 (bm25s) over a JSON/JSONL corpus of {title, text} passages.

The index is built once per corpus file (keyed by its path, size and modification time) and cached on
disk, so later episodes and processes load it in milliseconds. `QueryWriterSearchTool` is the paper's
search tool: a model chosen by label writes the query from the conversation, then BM25 retrieves.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from toolorchestra.backends.pool import ModelPool
from toolorchestra.cache import cache_dir
from toolorchestra.errors import UserError
from toolorchestra.tools.base import Tool, ToolContext, ToolResult
from toolorchestra.tools.llm import LLMTool

QUERY_WRITER_SYSTEM = (
    "Write one short keyword search query that would find the information needed to answer the question. "
    "Reply with the query only."
)


def load_corpus(path: Path) -> list[dict[str, str]]:
    """Passages from a JSON array or JSONL file of objects with `title` and `text`."""
    if not path.exists():
        raise UserError(f"search corpus {path}: file not found")
    raw = path.read_text(encoding="utf-8")
    try:
        records = (
            json.loads(raw)
            if raw.lstrip().startswith("[")
            else [json.loads(line) for line in raw.splitlines() if line.strip()]
        )
    except json.JSONDecodeError as exc:
        raise UserError(f"search corpus {path}: not valid JSON or JSONL ({exc})") from None
    passages = []
    for index, record in enumerate(records):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UserError(
                f"search corpus {path}: passage {index} needs a string field 'text' (and optionally 'title')"
            )
        passages.append({"title": str(record.get("title", "")), "text": record["text"]})
    return passages


class BM25Index:
    """A bm25s index over a corpus file, cached under $TOOLORCHESTRA_CACHE/search/<key>."""

    def __init__(self, corpus_path: Path) -> None:
        import bm25s

        self.corpus_path = corpus_path.resolve()
        self.passages = load_corpus(self.corpus_path)
        index_dir = cache_dir("search") / self._key()
        if (index_dir / "params.index.json").exists():
            self.retriever = bm25s.BM25.load(str(index_dir))
            self.built = False
        else:
            self.retriever = bm25s.BM25()
            texts = [f"{p['title']}\n{p['text']}" for p in self.passages]
            self.retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
            _save_atomically(self.retriever, index_dir)
            self.built = True
        self._lock = threading.Lock()

    def _key(self) -> str:
        stat = self.corpus_path.stat()
        fingerprint = f"{self.corpus_path}|{stat.st_size}|{stat.st_mtime_ns}"
        return hashlib.sha256(fingerprint.encode()).hexdigest()[:16]

    def search(self, query: str, top_k: int) -> list[tuple[dict[str, str], float]]:
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # only stopwords or punctuation: nothing to match
            return []
        k = min(top_k, len(self.passages))
        with self._lock:  # bm25s retrieval is not documented as thread-safe
            ids, scores = self.retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [(self.passages[int(i)], float(s)) for i, s in zip(ids[0], scores[0], strict=True) if float(s) > 0]


def _save_atomically(retriever: Any, index_dir: Path) -> None:
    """Write to a temp dir and rename, so a killed build never leaves a half-written index."""
    staging = Path(tempfile.mkdtemp(dir=index_dir.parent, prefix=".building-"))
    try:
        retriever.save(str(staging), show_progress=False)
        os.replace(staging, index_dir)
    except OSError:  # another process finished first; its index is as good as ours
        shutil.rmtree(staging, ignore_errors=True)


@lru_cache(maxsize=8)
def get_index(corpus_path: str) -> BM25Index:
    return BM25Index(Path(corpus_path))


def format_passages(hits: list[tuple[dict[str, str], float]]) -> str:
    if not hits:
        return "No passages found."
    return "\n\n".join(f"[{rank}] {p['title']}\n{p['text']}" for rank, (p, _) in enumerate(hits, start=1))


class SearchTool(Tool):
    def __init__(self, corpus: str, name: str = "search", description: str | None = None, top_k: int = 3) -> None:
        self.name = name
        self.description = description or "Search a local text corpus; returns the top passages."
        self.corpus = str(Path(corpus).resolve())
        self.top_k = top_k
        self.parameters = {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1, "description": "keywords to search for"}},
            "required": ["query"],
        }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            return ToolResult(error="argument 'query' must be a non-empty string")
        index = await asyncio.to_thread(get_index, self.corpus)
        hits = await asyncio.to_thread(index.search, query, self.top_k)
        return ToolResult(output=format_passages(hits), meta={"titles": [p["title"] for p, _ in hits]})


class QueryWriterSearchTool(LLMTool):
    """Search where a chosen model writes the query (charged at its price), then BM25 retrieves."""

    default_description = "A model writes a search query for the question; returns passages."

    def __init__(
        self,
        corpus: str,
        labels: dict[str, str],
        pool: ModelPool,
        name: str = "search",
        description: str | None = None,
        top_k: int = 3,
        max_tokens: int = 48,
    ) -> None:
        super().__init__(name, description or "", labels, pool, max_tokens)
        self.search_tool = SearchTool(corpus, name=name, top_k=top_k)
        self.parameters = {
            "type": "object",
            "properties": {
                "model": self.label_property(),
                "question": {"type": "string", "description": "what information is needed"},
            },
            "required": ["model"] if len(labels) > 1 else [],
        }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if isinstance(resolved := self.resolve_label(arguments), str):
            return ToolResult(error=resolved)
        label, model = resolved
        question = arguments.get("question") or context.task.prompt
        written = await self.ask(
            label,
            model,
            [{"role": "system", "content": QUERY_WRITER_SYSTEM}, {"role": "user", "content": str(question)}],
        )
        if written.error:
            return written
        query = written.output.strip().splitlines()[0] if written.output.strip() else str(question)
        found = await self.search_tool.run({"query": query}, context)
        written.output = f"Query: {query}\n\n{found.observation()}"
        written.meta = {"query": query, **found.meta}
        return written
