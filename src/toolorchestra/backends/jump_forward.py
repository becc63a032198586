"""Jump-forward decoding of a guided call: text the grammar forces, or that the last call predicts, costs one
forward pass instead of one per token.

A routing call is mostly fixed text: `<tool_call>\n{"name": "answer", "arguments": {"model": "` before the
label and `"}}\n</tool_call>` after it. Plain decoding runs the model once per token of it. Here every pass
feeds, after the pending token, a draft: the text the grammar forces next, then a guess at what follows it,
the rest of the last call decoded under the same grammar from where its text matches the end of this one
(prompt-lookup drafting; a router's calls differ only in the label, so the guess also covers the whitespace
the grammar leaves open). Position i's logits, masked by the grammar exactly as `GuidedLogitsProcessor`
masks them, must pick draft token i; at the first that does not, the model's own pick is kept and the rest
of the draft is dropped from the KV cache. Every token is therefore the one greedy guided decoding picks
(the draft only decides which tokens are computed in one pass), and a call whose label is the last call's
takes one pass. Greedy only, one row at a time: a sampled token has no single right answer to check a
draft against.

Imported only by the local backend, so torch and xgrammar load here at module level.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
import xgrammar as xgr

from toolorchestra.backends.guided import keep_closing_near_limit

MAX_DRAFT_TOKENS = 64  # a longer guess costs more in a pass than it is likely to save
MATCH_CHARS = 32  # the longest end of the text so far looked up in the last call


class CallDrafts:
    """The text of the last call decoded under each grammar (the most recent `keep` grammars), to draft from."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        # keyed by id(grammar); the grammar is kept with its text, so its id cannot be reused meanwhile
        self._texts: OrderedDict[int, tuple[xgr.CompiledGrammar, str]] = OrderedDict()

    def last(self, grammar: xgr.CompiledGrammar) -> str:
        entry = self._texts.get(id(grammar))
        return entry[1] if entry is not None and entry[0] is grammar else ""

    def remember(self, grammar: xgr.CompiledGrammar, text: str) -> None:
        self._texts[id(grammar)] = (grammar, text)
        self._texts.move_to_end(id(grammar))
        while len(self._texts) > self.keep:
            self._texts.popitem(last=False)


def continuation(previous: str, text: str) -> str:
    """What followed, in `previous`, the last occurrence of the longest end of `text` (at most MATCH_CHARS)."""
    for length in range(min(len(text), MATCH_CHARS), 0, -1):
        found = previous.rfind(text[-length:])
        if found >= 0:
            return previous[found + length :]
    return ""


def greedy_guided_decode(
    model: Any,
    tokenizer: Any,
    grammar: xgr.CompiledGrammar,
    prompt_ids: list[int],
    limit: int,
    closing_ids: torch.Tensor,
    *,
    cache: Any = None,
    cached_tokens: int = 0,
    cancelled: Callable[[], bool] = lambda: False,
    drafts: CallDrafts | None = None,
) -> list[int]:
    """The generated ids of one guided row, greedy, at most `limit`, up to and including the stop token.

    `cache` holds the KV of `prompt_ids[:cached_tokens]` (a prefix cache's), or is None."""
    from transformers import DynamicCache

    matcher = xgr.GrammarMatcher(grammar)
    vocab = model.config.vocab_size
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    kv = cache if cache is not None else DynamicCache(config=model.config)
    in_cache = cached_tokens if cache is not None else 0
    pending = list(prompt_ids[in_cache:])  # fed to the next pass: not yet in the KV cache
    generated: list[int] = []
    while len(generated) < limit and not matcher.is_terminated() and not cancelled():
        draft = _draft(matcher, tokenizer, generated, drafts.last(grammar) if drafts else "", limit - len(generated))
        logits = _forward(model, kv, pending + draft, in_cache)
        # The logits at the last pending token pick the first new token; each draft token's, the next one.
        position = len(pending) - 1
        confirmed = 0
        while len(generated) < limit and not matcher.is_terminated():
            token = _pick(matcher, bitmask, logits[position], len(generated), limit, closing_ids)
            generated.append(token)
            if confirmed < len(draft) and token == draft[confirmed]:
                confirmed += 1
                position += 1
                continue
            break
        in_cache += len(pending) + confirmed
        kv.crop(in_cache)  # drop the draft tokens the model did not confirm
        pending = generated[-1:]  # the last pick is not in the cache yet
    if drafts is not None and matcher.is_terminated():
        drafts.remember(grammar, tokenizer.decode(generated, skip_special_tokens=True))
    return generated


def _draft(matcher: xgr.GrammarMatcher, tokenizer: Any, generated: list[int], previous: str, room: int) -> list[int]:
    """The tokens of the text the grammar forces next, then the last call's continuation after it; at most
    `room - 1` (the pass that checks them also picks the token after them) and MAX_DRAFT_TOKENS."""
    if room <= 1:
        return []
    forced = matcher.find_jump_forward_string()
    guess = continuation(previous, tokenizer.decode(generated, skip_special_tokens=True) + forced) if previous else ""
    if not forced and not guess:
        return []
    return list(tokenizer(forced + guess, add_special_tokens=False)["input_ids"])[: min(room - 1, MAX_DRAFT_TOKENS)]


def _forward(model: Any, kv: Any, ids: list[int], start: int) -> torch.Tensor:
    """Logits (float32) of every position of `ids`, fed after the `start` tokens already in `kv`."""
    with torch.inference_mode():
        output = model(
            input_ids=torch.tensor([ids], device=model.device),
            past_key_values=kv,
            use_cache=True,
            position_ids=torch.arange(start, start + len(ids), device=model.device).unsqueeze(0),
        )
    return output.logits[0].float()


def _pick(
    matcher: xgr.GrammarMatcher,
    bitmask: torch.Tensor,
    logits: torch.Tensor,
    generated: int,
    limit: int,
    closing_ids: torch.Tensor,
) -> int:
    """Greedy under the grammar, with GuidedLogitsProcessor's rule near the limit (closing tokens first); the
    token picked is accepted by `matcher`."""
    scores = logits.unsqueeze(0).clone()
    matcher.fill_next_token_bitmask(bitmask, 0)
    xgr.apply_token_bitmask_inplace(scores, bitmask.to(scores.device))
    if len(closing_ids):
        keep_closing_near_limit(scores, 0, limit, generated, closing_ids.to(scores.device))
    token = int(scores[0].argmax())
    if not matcher.accept_token(token):  # the mask allowed it: only a broken grammar gets here
        raise RuntimeError(f"the grammar refused token {token} it allowed")
    return token
