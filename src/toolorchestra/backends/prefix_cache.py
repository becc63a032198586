"""Prompt-prefix caching for local generation: the KV cache of a prompt prefix that many requests share.

Every orchestrator request over one tool catalog starts with the same system message (agent/prompt.py puts
the request-specific question and preference last), typically hundreds of tokens. `PrefixCache` keeps the
KV cache of the most recent shared prefixes, so a batch pays only for its rows' own suffixes; the rows are
then laid out as [shared prefix][padding][own suffix] with the padding masked out and positions counted from
the attention mask, which gives each row exactly the positions it would have alone.
Only for models whose weights do not change while they serve (not the policy being trained).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    Layers = list[tuple[torch.Tensor, torch.Tensor]]  # a prefix's (keys, values) per layer

MIN_SHARED_TOKENS = 64  # below this a shared prefix is not worth a separate pass
KEEP = 4  # distinct prefixes remembered (tool catalogs in use at once)


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix all `sequences` share."""
    if not sequences:
        return 0
    first = sequences[0]
    length = min(len(sequence) for sequence in sequences)
    for index in range(length):
        token = first[index]
        if any(sequence[index] != token for sequence in sequences):
            return index
    return length


class PrefixCache:
    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._entries: OrderedDict[tuple[int, ...], Layers] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.tokens_saved = 0
        self.tokens_computed = 0  # prefix tokens run through the model on a miss
        self.attention_flops = 0  # of those runs' causal attention (scores and weighted sums)

    def layout(
        self, model: Any, prompts: Sequence[Sequence[int]], pad_id: int
    ) -> tuple[torch.Tensor, torch.Tensor, Any] | None:
        """(input_ids, attention_mask, past_key_values) for `generate` with the rows' shared prefix cached,
        or None when they share fewer than MIN_SHARED_TOKENS tokens."""
        import torch
        from transformers import DynamicCache

        shared = min(common_prefix_length(prompts), min(len(prompt) for prompt in prompts) - 1)
        if shared < MIN_SHARED_TOKENS:
            return None
        layers = self.shared_layers(model, tuple(prompts[0][:shared]))
        width = max(len(prompt) - shared for prompt in prompts)
        ids, mask = [], []
        for prompt in prompts:
            own = list(prompt[shared:])
            padding = width - len(own)
            ids.append(list(prompt[:shared]) + [pad_id] * padding + own)
            mask.append([1] * shared + [0] * padding + [1] * len(own))
        rows = len(prompts)
        cache = DynamicCache(
            ddp_cache_data=[
                (keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)) for keys, values in layers
            ],
            config=model.config,
        )
        self.tokens_saved += shared * rows
        return torch.tensor(ids), torch.tensor(mask), cache

    def longest_cached(self, prompt: Sequence[int]) -> tuple[int, Layers] | None:
        """(length, per-layer views) of the longest cached start of `prompt`, at least MIN_SHARED_TOKENS and
        at most all but its last token; None when no cached prefix starts it."""
        best, layers = 0, None
        with self._lock:
            for key, entry in self._entries.items():
                common = common_prefix_length((key, prompt[: len(prompt) - 1]))
                if common > best:
                    best, layers = common, entry
            if layers is None or best < MIN_SHARED_TOKENS:
                return None
            self.hits += 1
        return best, [(keys[:, :, :best], values[:, :, :best]) for keys, values in layers]

    def shared_layers(self, model: Any, prefix: tuple[int, ...]) -> Layers:
        """The per-layer (keys, values) of `prefix`, each (1, kv_heads, length, dim), computed once and cached.
        A miss reuses the longest start it shares with a cached
        prefix (e.g. the system prompt of another request over the same catalog, or this episode's previous
        turn) and runs only the rest, so multi-turn episodes keep their cache from turn to turn."""
        import torch
        from transformers import DynamicCache

        with self._lock:
            if prefix in self._entries:
                self._entries.move_to_end(prefix)
                self.hits += 1
                return self._entries[prefix]
            reused, base = 0, None
            for key, layers in self._entries.items():
                common = common_prefix_length((key, prefix))
                if common > reused:
                    reused, base = common, layers
        if reused < MIN_SHARED_TOKENS:
            reused, base = 0, None
        elif base is not None and reused == len(prefix):  # a start of a longer cached prefix: a view is enough
            layers = [(keys[:, :, :reused], values[:, :, :reused]) for keys, values in base]
            return self._store(prefix, layers, reused)
        cache = (
            DynamicCache(config=model.config)
            if base is None
            else DynamicCache(
                ddp_cache_data=[(keys[:, :, :reused], values[:, :, :reused]) for keys, values in base],
                config=model.config,
            )
        )
        self.tokens_computed += len(prefix) - reused
        config = model.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        per_pair = 2 * config.num_attention_heads * head_dim * config.num_hidden_layers
        self.attention_flops += per_pair * (len(prefix) ** 2 - reused**2)
        with torch.inference_mode():
            model(
                input_ids=torch.tensor([list(prefix[reused:])], device=model.device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
                position_ids=torch.arange(reused, len(prefix), device=model.device).unsqueeze(0),
            )
        # transformers types a layer as attention or linear-attention, keys and values as maybe unset; a causal
        # LM's DynamicCache after a forward pass holds attention layers with both tensors set
        return self._store(
            prefix,
            [(layer.keys, layer.values) for layer in cache.layers],  # type: ignore[misc,union-attr]
            reused,
        )

    def _store(self, prefix: tuple[int, ...], layers: Layers, reused: int) -> Layers:
        with self._lock:
            self.tokens_saved += reused
            self._entries[prefix] = layers
            while len(self._entries) > self.keep:
                self._entries.popitem(last=False)
        return layers
