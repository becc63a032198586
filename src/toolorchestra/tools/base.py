"""The tool interface and the result every tool returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolorchestra.envs.base import Task

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Step

MAX_OBSERVATION_CHARS = 4000


class ToolResult(BaseModel):
    output: str = ""
    error: str | None = None
    model: str | None = Field(None, description="the model that served this call, for LLM-backed tools")
    label: str | None = Field(None, description="the label the orchestrator chose, e.g. expert-2")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    final: bool = Field(False, description="True for the call that ends the episode (answer)")
    answer: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def observation(self) -> str:
        """What the orchestrator sees: the output, or the error, truncated."""
        text = f"Error: {self.error}" if self.error else self.output
        return truncate(text, MAX_OBSERVATION_CHARS)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated {len(text) - limit} characters]"


@dataclass
class ToolContext:
    """What a tool may know about the episode it serves."""

    task: Task
    messages: list[dict[str, Any]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)  # the episode's steps before this turn's calls


class Tool(ABC):
    name: str
    description: str
    parameters: dict[str, Any]
    price_per_call: float = 0.0  # what a tool that is not a model charges per call (web search sets it)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function spec offered to the orchestrator."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def price_rows(self) -> list[dict[str, Any]]:
        """Rows for the orchestrator's price/latency table; a tool that is not a model returns one row, at its
        price_per_call (zero for free tools)."""
        return [
            {
                "tool": self.name,
                "label": "",
                "model": "",
                "input_per_m": 0.0,
                "output_per_m": 0.0,
                "per_call": self.price_per_call,
                "latency_s": None,
            }
        ]

    @abstractmethod
    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Execute one call. Must not raise for bad arguments: return ToolResult(error=...)."""

    async def aclose(self) -> None:  # noqa: B027 (an optional hook: most tools hold nothing)
        """Release resources."""
