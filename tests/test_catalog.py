"""Catalog validation errors and price arithmetic."""

from __future__ import annotations

import pytest

from toolorchestra.catalog import Price, load_catalog
from toolorchestra.catalog.schema import LatencyPrior
from toolorchestra.errors import ConfigError

GOOD = """
orchestrator: orch
models:
  - name: orch
    backend: {type: local, path: smollm2-135m}
  - name: big
    backend: {type: openai, base_url: "http://127.0.0.1:8000/v1", model: gpt-x, api_key_env: BIG_KEY}
    price: {input_per_m: 1.25, output_per_m: 10.0, per_call: 0.001}
    latency: {overhead_s: 1.0, output_tokens_per_s: 100}
tools:
  - {name: python, type: python}
  - name: reasoner
    type: llm
    models: {reasoner-1: big, reasoner-2: orch}
  - {name: answer, type: answer}
"""


def write(tmp_path, text: str):
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    return path


def test_good_catalog_loads(tmp_path):
    catalog = load_catalog(write(tmp_path, GOOD))
    assert catalog.orchestrator == "orch"
    assert catalog.model("big").backend.type == "openai"
    assert catalog.tools[1].models == {"reasoner-1": "big", "reasoner-2": "orch"}


@pytest.mark.parametrize(
    "broken, expected",
    [
        (GOOD.replace("input_per_m: 1.25", "input_per_m: -1"), "models.1.price.input_per_m"),
        (GOOD.replace("type: openai, base_url: \"http://127.0.0.1:8000/v1\", ", "type: openai, "), "base_url"),
        (GOOD.replace("type: local", "type: carrier-pigeon"), "models.0.backend"),
        (GOOD.replace("reasoner-1: big", "reasoner-1: nope"), "'nope'"),
        (GOOD.replace("orchestrator: orch", "orchestrator: ghost"), "orchestrator 'ghost'"),
        (GOOD.replace("{name: python, type: python}", "{name: python, type: python, colour: red}"), "tools.0.colour"),
        (GOOD.replace("    models: {reasoner-1: big, reasoner-2: orch}\n", ""), "needs a 'models' map"),
        ("just a string", "expected a mapping"),
        ("models: [", "not valid YAML"),
    ],
)
def test_bad_catalog_names_file_and_field(tmp_path, broken, expected):
    path = write(tmp_path, broken)
    with pytest.raises(ConfigError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_catalog(tmp_path / "absent.yaml")


def test_price_arithmetic_against_hand_computed_values():
    price = Price(input_per_m=1.25, output_per_m=10.0, per_call=0.001)
    # 2,000 prompt tokens at $1.25/M = $0.0025; 300 completion tokens at $10/M = $0.003; plus $0.001.
    assert price.cost(2000, 300) == pytest.approx(0.0065, abs=1e-12)
    assert price.cost(0, 0) == pytest.approx(0.001)
    assert Price().cost(10**6, 10**6) == 0.0
    # GPT-4-turbo list price ($10 in / $30 out per 1M): 1,234 in + 567 out = 0.01234 + 0.01701.
    assert Price(input_per_m=10, output_per_m=30).cost(1234, 567) == pytest.approx(0.02935, abs=1e-12)
    assert price.scaled(2.0).cost(2000, 300) == pytest.approx(0.013, abs=1e-12)


def test_latency_prior():
    assert LatencyPrior(overhead_s=1.0, output_tokens_per_s=100).seconds(250) == pytest.approx(3.5)


def test_shipped_pool_configs_validate():
    from pathlib import Path

    configs = sorted((Path(__file__).resolve().parents[1] / "configs" / "pools").glob("*.yaml"))
    assert configs
    for path in configs:
        catalog = load_catalog(path)
        assert catalog.model(catalog.orchestrator)


def test_default_catalog_offers_search_only_with_a_corpus(tmp_path, monkeypatch):
    from toolorchestra.catalog import default_catalog

    monkeypatch.chdir(tmp_path)  # no ../shared here
    assert [t.name for t in default_catalog().tools] == ["python", "expert", "answer"]
    corpus = tmp_path / "c.json"
    corpus.write_text("[]")
    assert [t.name for t in default_catalog(corpus).tools] == ["python", "search", "expert", "answer"]
    with pytest.raises(ConfigError, match="--corpus"):
        default_catalog(tmp_path / "absent.json")
