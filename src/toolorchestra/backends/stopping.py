"""Per-row token limits for batched generation, guided or not.

Kept apart from `guided` (which imports xgrammar) so that unguided generation works without xgrammar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import transformers


class RowTokenLimits(transformers.StoppingCriteria):
    """Stops each batch row at its own max_tokens, so requests with different limits share a batch."""

    def __init__(self, limits: list[int], prompt_width: int) -> None:
        self.limits = torch.tensor(limits)
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.prompt_width
        return cast(torch.BoolTensor, (generated >= self.limits).to(input_ids.device))


class RowsCancelled(transformers.StoppingCriteria):
    """Stops the rows whose caller gave up (e.g. an HTTP client that hung up), so a cancelled request
    stops costing compute at the next token; the batch ends once every row is done."""

    def __init__(self, cancelled: list[Callable[[], bool]]) -> None:
        self.cancelled = cancelled

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        return cast(torch.BoolTensor, torch.tensor([check() for check in self.cancelled], device=input_ids.device))
