"""The backend interface and the values every backend returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, Field

Message = dict[str, Any]
"""An OpenAI-style chat message: role, content and optionally tool_calls / tool_call_id / name."""


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        import json

        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


class Completion(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # Tool calls the model tried to make but that could not be parsed; shown back to it as errors.
    call_errors: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""
    # A dollar cost the backend measured itself (a replayed call's recorded cost); when set, the pool
    # charges it instead of pricing the tokens.
    cost_usd: float | None = None

    def assistant_message(self) -> Message:
        message: Message = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        return message


class Backend(ABC):
    """Generates one chat completion. Implementations must be safe to call concurrently."""

    name: str = "backend"

    @abstractmethod
    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        """Return the model's next turn for `messages`, offering it `tools` (OpenAI function specs)."""

    async def aclose(self) -> None:  # noqa: B027 - a hook with a do-nothing default, not an abstract method
        """Release connections or memory; the default has nothing to release."""
