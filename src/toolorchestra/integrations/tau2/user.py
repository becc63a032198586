"""tau2's own user simulator, reached through tau2's LLM client (litellm) at an OpenAI-compatible base URL, and
metered.

The simulator is tau2's `UserSimulator` with `llm="openai/<pool model name>"` and `llm_args` holding the
server's `api_base`: litellm's OpenAI provider then sends every user turn to that server (`toolorchestra serve`
over the pool, started in-process or given by URL). `MeteredUserSimulator` only wraps its
`generate_next_message` to record each call's tokens (the `usage` the server reported, which tau2 keeps on the
message), its dollars at the pool's price for that model (the figure `serve` reports as `cost_usd`; litellm
cannot price a model it does not know and would say 0), and its wall time. The dollars are also written into
the message's `cost`, so tau2's own `SimulationRun.user_cost` is filled.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from toolorchestra.catalog.schema import Price
from toolorchestra.integrations.tau2.runtime import require_tau2

require_tau2()

from tau2.data_model.message import UserMessage  # noqa: E402
from tau2.user.user_simulator import UserSimulator, UserState  # noqa: E402

USER_IMPLEMENTATION = "user_simulator"  # tau2's registry name of UserSimulator
PLACEHOLDER_KEY = "toolorchestra"  # `serve` does not check keys, but the OpenAI client needs one


@dataclass
class UserCall:
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float


def user_llm_args(
    base_url: str, max_tokens: int | None, temperature: float = 0.0, num_retries: int = 1
) -> dict[str, Any]:
    """litellm arguments that send the user simulator's calls to the OpenAI-compatible server at `base_url`."""
    args: dict[str, Any] = {
        "api_base": base_url,
        "api_key": PLACEHOLDER_KEY,
        "temperature": temperature,
        "num_retries": num_retries,
    }
    if max_tokens is not None:
        args["max_tokens"] = max_tokens
    return args


class MeteredUserSimulator(UserSimulator):
    """tau2's UserSimulator, with every call's tokens, dollars and seconds recorded in `calls`."""

    def __init__(self, *args: Any, price: Price, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.price = price
        self.calls: list[UserCall] = []

    def generate_next_message(self, message: Any, state: UserState) -> tuple[UserMessage, UserState]:
        started = time.perf_counter()
        user_message, state = super().generate_next_message(message, state)
        latency = time.perf_counter() - started
        usage = user_message.usage or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        user_message.cost = self.price.cost(prompt, completion)
        self.calls.append(UserCall(prompt, completion, user_message.cost, latency))
        return user_message, state

    def totals(self) -> dict[str, Any]:
        return {
            "calls": len(self.calls),
            **{
                key: sum(asdict(call)[key] for call in self.calls)
                for key in ("prompt_tokens", "completion_tokens", "cost_usd", "latency_s")
            },
        }
