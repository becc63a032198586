"""BM25 search over a local corpus: retrieval, the on-disk index cache, bad corpora."""

from __future__ import annotations

import json

import pytest

from toolorchestra.envs.base import Task
from toolorchestra.errors import UserError
from toolorchestra.tools.base import ToolContext
from toolorchestra.tools.search import BM25Index, SearchTool

PASSAGES = [
    {"title": "Teutberga", "text": "Teutberga was a queen of Lotharingia by marriage to Lothair II."},
    {"title": "Python (language)", "text": "Python is a programming language created by Guido van Rossum."},
    {"title": "Saturn", "text": "Saturn is the sixth planet from the Sun and has prominent rings."},
]

CONTEXT = ToolContext(task=Task(id="s", prompt="q"))


async def test_search_returns_the_relevant_passage_and_caches_the_index(tmp_path, isolated_cache):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in PASSAGES))
    tool = SearchTool(str(corpus), top_k=2)
    result = await tool.run({"query": "which planet has rings"}, CONTEXT)
    assert result.error is None
    assert result.meta["titles"][0] == "Saturn"
    assert BM25Index(corpus).built is False  # a second index loads from the cache dir
    assert any((isolated_cache / "search").iterdir())


async def test_search_over_the_shared_wikipedia_corpus(shared_data, isolated_cache):
    tool = SearchTool(str(shared_data / "corpus" / "2wikimultihopqa_corpus.json"), top_k=3)
    result = await tool.run({"query": "Teutberga queen of Lotharingia"}, CONTEXT)
    assert result.meta["titles"][0] == "Teutberga"
    assert result.output.startswith("[1] Teutberga")


async def test_bad_queries_and_corpora(tmp_path, isolated_cache):
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(PASSAGES))
    tool = SearchTool(str(corpus))
    assert "non-empty string" in (await tool.run({}, CONTEXT)).error
    assert (await tool.run({"query": "the of and"}, CONTEXT)).output == "No passages found."
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"title": "no text"}]))
    with pytest.raises(UserError, match="passage 0 needs a string field 'text'"):
        BM25Index(bad)
    with pytest.raises(UserError, match="file not found"):
        BM25Index(tmp_path / "absent.json")


async def test_query_writer_search_charges_the_writer_model(tmp_path, isolated_cache):
    from toolorchestra.backends.base import Backend, Completion, Usage
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.catalog.schema import ModelSpec, Price
    from toolorchestra.tools.search import QueryWriterSearchTool

    class FakeWriterBackend(Backend):
        """Test fake: always writes the same query."""

        async def complete(self, messages, tools=None, **_):
            return Completion(text="planet rings\nextra line", usage=Usage(prompt_tokens=400, completion_tokens=5),
                              latency_s=0.2)

    spec = ModelSpec(name="writer", backend={"type": "local"}, price=Price(input_per_m=0.5, output_per_m=2.0))
    pool = ModelPool([spec], backends={"writer": FakeWriterBackend()})
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(PASSAGES))
    tool = QueryWriterSearchTool(str(corpus), labels={"search-1": "writer"}, pool=pool)
    result = await tool.run({"question": "Which planet has rings?"}, CONTEXT)
    assert result.meta["query"] == "planet rings"
    assert result.meta["titles"][0] == "Saturn"
    assert (result.model, result.label) == ("writer", "search-1")
    assert result.cost_usd == pytest.approx(400 * 0.5e-6 + 5 * 2e-6)
    assert result.latency_s == pytest.approx(0.2)
