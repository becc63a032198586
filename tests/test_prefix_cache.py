"""PrefixCache: a miss reuses the longest start shared with a cached prefix; the KV it returns equals a
fresh computation of the whole prefix (tiny random llama, in process)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import tiny_llama, tiny_tokenizer  # noqa: E402
from toolorchestra.backends.prefix_cache import MIN_SHARED_TOKENS, PrefixCache  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return tiny_llama(tiny_tokenizer())


def _fresh(model, prefix):
    return PrefixCache().shared_layers(model, tuple(prefix))


def _close(got, want) -> None:
    assert len(got) == len(want)
    for (k1, v1), (k2, v2) in zip(got, want):
        assert k1.shape == k2.shape
        torch.testing.assert_close(k1, k2, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(v1, v2, rtol=1e-5, atol=1e-5)


def test_a_miss_extends_the_longest_shared_start(model) -> None:
    base = [(7 * i) % 300 + 3 for i in range(MIN_SHARED_TOKENS + 40)]
    cache = PrefixCache()
    cache.shared_layers(model, tuple(base))
    longer = base + [11, 12, 13, 14]
    got = cache.shared_layers(model, tuple(longer))
    assert cache.tokens_saved == len(base)  # only the 4 new tokens ran
    _close(got, _fresh(model, longer))


def test_a_sibling_prefix_reuses_the_common_part(model) -> None:
    system = [(5 * i) % 300 + 3 for i in range(MIN_SHARED_TOKENS + 10)]
    cache = PrefixCache()
    cache.shared_layers(model, tuple(system + [20, 21, 22]))
    sibling = system + [30, 31]
    got = cache.shared_layers(model, tuple(sibling))
    assert cache.tokens_saved == len(system)
    _close(got, _fresh(model, sibling))


def test_a_start_of_a_cached_prefix_is_a_view_without_a_forward(model, monkeypatch) -> None:
    long = [(3 * i) % 300 + 3 for i in range(MIN_SHARED_TOKENS + 30)]
    cache = PrefixCache()
    cache.shared_layers(model, tuple(long))
    short = long[: MIN_SHARED_TOKENS + 5]
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("no forward pass expected"))
    got = cache.shared_layers(model, tuple(short))
    monkeypatch.undo()
    _close(got, _fresh(model, short))


def test_short_overlaps_are_not_reused(model) -> None:
    cache = PrefixCache()
    cache.shared_layers(model, tuple(range(3, 3 + MIN_SHARED_TOKENS + 5)))
    other = list(range(3, 3 + MIN_SHARED_TOKENS - 1)) + [299] * 10
    _close(cache.shared_layers(model, tuple(other)), _fresh(model, other))
    assert cache.tokens_saved == 0


def test_keep_bounds_the_entries(model) -> None:
    cache = PrefixCache(keep=2)
    for start in (3, 50, 100):
        cache.shared_layers(model, tuple(range(start, start + MIN_SHARED_TOKENS + 1)))
    assert len(cache._entries) == 2
