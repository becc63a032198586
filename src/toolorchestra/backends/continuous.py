"""Continuous batching of greedy requests on a frozen local model, with each episode's KV kept between turns.

Three things make a multi-turn episode cheap here:
- **Packed rows.** Every request in flight is one row; a forward pass packs the tokens each row feeds next
  (its prompt's unseen part, or its pending token and a jump-forward draft) into one sequence, with no
  padding, so a row that joins mid-way prefills while the others decode, and a row that ends leaves at once.
- **A shared prefix read once.** Rows whose prompts start with the same cached prefix (the system prompt,
  a domain policy, the tool catalog: `PrefixCache`) attend to one copy of its KV: the scores of all their
  queries against it are one matmul, instead of one copy of that KV per row read at every step.
- **The episode's own KV.** When a row ends, the KV of its tokens after the shared prefix goes to an LRU
  store (`EpisodeKV`, bounded in bytes); the episode's next turn, whose prompt repeats all of it and adds the
  tool's reply, takes it back and prefills only what is new.

The attention over [shared prefix][own tokens] is torch matmuls and softmax in `PackedRows.attend`, reached
through the attention function the local backend registers (`cpu_grouped_attention`). Each row's greedy
picks are jump-forward's (`jump_forward._pick` and `_draft`): the same grammar masks and the same drafts, so
a row's tokens are the ones it would decode alone, up to float rounding in the attention sums.

Imported only by the local backend, so torch, numpy and xgrammar load here at module level.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import xgrammar as xgr

from toolorchestra.backends.jump_forward import MAX_DRAFT_TOKENS, CallDrafts, _draft, _pick

PREFILL_CHUNK = 512  # prompt tokens a row feeds per pass: bounds the scores tensor of a long prompt
PASS_TOKENS = 1024  # packed tokens per pass, beyond the rows that decode
MIN_BUFFER = 256  # positions a row's KV buffer starts with; it doubles when full
BATCH_GUESS_TOKENS = 8  # guessed tokens a row first drafts in a pass shared with other rows (then adapted)


@dataclass(frozen=True)
class SharedPrefix:
    """A cached prompt prefix: its tokens' identity and per-layer (keys, values), each (kv_heads, length, dim)."""

    key: tuple[int, int]  # (length, hash of the tokens)
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.key[0]

    @classmethod
    def of(cls, tokens: Sequence[int], layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> SharedPrefix:
        return cls((len(tokens), hash(tuple(tokens))), [k[0] for k, _ in layers], [v[0] for _, v in layers])


@dataclass
class OwnKV:
    """A row's KV after its shared prefix: per-layer buffers (kv_heads, capacity, dim), the first
    `len(tokens)` positions filled."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    tokens: list[int]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[1]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    @classmethod
    def empty(cls, model: Any, capacity: int) -> OwnKV:
        config = model.config
        heads = config.num_key_value_heads
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (heads, capacity, dim)
        dtype, device = model.dtype, model.device
        layers = range(config.num_hidden_layers)
        return cls(
            [torch.empty(shape, dtype=dtype, device=device) for _ in layers],
            [torch.empty(shape, dtype=dtype, device=device) for _ in layers],
            [],
        )

    def reserve(self, positions: int) -> None:
        """Room for `positions` tokens, the filled ones kept."""
        if positions <= self.capacity:
            return
        capacity = max(positions, 2 * self.capacity)
        filled = len(self.tokens)
        for buffers in (self.keys, self.values):
            for index, old in enumerate(buffers):
                new = old.new_empty((old.shape[0], capacity, old.shape[2]))
                new[:, :filled] = old[:, :filled]
                buffers[index] = new


class EpisodeKV:
    """The own KV of finished turns, keyed by the shared prefix they follow, least recently used first out
    once their bytes pass `budget_bytes`. A row takes an entry (it writes into its buffers), so two rows
    never share one."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[int, tuple[tuple[int, int], np.ndarray, OwnKV]] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.bytes = 0

    def take(self, prefix_key: tuple[int, int], tokens: Sequence[int]) -> tuple[int, OwnKV | None]:
        """(tokens of `tokens` whose KV the best entry holds, that entry), the entry removed; (0, None) if
        none after the same prefix starts like `tokens`. At most len(tokens) - 1 are reused: the last
        token is fed again so its logits pick the next one."""
        wanted = np.asarray(tokens, dtype=np.int64)
        best, best_id = 0, None
        with self._lock:
            for entry_id, (key, held, _) in self._entries.items():
                if key != prefix_key:
                    continue
                length = min(len(held), len(wanted) - 1)
                differs = np.flatnonzero(held[:length] != wanted[:length])
                common = int(differs[0]) if len(differs) else length
                if common > best:
                    best, best_id = common, entry_id
            if best_id is None:
                return 0, None
            _, _, own = self._entries.pop(best_id)
            self.bytes -= own.nbytes
        own.tokens = list(tokens[:best])
        return best, own

    def put(self, prefix_key: tuple[int, int], own: OwnKV) -> None:
        if own.nbytes > self.budget_bytes or not own.tokens:
            return
        with self._lock:
            self._entries[self._next] = (prefix_key, np.asarray(own.tokens, dtype=np.int64), own)
            self._next += 1
            self.bytes += own.nbytes
            while self.bytes > self.budget_bytes:
                _, (_, _, dropped) = self._entries.popitem(last=False)
                self.bytes -= dropped.nbytes

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class RowSpec:
    """What a request asks of the decoder."""

    prompt: list[int]
    limit: int
    grammar: xgr.CompiledGrammar | None  # None: plain greedy text up to an end-of-turn token
    cancelled: Callable[[], bool]
    jump_forward: bool = True  # feed drafts of forced and predicted text (guided rows only)
    shared_until: int = 0  # the prompt's tokens that other requests share (its system message); 0: unknown


@dataclass
class Row:
    spec: RowSpec
    prefix: SharedPrefix | None
    own: OwnKV
    pending: list[int]  # own tokens not yet in the KV buffers
    matcher: xgr.GrammarMatcher | None
    bitmask: torch.Tensor | None
    generated: list[int] = field(default_factory=list)
    guess_budget: int = BATCH_GUESS_TOKENS  # guessed tokens it may draft in a shared pass: doubled when all
    forced_in_draft: int = 0  # of its current draft, the tokens its grammar forces (always confirmed)
    finished: bool = False

    @property
    def prefix_length(self) -> int:
        return self.prefix.length if self.prefix is not None else 0

    @property
    def filled(self) -> int:
        return len(self.own.tokens)


@dataclass
class DecodeStats:
    """What the decoder computed and what it took from caches, in tokens and passes."""

    prefill_computed: int = 0  # prompt tokens run through the model
    prefill_from_episode: int = 0  # prompt tokens whose KV came from the row's previous turn
    prefill_from_prefix: int = 0  # prompt tokens whose KV came from a shared prefix
    decoded: int = 0  # tokens generated
    drafted: int = 0  # of them, confirmed from drafts (no pass of their own)
    passes: int = 0
    packed_tokens: int = 0  # tokens through the model, prompts and drafts included
    kv_bytes_read: int = 0  # KV bytes the attention read (shared prefixes once per pass)
    attention_flops: int = 0  # multiply-adds x 2 of the attention scores and weighted sums
    rows: int = 0


class PackedRows:
    """One forward pass's rows: the span of the packed sequence each feeds, read by `attend` in every layer."""

    def __init__(self, rows: list[Row], feeds: list[list[int]]) -> None:
        self.rows = rows
        self.spans: list[tuple[int, int]] = []
        start = 0
        for feed in feeds:
            self.spans.append((start, start + len(feed)))
            start += len(feed)
        self.total = start
        self.starts = [row.filled for row in rows]  # own positions before this pass
        # rows grouped by shared prefix, each group a contiguous run of spans (the caller orders rows so)
        self.groups: list[tuple[SharedPrefix | None, int, int]] = []
        for index, row in enumerate(rows):
            if self.groups and _prefix_key(self.groups[-1][0]) == _prefix_key(row.prefix):
                prefix, first, _ = self.groups[-1]
                self.groups[-1] = (prefix, first, index + 1)
            else:
                self.groups.append((row.prefix, index, index + 1))
        self.kv_bytes_read = 0
        self.attention_flops = 0
        self._masks: dict[int, torch.Tensor] = {}

    def attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> Any:
        """Attention output (1, tokens, heads, dim) of the packed queries: each row's over its shared prefix,
        its own earlier tokens and its own tokens of this pass up to itself. Writes this pass's keys and
        values into the rows' buffers first.

        A group's queries meet its prefix in one call of torch's fused CPU attention (which also returns each
        query's log-sum-exp); each row's own keys are few and take plain matmuls; the two partial softmaxes
        are then merged by their log-sum-exps, which gives the softmax over both."""
        heads, tokens, dim = query.shape[1], query.shape[2], query.shape[3]
        kv_heads = key.shape[1]
        groups = heads // kv_heads
        queries = query[0].reshape(kv_heads, groups, tokens, dim)  # query head h reads kv head h // groups
        scaled = queries * scaling  # for the rows' own scores
        out = torch.empty_like(queries)
        for prefix, first, last in self.groups:
            begin, end = self.spans[first][0], self.spans[last - 1][1]
            shared = None
            if prefix is not None:
                keys, values = prefix.keys[layer], prefix.values[layer]  # one copy for the whole group
                block = queries[:, :, begin:end].reshape(1, kv_heads, groups * (end - begin), dim)
                shared_out, shared_lse = _fused_attention(block, keys[None], values[None], 0.0, False, scale=scaling)
                shared = (
                    shared_out[0].view(kv_heads, groups, end - begin, dim),
                    shared_lse[0].view(kv_heads, groups, end - begin, 1),
                )
                self.kv_bytes_read += 2 * keys.numel() * keys.element_size()
                self.attention_flops += 4 * heads * dim * (end - begin) * keys.shape[1]
            for index in range(first, last):
                self._attend_row(index, layer, scaled, key, value, out, shared, begin)
        return out.reshape(heads, tokens, dim).transpose(0, 1).unsqueeze(0)

    def _future(self, size: int, device: Any) -> torch.Tensor:
        """The (size, size) mask of later positions, made once per size and pass (every layer reuses it)."""
        if size not in self._masks:
            self._masks[size] = torch.ones(size, size, dtype=torch.bool, device=device).triu(1)
        return self._masks[size]

    def _attend_row(
        self,
        index: int,
        layer: int,
        scaled: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        out: torch.Tensor,
        shared: tuple[torch.Tensor, torch.Tensor] | None,
        group_begin: int,
    ) -> None:
        a, b = self.spans[index]
        fed, start = b - a, self.starts[index]
        own = self.rows[index].own
        own_keys, own_values = own.keys[layer], own.values[layer]
        own_keys[:, start : start + fed] = key[0, :, a:b]
        own_values[:, start : start + fed] = value[0, :, a:b]
        seen_keys, seen_values = own_keys[:, : start + fed], own_values[:, : start + fed]
        self.kv_bytes_read += 2 * seen_keys.numel() * seen_keys.element_size()
        self.attention_flops += 4 * scaled.shape[0] * scaled.shape[1] * scaled.shape[3] * fed * (start + fed)
        scores = scaled[:, :, a:b] @ seen_keys.unsqueeze(1).transpose(2, 3)  # (kv, groups, fed, seen)
        if fed > 1:  # causal among this pass's own tokens
            scores[..., start:].masked_fill_(self._future(fed, scores.device), float("-inf"))
        top = scores.amax(-1, keepdim=True)
        weights = scores.sub_(top).exp_()
        total = weights.sum(-1, keepdim=True)
        own_out = (weights @ seen_values.unsqueeze(1)) / total
        if shared is None:
            out[:, :, a:b] = own_out
            return
        shared_out = shared[0][:, :, a - group_begin : b - group_begin]
        shared_lse = shared[1][:, :, a - group_begin : b - group_begin]
        own_lse = top + total.log()
        high = torch.maximum(own_lse, shared_lse)
        shared_weight, own_weight = (shared_lse - high).exp(), (own_lse - high).exp()
        out[:, :, a:b] = (shared_out * shared_weight + own_out * own_weight) / (shared_weight + own_weight)


def _fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    """(output, log-sum-exp per query) of torch's fused CPU attention kernel; the public SDPA drops the second."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, *args, **kwargs)


Done = Callable[[RowSpec, list[int] | BaseException], None]
"""`done(spec, result)`: a row has ended, with its generated ids (up to and including its stop token) or an error."""


class ContinuousDecoder:
    """Greedy decoding of many rows at once over one frozen model; `run` serves until no row is left."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        prefix_cache: Any,
        episodes: EpisodeKV,
        eos_ids: set[int],
        closing_ids: torch.Tensor,
        drafts: CallDrafts | None,
        max_rows: int,
        stats: DecodeStats | None = None,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.prefix_cache, self.episodes = prefix_cache, episodes
        self.eos_ids, self.closing_ids, self.drafts = eos_ids, closing_ids, drafts
        self.max_rows = max_rows
        self.stats = stats if stats is not None else DecodeStats()
        self._interned: dict[tuple[int, int], SharedPrefix] = {}

    def run(self, first: list[RowSpec], more: Callable[[int], list[RowSpec]], done: Done) -> None:
        """Decode `first` and whatever `more(free_rows)` hands over between passes; `done(spec, ids)` as each
        row ends (its generated ids, up to and including its stop token), or `done(spec, error)`."""
        rows: list[Row] = []
        waiting = list(first)
        while True:
            if waiting:  # never more than max_rows in flight; the rest wait for rows to end
                room = self.max_rows - len(rows)
                rows += self._admit(waiting[:room], done)
                waiting = waiting[room:]
            try:
                if rows:
                    self._pass(rows)
            except Exception as error:  # every row in flight learns of it; the decoder stops
                for row in rows:
                    done(row.spec, error)
                return
            for row in [row for row in rows if row.finished]:
                self._retire(row)
                done(row.spec, row.generated)
            rows = [row for row in rows if not row.finished]
            free = self.max_rows - len(rows) - len(waiting)
            waiting += more(free) if free > 0 else []
            if not rows and not waiting:
                return

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, specs: list[RowSpec], done: Done) -> list[Row]:
        prefixes = self._prefixes(specs)
        rows = []
        for spec, prefix in zip(specs, prefixes, strict=True):
            try:
                rows.append(self._row(spec, prefix))
            except Exception as error:  # e.g. a grammar that fails: this request alone fails
                done(spec, error)
        self.stats.rows += len(rows)
        return rows

    def _prefixes(self, specs: list[RowSpec]) -> list[SharedPrefix | None]:
        """Each row's shared prefix: its system message when the request says where that ends (computed once
        per distinct message and cached); otherwise the longest cached prefix its prompt starts with, or,
        for rows that arrive together with none, their common start (computed once and cached). Either way
        an episode finds, turn after turn, the prefix its own KV was stored after."""
        from toolorchestra.backends.prefix_cache import MIN_SHARED_TOKENS, common_prefix_length

        found: list[SharedPrefix | None] = []
        for spec in specs:
            prompt = spec.prompt
            if spec.shared_until >= MIN_SHARED_TOKENS:
                tokens = prompt[: min(spec.shared_until, len(prompt) - 1)]
                found.append(self._intern(tokens, self.prefix_cache.shared_layers(self.model, tuple(tokens))))
                continue
            cached = self.prefix_cache.longest_cached(prompt)
            found.append(self._intern(prompt[: cached[0]], cached[1]) if cached is not None else None)
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, spec in enumerate(specs):
            if found[index] is None and len(spec.prompt) > MIN_SHARED_TOKENS:
                groups.setdefault(tuple(spec.prompt[:MIN_SHARED_TOKENS]), []).append(index)
        for members in groups.values():
            starts = [specs[index].prompt for index in members]
            common = min([common_prefix_length(starts)] + [len(prompt) - 1 for prompt in starts])
            if len(members) < 2 or common < MIN_SHARED_TOKENS:
                continue
            tokens = starts[0][:common]
            shared = self._intern(tokens, self.prefix_cache.shared_layers(self.model, tuple(tokens)))
            for index in members:
                found[index] = shared
        return found

    def _intern(self, tokens: Sequence[int], layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> SharedPrefix:
        """One SharedPrefix object per distinct prefix while this decoder runs."""
        prefix = SharedPrefix.of(tokens, layers)
        return self._interned.setdefault(prefix.key, prefix)

    def _row(self, spec: RowSpec, prefix: SharedPrefix | None) -> Row:
        prefix_length = prefix.length if prefix is not None else 0
        own_prompt = spec.prompt[prefix_length:]
        reused, own = self.episodes.take(_prefix_key(prefix), own_prompt)
        if own is None:
            own = OwnKV.empty(self.model, max(MIN_BUFFER, len(own_prompt) + spec.limit))
        self.stats.prefill_from_episode += reused
        self.stats.prefill_from_prefix += prefix_length
        self.stats.prefill_computed += len(own_prompt) - reused
        matcher = bitmask = None
        if spec.grammar is not None:
            matcher = xgr.GrammarMatcher(spec.grammar)
            bitmask = xgr.allocate_token_bitmask(1, self.model.config.vocab_size)
        return Row(spec, prefix, own, own_prompt[reused:], matcher, bitmask)

    def _retire(self, row: Row) -> None:
        self.episodes.put(_prefix_key(row.prefix), row.own)
        terminated = row.matcher is not None and row.matcher.is_terminated()
        if self.drafts is not None and row.spec.grammar is not None and terminated:
            self.drafts.remember(row.spec.grammar, self.tokenizer.decode(row.generated, skip_special_tokens=True))

    # -- one pass -----------------------------------------------------------------------------

    def _pass(self, rows: list[Row]) -> None:
        """Feed every row's next tokens in one packed forward pass, then pick each row's new tokens. Rows that
        decode go first; rows still reading their prompt take PREFILL_CHUNK tokens each while PASS_TOKENS lasts."""
        for row in rows:
            if row.spec.cancelled():
                row.finished = True
        chosen: list[tuple[Row, list[int], list[int] | None]] = []  # (row, tokens fed, draft or None: prefill)
        budget = PASS_TOKENS
        live = [row for row in rows if not row.finished]
        for row in sorted(live, key=lambda row: len(row.pending)):
            if len(row.pending) <= PREFILL_CHUNK:
                guess = self._draft(row, shared_pass=len(live) > 1)
                chosen.append((row, row.pending + guess, guess))
            elif budget > 0:
                chosen.append((row, row.pending[:PREFILL_CHUNK], None))
            else:
                continue
            budget -= len(chosen[-1][1])
        if not chosen:
            return
        chosen.sort(key=lambda item: _prefix_key(item[0].prefix))  # the rows of one prefix side by side
        logits = self._forward([item[0] for item in chosen], [item[1] for item in chosen], [item[2] for item in chosen])
        for (row, feed, draft), row_logits in zip(chosen, logits, strict=True):
            if draft is not None:
                self._pick(row, feed, draft, row_logits)
            else:  # a prefill chunk: its KV is in, nothing to pick yet
                row.own.tokens += feed
                row.pending = row.pending[len(feed) :]

    def _draft(self, row: Row, shared_pass: bool) -> list[int]:
        """The row's draft: the text its grammar forces next, then the last call's continuation as a guess. In
        a pass shared with other rows the guess is cut to the row's guess budget (doubled after a guess the model
        confirmed whole, cut to what it confirmed otherwise): there a pass is bound by compute, and each wrong
        guess token costs a token's full forward (its attention over the whole prompt included), where a lone
        row's pass is bound by reading the weights and a long guess comes nearly free."""
        if row.matcher is None or row.spec.grammar is None or not row.spec.jump_forward:
            return []
        previous = self.drafts.last(row.spec.grammar) if self.drafts is not None else ""
        draft = _draft(row.matcher, self.tokenizer, row.generated, previous, row.spec.limit - len(row.generated))
        forced = row.matcher.find_jump_forward_string() if draft else ""
        forced_tokens = len(self.tokenizer(forced, add_special_tokens=False)["input_ids"]) if forced else 0
        row.forced_in_draft = min(forced_tokens, len(draft))
        return draft if not shared_pass else draft[: forced_tokens + row.guess_budget]

    def _forward(self, rows: list[Row], feeds: list[list[int]], picking: list[list[int] | None]) -> list[Any]:
        """One packed pass; per row, the float32 logits of the positions that pick (None for prefill chunks)."""
        for row, feed in zip(rows, feeds, strict=True):
            row.own.reserve(row.filled + len(feed))
        packed = PackedRows(rows, feeds)
        ids = [token for feed in feeds for token in feed]
        positions = [
            row.prefix_length + row.filled + offset
            for row, feed in zip(rows, feeds, strict=True)
            for offset in range(len(feed))
        ]
        wanted: list[int] = []  # packed positions whose logits pick: the last pending token's and each draft's
        for (_, b), draft in zip(packed.spans, picking, strict=True):
            if draft is not None:
                wanted += range(b - len(draft) - 1, b)
        device = self.model.device
        with torch.inference_mode():
            hidden = self.model.model(
                input_ids=torch.tensor([ids], device=device),
                position_ids=torch.tensor([positions], device=device),
                use_cache=False,
                packed_rows=packed,
            ).last_hidden_state[0]
            logits = self.model.lm_head(hidden[wanted]).float()
        self.stats.passes += 1
        self.stats.packed_tokens += len(ids)
        self.stats.kv_bytes_read += packed.kv_bytes_read
        self.stats.attention_flops += packed.attention_flops
        out: list[Any] = []
        at = 0
        for draft in picking:
            if draft is None:
                out.append(None)
                continue
            out.append(logits[at : at + len(draft) + 1])
            at += len(draft) + 1
        return out

    def _pick(self, row: Row, feed: list[int], draft: list[int], logits: torch.Tensor) -> None:
        """The row's greedy picks from this pass: the first, then one per draft token the model confirms."""
        limit = row.spec.limit
        confirmed = 0
        while len(row.generated) < limit:
            token = self._choose(row, logits[confirmed])
            row.generated.append(token)
            self.stats.decoded += 1
            if self._ends(row, token):
                break
            if confirmed < len(draft) and token == draft[confirmed]:
                confirmed += 1
                continue
            break
        self.stats.drafted += confirmed
        guessed = len(draft) - row.forced_in_draft
        if guessed > 0:  # adapt the guess budget to how much of this guess held
            held = max(0, confirmed - row.forced_in_draft)
            row.guess_budget = min(2 * row.guess_budget, MAX_DRAFT_TOKENS) if held >= guessed else max(1, held)
        row.own.tokens += feed[: len(feed) - len(draft) + confirmed]  # the unconfirmed draft's KV is dropped
        row.pending = row.generated[-1:]
        if len(row.generated) >= limit or row.finished:
            row.finished = True

    def _choose(self, row: Row, logits: torch.Tensor) -> int:
        if row.matcher is None or row.bitmask is None:
            return int(logits.argmax())
        return _pick(row.matcher, row.bitmask, logits, len(row.generated), row.spec.limit, self.closing_ids)

    def _ends(self, row: Row, token: int) -> bool:
        if row.matcher is not None:
            row.finished = row.matcher.is_terminated()
        else:
            row.finished = token in self.eos_ids
        return row.finished


def _prefix_key(prefix: SharedPrefix | None) -> tuple[int, int]:
    return prefix.key if prefix is not None else (0, 0)
