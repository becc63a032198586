"""Log-probabilities of many continuations of many prompts that share a long prefix, computed once each.

A batch of orchestrator prompts over one tool catalog starts with the same system message (agent/prompt.py
puts everything request-specific last), and every prompt is followed by several candidate turns (one per
answer label, or the G sampled turns of a GRPO group). Scoring each (prompt, continuation) row on its own
recomputes that shared prefix and the prompt once per row. Here the work is done in three stages:

1. the prefix common to all prompts, once (batch of 1);
2. each prompt's remainder (its "suffix") over the prefix's KV cache, right-padded;
3. each prompt's continuations packed into one row over its prompt's KV cache (a mask keeps them apart).

Gradients flow through all three stages (the caches are ordinary tensors in the autograd graph), so the
result is the exact log-probability of every continuation under the current weights, the same numbers a
separate full forward per row gives (tests/test_prefix.py checks this). Only the positions whose next
token is scored go through the vocabulary projection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.prefix_cache import common_prefix_length
from toolorchestra.train.grpo import pad

if TYPE_CHECKING:
    import torch


def continuation_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    continuations: Sequence[Sequence[Sequence[int]]],
    pad_id: int,
    temperature: float = 1.0,
) -> list[torch.Tensor]:
    """For prompt i and its continuations j: log p(continuation_ij | prompt_i), summed over its tokens.

    Returns one tensor per prompt of shape [len(continuations[i])], differentiable w.r.t. the model's
    trainable parameters. Every prompt needs at least one continuation and every continuation one token.
    Everything is held in memory at once; `SharedPrefix` scores a large batch chunk by chunk."""
    shared = SharedPrefix(model, prompts, pad_id, detach=False)
    return shared.score(list(range(len(prompts))), continuations, temperature)


class SharedPrefix:
    """The prefix common to `prompts`, run once; then `score` chunks of prompts and their continuations.

    For training on a batch too large for one graph: with `detach=True` the prefix's KV cache enters each
    chunk as a leaf tensor, each chunk's loss is back-propagated on its own (its graph freed), the cache
    leaves collect the gradient of every chunk, and `backward()` finally sends that sum through the prefix
    pass once. The parameter gradients equal those of one loss over the whole batch."""

    def __init__(
        self,
        model: Any,
        prompts: Sequence[Sequence[int]],
        pad_id: int,
        detach: bool = True,
        limit: int | None = None,
        parent: SharedPrefix | None = None,
    ) -> None:
        import torch

        if not prompts or any(len(prompt) < 1 for prompt in prompts):
            raise ValueError("every prompt needs at least one token")
        self.model, self.prompts, self.pad_id = model, [list(prompt) for prompt in prompts], pad_id
        self.base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.device = model.device
        # Each prompt keeps at least one token for stage 2, whose last hidden state predicts the first
        # continuation token; `limit` caps the prefix further (e.g. so that prompt tails stay scoreable).
        self.shared = min(
            common_prefix_length(self.prompts),
            min(len(prompt) for prompt in self.prompts) - 1,
            limit if limit is not None else len(self.prompts[0]),
        )
        # A child prefix starts from its parent's cache (e.g. the system message of a whole step, then one
        # question per child): its pass covers only its own tokens, and its gradient reaches the parent's
        # leaves, which the parent's `backward()` sends on.
        start = 0
        if parent is not None:
            start = parent.shared
            if self.shared < start or any(prompt[:start] != parent.prompts[0][:start] for prompt in self.prompts):
                raise ValueError("a child SharedPrefix's prompts must all start with its parent's prefix")
        self._computed: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._leaves: list[tuple[torch.Tensor, torch.Tensor]] = []
        if parent is not None and self.shared == start:
            self._computed = self._leaves = parent._leaves  # nothing of its own: the parent collects the gradient
        elif self.shared > 0:
            cache = _cache(self.base, parent._leaves if parent is not None and parent._leaves else None)
            self.base.get_decoder()(
                input_ids=torch.tensor([self.prompts[0][start : self.shared]], device=self.device),
                past_key_values=cache,
                use_cache=True,
            )
            self._computed = [(layer.keys, layer.values) for layer in cache.layers]
            if detach:
                self._leaves = [
                    (
                        keys.detach().requires_grad_(keys.requires_grad),
                        values.detach().requires_grad_(values.requires_grad),
                    )
                    for keys, values in self._computed
                ]
            else:
                self._leaves = self._computed

    def backward(self) -> None:
        """Send the gradient the chunks left on the detached cache through the prefix pass."""
        import torch

        pairs = [
            (computed, leaf.grad)
            for computed_pair, leaf_pair in zip(self._computed, self._leaves, strict=True)
            for computed, leaf in zip(computed_pair, leaf_pair, strict=True)
            if computed is not leaf and computed.requires_grad and leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([computed for computed, _ in pairs], [grad for _, grad in pairs])

    def score(
        self,
        indices: Sequence[int],
        continuations: Sequence[Sequence[Sequence[int]]],
        temperature: float = 1.0,
        prompt_tails: Sequence[int] | None = None,
    ) -> list[torch.Tensor]:
        """log p(continuation | prompt) summed over tokens, for prompts `indices` and their continuations.

        With `prompt_tails`, each result gets one more entry at the end: the summed log-prob of the last
        `prompt_tails[k]` tokens of prompt k given the tokens before them (they must lie after the shared
        prefix), e.g. the opening tokens that every continuation starts with."""
        import torch

        if len(indices) != len(continuations):
            raise ValueError(f"{len(indices)} prompts but {len(continuations)} continuation lists")
        if any(not conts or any(not cont for cont in conts) for conts in continuations):
            raise ValueError("every prompt needs at least one non-empty continuation")
        device, shared = self.device, self.shared
        decoder, head = self.base.get_decoder(), self.base.get_output_embeddings()
        rows = len(indices)
        cache = self._prefix_cache(rows)
        # Stage 2: each prompt's remainder, right-padded after the prefix.
        suffix_ids, suffix_mask = pad([self.prompts[i][shared:] for i in indices], self.pad_id, device)
        lengths = suffix_mask.sum(-1)
        attention = torch.cat([torch.ones((rows, shared), dtype=torch.long, device=device), suffix_mask], dim=-1)
        positions = shared + torch.arange(suffix_ids.shape[1], device=device).expand(rows, -1)
        hidden = decoder(
            input_ids=suffix_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )[0]
        last_hidden = hidden[torch.arange(rows, device=device), lengths - 1]  # predicts each continuation's 1st token
        tail_scores = None
        if prompt_tails is not None:
            tail_scores = self._prompt_tail_logprobs(hidden, suffix_ids, lengths, prompt_tails, temperature)
        # Stage 3: every continuation over its prompt's cache, all of one prompt's continuations packed into
        # one row behind it (each attends to the prompt and to its own earlier tokens only), so the prompt's
        # cache is never copied per continuation.
        owners = [row for row, conts in enumerate(continuations) for _ in conts]
        flat = [list(cont) for conts in continuations for cont in conts]
        owner_index = torch.tensor(owners, device=device)
        first_ids = torch.tensor([cont[0] for cont in flat], device=device)
        first_logits = head(last_hidden[owner_index]).float() / temperature
        scores = torch.log_softmax(first_logits, -1).gather(-1, first_ids.unsqueeze(-1)).squeeze(-1)
        if any(len(cont) > 1 for cont in flat):
            scores = scores + self._packed_tails(
                decoder, head, cache, attention, shared + lengths, continuations, temperature
            )
        results, start = [], 0
        for row, conts in enumerate(continuations):
            result = scores[start : start + len(conts)]
            if tail_scores is not None:
                result = torch.cat([result, tail_scores[row : row + 1]])
            results.append(result)
            start += len(conts)
        return results

    def _packed_tails(
        self,
        decoder: Any,
        head: Any,
        cache: Any,
        attention: torch.Tensor,
        prompt_lengths: torch.Tensor,
        continuations: Sequence[Sequence[Sequence[int]]],
        temperature: float,
    ) -> torch.Tensor:
        """log p(tokens 2.. of each continuation), one entry per continuation in order, from one pass per
        prompt row that packs its continuations' inputs (all tokens but the last) side by side."""
        import torch

        device, rows = self.device, len(continuations)
        packed = [[token for cont in conts for token in cont[:-1]] for conts in continuations]
        width = max(len(tokens) for tokens in packed)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        offsets = torch.zeros((rows, width), dtype=torch.long)  # position within its continuation
        segment = torch.full((rows, width), -1, dtype=torch.long)  # which continuation (flat index); -1 = pad
        targets = torch.zeros((rows, width), dtype=torch.long)
        flat_index = 0
        for row, conts in enumerate(continuations):
            column = 0
            for cont in conts:
                span = len(cont) - 1
                ids[row, column : column + span] = torch.tensor(cont[:-1], dtype=torch.long)
                targets[row, column : column + span] = torch.tensor(cont[1:], dtype=torch.long)
                offsets[row, column : column + span] = torch.arange(span)
                segment[row, column : column + span] = flat_index
                column += span
                flat_index += 1
        ids, offsets, segment, targets = ids.to(device), offsets.to(device), segment.to(device), targets.to(device)
        # the prompt's valid tokens for every query, then its own continuation's tokens up to itself
        own = (segment.unsqueeze(-1) == segment.unsqueeze(-2)) & (segment.unsqueeze(-1) >= 0)
        causal = torch.ones((width, width), dtype=torch.bool, device=device).tril()
        mask = torch.cat([attention.bool().unsqueeze(1).expand(-1, width, -1), own & causal], dim=-1).unsqueeze(1)
        positions = prompt_lengths.unsqueeze(-1) + offsets
        hidden = decoder(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
        )[0]
        scored = segment >= 0
        logits = head(hidden[scored]).float() / temperature
        values = torch.log_softmax(logits, -1).gather(-1, targets[scored].unsqueeze(-1)).squeeze(-1)
        total = sum(len(conts) for conts in continuations)
        return torch.zeros(total, dtype=values.dtype, device=device).index_add(0, segment[scored], values)

    def _prompt_tail_logprobs(
        self,
        hidden: torch.Tensor,
        suffix_ids: torch.Tensor,
        lengths: torch.Tensor,
        tails: Sequence[int],
        temperature: float,
    ) -> torch.Tensor:
        import torch

        head = self.base.get_output_embeddings()
        sums = []
        for row, count in enumerate(tails):
            length = int(lengths[row])
            if count <= 0:
                sums.append(hidden.new_zeros((), dtype=torch.float32))
                continue
            if count >= length:
                raise ValueError(f"prompt tail of {count} tokens reaches into the shared prefix")
            logits = head(hidden[row, length - count - 1 : length - 1]).float() / temperature
            targets = suffix_ids[row, length - count : length]
            sums.append(torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).sum())
        return torch.stack(sums)

    def _prefix_cache(self, rows: int) -> Any:
        data = [(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)) for keys, values in self._leaves]
        return _cache(self.base, data or None)


def _cache(base: Any, layers: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None) -> Any:
    """A KV cache for `base`: empty, or holding `layers` (keys, values per layer)."""
    from transformers import DynamicCache

    if layers is None:
        return DynamicCache(config=base.config)
    return DynamicCache(ddp_cache_data=list(layers), config=base.config)


def prefix_token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    min_shared: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`grpo.token_logprobs` for right-padded rows that share a long prompt prefix (a ToolScale domain's policy
    and tool schemas: thousands of tokens before each row's own question and turns).

    The shared prefix runs once, without gradient, and every row's remainder runs over its KV cache. The
    log-probs are the same numbers as a full pass per row; the gradient is not: nothing flows into the
    prefix's keys and values (a stop-gradient through the fixed prompt), the price of not back-propagating
    through thousands of prompt tokens per row. Rows that share fewer than `min_shared` tokens before the
    first scored token fall back to the full pass."""
    import torch

    from toolorchestra.train.grpo import _logprobs_of, scatter, token_logprobs

    rows, width = input_ids.shape
    lengths = attention_mask.sum(-1).tolist()
    scored = mask.bool()
    first_scored = [int(row.nonzero()[0]) if row.any() else width - 1 for row in scored]
    sequences = [input_ids[row, : lengths[row]].tolist() for row in range(rows)]
    shared = min(common_prefix_length(sequences), min(first_scored), min(lengths) - 1)
    if shared < min_shared:
        return token_logprobs(model, input_ids, attention_mask, temperature, with_entropy=with_entropy, mask=mask)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder, head = base.get_decoder(), base.get_output_embeddings()
    with torch.no_grad():
        cache = _cache(base)
        decoder(input_ids=input_ids[:1, :shared], past_key_values=cache, use_cache=True)
        layers = [
            (layer.keys.expand(rows, -1, -1, -1), layer.values.expand(rows, -1, -1, -1)) for layer in cache.layers
        ]
    cache = _cache(base, layers)
    attention = torch.cat(
        [
            torch.ones((rows, shared), dtype=attention_mask.dtype, device=attention_mask.device),
            attention_mask[:, shared:],
        ],
        dim=-1,
    )
    positions = torch.arange(shared, width, device=input_ids.device).expand(rows, -1)
    hidden = decoder(
        input_ids=input_ids[:, shared:],
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    )[0][:, :-1]
    selected = scored[:, shared:]
    values, entropy = _logprobs_of(
        head(hidden[selected]), input_ids[:, shared + 1 :][selected], temperature, with_entropy
    )
    # no position before `shared` is scored, so scattering over all of `scored` fills the same places
    return scatter(scored, values), None if entropy is None else scatter(scored, entropy)
