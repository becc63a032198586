"""The continuous decoder (backends/continuous.py): packed attention equals per-row SDPA, the episode store keeps
the longest start within its byte budget, and on SmolLM2 concurrent multi-turn episodes that come and go decode
token for token what one-request-at-a-time decoding gives, reusing each episode's KV from its previous turn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xgrammar")

from toolorchestra.backends.continuous import EpisodeKV, OwnKV, PackedRows, Row, RowSpec, SharedPrefix  # noqa: E402


def _row(own_keys: torch.Tensor, own_values: torch.Tensor, filled: int, prefix: SharedPrefix | None) -> Row:
    own = OwnKV([own_keys.clone()], [own_values.clone()], list(range(filled)))
    return Row(RowSpec([], 1, None, lambda: False), prefix, own, [], None, None)


def test_packed_attention_equals_sdpa_over_prefix_and_own_tokens() -> None:
    """Three rows (two behind one shared prefix, one with none) feeding 4, 1 and 6 tokens after 5, 9 and 0 own
    tokens: each row's output is SDPA's over [prefix][own so far][this pass], causal, with grouped heads."""
    torch.manual_seed(0)
    kv_heads, groups, dim, prefix_length = 2, 3, 8, 7
    prefix = SharedPrefix(
        (prefix_length, 1), [torch.randn(kv_heads, prefix_length, dim)], [torch.randn(kv_heads, prefix_length, dim)]
    )
    filled, fed, prefixes = [5, 9, 0], [4, 1, 6], [prefix, prefix, None]
    capacity = 32
    stored = [(torch.randn(kv_heads, capacity, dim), torch.randn(kv_heads, capacity, dim)) for _ in filled]
    rows = [_row(k, v, n, p) for (k, v), n, p in zip(stored, filled, prefixes, strict=True)]
    packed = PackedRows(rows, [[0] * n for n in fed])
    total = sum(fed)
    query = torch.randn(1, kv_heads * groups, total, dim)
    key, value = torch.randn(1, kv_heads, total, dim), torch.randn(1, kv_heads, total, dim)
    out = packed.attend(0, query, key, value, dim**-0.5)
    assert out.shape == (1, total, kv_heads * groups, dim)
    start = 0
    for (own_keys, own_values), n, f, p in zip(stored, filled, fed, prefixes, strict=True):
        keys = torch.cat([own_keys[:, :n], key[0, :, start : start + f]], 1)
        values = torch.cat([own_values[:, :n], value[0, :, start : start + f]], 1)
        if p is not None:
            keys, values = torch.cat([p.keys[0], keys], 1), torch.cat([p.values[0], values], 1)
        seen = keys.shape[1]
        allowed = torch.ones(f, seen, dtype=torch.bool).tril(seen - f)  # query i sees keys up to its own position
        want = torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start : start + f], keys[None], values[None], attn_mask=allowed, enable_gqa=True
        )
        torch.testing.assert_close(out[0, start : start + f], want[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
        start += f


def _own(tokens: list[int], positions: int = 4) -> OwnKV:
    return OwnKV([torch.zeros(1, positions, 2)], [torch.zeros(1, positions, 2)], tokens)


def test_episode_store_gives_the_longest_start_once_and_evicts_least_recent() -> None:
    entry_bytes = _own([1]).nbytes
    store = EpisodeKV(budget_bytes=2 * entry_bytes)
    store.put((5, 1), _own([1, 2, 3]))
    store.put((5, 1), _own([1, 2, 9]))
    assert store.take((6, 1), [1, 2, 3, 4]) == (0, None)  # another prefix: nothing
    reused, own = store.take((5, 1), [1, 2, 3, 4])
    assert reused == 3 and own is not None and own.tokens == [1, 2, 3]
    assert store.take((5, 1), [1, 2, 3, 4])[0] == 2  # taken entries are gone; the other shares two tokens
    reused, own = store.take((5, 1), [7])
    assert reused == 0  # at most all but the last token: a prompt's last token is always fed
    store.put((5, 1), _own([1]))
    store.put((5, 1), _own([2]))
    store.put((5, 1), _own([3]))  # over budget: the least recent goes
    assert len(store) == 2 and store.take((5, 1), [1, 0])[0] == 0 and store.take((5, 1), [2, 0])[0] == 1


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "answer", "description": "Final answer", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}},
]
SYSTEM = "You are a careful assistant. Call one tool per turn, then answer with the answer tool. " * 6
QUESTIONS = ["What is the weather in Paris?", "Tell me the weather in Oslo today.", "Is it raining in Lima?",
             "How hot is Cairo right now?"]


async def _episode(backend: Any, question: str, delay: float, turns: int) -> list[tuple[Any, ...]]:
    await asyncio.sleep(delay)  # episodes start while others decode: they join a running decoder
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    said = []
    for turn in range(turns):
        completion = await backend.complete(messages, TOOLS, max_tokens=48 if turn else 64)
        calls = completion.tool_calls
        said.append((completion.text, [(c.name, c.arguments) for c in calls], completion.call_errors,
                     completion.usage.completion_tokens, completion.usage.prompt_tokens))
        if not calls:
            messages += [{"role": "assistant", "content": completion.text}, {"role": "user", "content": "Use a tool."}]
            continue
        messages.append({"role": "assistant", "content": completion.text, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
            for c in calls]})
        messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": f"{turn}: sunny, {20 + turn} C"})
    return said


def test_continuous_decoding_is_token_identical_and_reuses_each_episodes_kv() -> None:
    from toolorchestra.backends.local import LocalBackend, _LoadedModel, load_hf_model
    from toolorchestra.catalog.schema import LocalBackendSpec

    torch.set_num_threads(1)
    model, tokenizer = load_hf_model("smollm2-135m")
    said, loaded = {}, {}
    for continuous in (False, True):
        backend = LocalBackend(LocalBackendSpec(continuous_batching=continuous))
        backend._loaded = loaded[continuous] = _LoadedModel(model, tokenizer)

        async def play(backend: LocalBackend = backend) -> list[Any]:
            return await asyncio.gather(*[_episode(backend, q, 0.4 * i, 3) for i, q in enumerate(QUESTIONS)])

        said[continuous] = asyncio.run(play())
    assert said[True] == said[False]
    assert all(turn[1] for episode in said[True] for turn in episode)  # the guided calls came out
    stats = loaded[True].decode_stats
    assert stats.rows == 3 * len(QUESTIONS)
    prompt_tokens = sum(turn[4] for episode in said[True] for turn in episode)
    assert stats.prefill_computed + stats.prefill_from_episode + stats.prefill_from_prefix == prompt_tokens
    # later turns take the system prompt from the shared prefix and their history from their previous turn
    assert stats.prefill_from_episode > 0 and stats.prefill_from_prefix > 0
    assert stats.prefill_computed < prompt_tokens / 4, stats
    assert stats.drafted > 0
    assert loaded[False].decode_stats is None  # the old path never reached the continuous decoder


def test_a_bad_tool_schema_fails_its_request_alone() -> None:
    from toolorchestra.backends.local import LocalBackend
    from toolorchestra.backends.schema_check import SchemaError
    from toolorchestra.catalog.schema import LocalBackendSpec

    backend = LocalBackend(LocalBackendSpec())
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "strnig"}}}}}]

    async def both() -> list[Any]:
        messages = [{"role": "user", "content": "Weather in Rome?"}]
        return await asyncio.gather(backend.complete(messages, bad, max_tokens=32),
                                    backend.complete(messages, TOOLS, max_tokens=48), return_exceptions=True)

    failed, good = asyncio.run(both())
    assert isinstance(failed, SchemaError) and "strnig" in str(failed)
    assert not isinstance(good, BaseException) and good.tool_calls


def test_a_model_that_fails_to_load_fails_each_greedy_request_clearly(tmp_path: Any) -> None:
    """A greedy request goes to the continuous decoder's thread, which loads the model: a load error reaches the
    caller as the user error it is, and the caller does not wait forever."""
    from toolorchestra.backends.local import LocalBackend
    from toolorchestra.catalog.schema import LocalBackendSpec
    from toolorchestra.errors import UserError

    backend = LocalBackend(LocalBackendSpec(path=str(tmp_path / "missing.gguf")))

    async def ask() -> Any:
        return await asyncio.wait_for(backend.complete([{"role": "user", "content": "hi"}], max_tokens=4), 60)

    with pytest.raises(UserError, match="GGUF file not found"):
        asyncio.run(ask())
