"""The GRPO policy loss and the per-token log-probabilities it needs.

Semantics follow verl's actor: ratio clipping with separate low/high bounds (DAPO's clip-higher), dual
clipping of negative advantages at `clip_ratio_c`, the low-variance (k3) KL estimator against a reference
policy, and `loss_agg_mode` aggregation. Under gradient accumulation "token-mean" divides by the number of
mask-1 tokens of the whole mini-batch (`global_tokens`), not of each micro-batch, so accumulating micro-batches
gives the same gradient as one big batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
KL_CLAMP = 10.0


@dataclass
class LossStats:
    """Sums over the mask-1 tokens of one micro-batch (divide by the token count for means)."""

    pg_clipfrac: float
    kl: float
    ratio: float
    tokens: int


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token t | tokens < t) for t = 1..T-1, shape [B, T-1], of the distribution sampled from
    (logits / temperature, as verl scores rollouts); and optionally the entropy at each position.

    With `mask` ([B, T-1]), the vocabulary projection runs only where mask is 1 (the policy's tokens, a few
    percent of an episode) and the other positions hold 0: the same values there, far less compute and memory."""

    if mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
        return _logprobs_of(logits, input_ids[:, 1:], temperature, with_entropy)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0][:, :-1]
    selected = mask.bool()
    logits = base.get_output_embeddings()(hidden[selected])
    values, entropy = _logprobs_of(logits, input_ids[:, 1:][selected], temperature, with_entropy)
    return scatter(selected, values), None if entropy is None else scatter(selected, entropy)


def scatter(selected: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` in order at the True positions of `selected`, 0 elsewhere."""
    import torch

    return torch.zeros(selected.shape, dtype=values.dtype, device=values.device).masked_scatter(selected, values)


def _logprobs_of(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch

    logits = logits.float() / temperature
    normalizer = torch.logsumexp(logits, dim=-1)
    logprobs = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - normalizer
    entropy = None
    if with_entropy:  # a metric only: no gradient flows through it
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = normalizer - (probs * logits).sum(-1)
    return logprobs, entropy


def broadcast_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each episode's scalar advantage on every token it generated (mask 1), 0 elsewhere."""
    return advantages.unsqueeze(-1).to(mask.dtype if mask.is_floating_point() else advantages.dtype) * mask


def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1, an unbiased, non-negative estimate of KL(pi || ref)."""
    import torch

    delta = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0)
    return torch.clamp(torch.exp(delta) - delta - 1.0, -KL_CLAMP, KL_CLAMP)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_c: float = 3.0,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    loss_agg_mode: LossAggMode = "token-mean",
    global_tokens: int | None = None,
    global_sequences: int | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped GRPO objective (to minimize) of one micro-batch.

    logprobs, old_logprobs, mask: [B, T]; advantages: [B] (one per episode, broadcast to its tokens).
    global_tokens / global_sequences: the mini-batch's totals for the aggregation (default: this batch's)."""
    import torch

    mask = mask.to(logprobs.dtype)
    token_advantages = broadcast_advantages(advantages.to(logprobs.dtype), mask)
    ratio = torch.exp(torch.clamp(logprobs - old_logprobs, -20.0, 20.0))
    unclipped = -token_advantages * ratio
    clipped = -token_advantages * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    per_token = torch.maximum(unclipped, clipped)
    # Dual clip: a very large ratio on a negative advantage cannot push the loss beyond -A * c.
    dual = torch.minimum(per_token, -token_advantages * clip_ratio_c)
    per_token = torch.where(token_advantages < 0, dual, per_token)
    kl_sum = 0.0
    if ref_logprobs is not None:
        kl = low_var_kl(logprobs, ref_logprobs)
        kl_sum = float((kl.detach() * mask).sum())
        if kl_coef:
            per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, loss_agg_mode, global_tokens, global_sequences)
    clipped_tokens = (clipped > unclipped).to(mask.dtype) * mask
    stats = LossStats(
        pg_clipfrac=float(clipped_tokens.sum()),
        kl=kl_sum,
        ratio=float((ratio.detach() * mask).sum()),
        tokens=int(mask.sum()),
    )
    return loss, stats


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode,
    global_tokens: int | None = None,
    global_sequences: int | None = None,
) -> torch.Tensor:
    """Reduce [B, T] token losses to a scalar as verl's `agg_loss` does, with global denominators."""
    if mode == "token-mean":
        denominator = global_tokens if global_tokens is not None else mask.sum().clamp(min=1)
        return (per_token * mask).sum() / denominator
    sequences = global_sequences if global_sequences is not None else per_token.shape[0]
    token_sums = (per_token * mask).sum(-1)
    if mode == "seq-mean-token-sum":
        return token_sums.sum() / sequences
    if mode == "seq-mean-token-mean":
        return (token_sums / mask.sum(-1).clamp(min=1)).sum() / sequences
    raise ValueError(f"unknown loss_agg_mode {mode!r}")


def pad(sequences: Sequence[Sequence[int]], pad_id: int, device: Any, left: bool = False) -> tuple[Any, Any]:
    """Token id rows padded with `pad_id` to one width, on the right (or the left): ids and attention [B, T]."""
    import torch

    width = max(len(sequence) for sequence in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        span = slice(width - len(sequence), width) if left else slice(0, len(sequence))
        ids[row, span] = torch.tensor(list(sequence), dtype=torch.long)
        attention[row, span] = 1
    return ids.to(device), attention.to(device)


def pad_rows(rows: list[tuple[list[int], list[int]]], pad_id: int, device: Any) -> tuple[Any, Any, Any]:
    """(token ids, loss mask) rows right-padded: ids and attention [B, T], and the loss mask aligned to the
    next-token log-probs [B, T-1]."""
    import torch

    ids, attention = pad([tokens for tokens, _ in rows], pad_id, device)
    mask = torch.zeros(ids.shape, dtype=torch.float32)
    for row, (tokens, loss_mask) in enumerate(rows):
        mask[row, : len(tokens)] = torch.tensor(loss_mask, dtype=torch.float32)
    return ids, attention, mask[:, 1:].to(device)
