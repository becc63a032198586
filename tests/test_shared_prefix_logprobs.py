"""prefix_token_logprobs: the same per-token log-probs (and entropies) as a full pass per row, with the shared
prompt prefix run once; gradients still reach the parameters through every row's own tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import tiny_llama, tiny_tokenizer  # noqa: E402
from toolorchestra.train.grpo import token_logprobs  # noqa: E402
from toolorchestra.train.prefix import prefix_token_logprobs  # noqa: E402


def _batch(prefix_len: int, own: list[list[int]], scored_from: int):
    rows = [[(7 * i) % 300 + 3 for i in range(prefix_len)] + tail for tail in own]
    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    attention = torch.zeros_like(ids)
    mask = torch.zeros((len(rows), width - 1))
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor(row)
        attention[r, :len(row)] = 1
        mask[r, scored_from - 1:len(row) - 1] = 1  # score every token from position scored_from on
        mask[r, prefix_len + 2] = 0  # a masked-out token (a tool output) inside the row's own part
    return ids, attention, mask


def test_same_logprobs_and_entropy_as_the_full_pass() -> None:
    model = tiny_llama(tiny_tokenizer())
    ids, attention, mask = _batch(80, [[5, 6, 7, 8, 9, 10], [5, 6, 40, 41], [12, 13, 14, 15, 16, 17, 18]], 82)
    want, want_entropy = token_logprobs(model, ids, attention, with_entropy=True, mask=mask)
    got, got_entropy = prefix_token_logprobs(model, ids, attention, mask, with_entropy=True, min_shared=16)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_entropy, want_entropy, rtol=1e-4, atol=1e-5)
    assert (got[mask == 0] == 0).all()


def test_gradient_reaches_the_weights() -> None:
    model = tiny_llama(tiny_tokenizer())
    model.train()
    ids, attention, mask = _batch(80, [[5, 6, 7, 8, 9], [5, 6, 40, 41, 42]], 82)
    got, _ = prefix_token_logprobs(model, ids, attention, mask, min_shared=16)
    (got * mask).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)


def test_short_shared_prefix_falls_back_to_the_full_pass() -> None:
    model = tiny_llama(tiny_tokenizer())
    ids, attention, mask = _batch(10, [[5, 6, 7, 8], [9, 6, 40, 41]], 12)
    want, _ = token_logprobs(model, ids, attention, mask=mask)
    got, _ = prefix_token_logprobs(model, ids, attention, mask, min_shared=64)
    torch.testing.assert_close(got, want)
