"""Trajectory records: every model turn and tool call of an episode with its cost and latency."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field


class Step(BaseModel):
    turn: int
    kind: Literal["orchestrator", "tool"]
    name: str = Field(..., description="model name for orchestrator turns, tool name for tool calls")
    model: str | None = None
    label: str | None = None
    arguments: dict[str, Any] | None = None
    output: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    # What a tool reported beside its observation (e.g. the paper tools' documents, code and its output), so a
    # per-turn context can be rebuilt from the steps alone.
    meta: dict[str, Any] = Field(default_factory=dict)


StopReason = Literal["answer", "max_turns", "budget", "no_tool_call", "error"]


class Trajectory(BaseModel):
    task_id: str
    env: str = ""
    split: str = ""
    policy: str = ""
    question: str = ""
    preference: dict[str, Any] = Field(default_factory=dict)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    final_answer: str | None = None
    answered_by: str | None = Field(None, description="model whose response was given as the final answer")
    stop_reason: StopReason | None = None
    correct: bool | None = None
    score_details: dict[str, Any] = Field(default_factory=dict)
    # Wall latency of the episode: per turn, the orchestrator's time plus the slowest of the
    # concurrently executed calls of that turn.
    latency_s: float = 0.0

    @property
    def cost_usd(self) -> float:
        return sum(step.cost_usd for step in self.steps)

    @property
    def prompt_tokens(self) -> int:
        return sum(step.prompt_tokens for step in self.steps)

    @property
    def completion_tokens(self) -> int:
        return sum(step.completion_tokens for step in self.steps)

    @property
    def tool_steps(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "tool"]

    def calls_per_tool(self) -> dict[str, int]:
        return dict(Counter(step.name for step in self.tool_steps))

    def calls_per_model(self) -> dict[str, int]:
        return dict(Counter(step.model for step in self.tool_steps if step.model))

    def malformed_calls(self) -> int:
        return sum(1 for step in self.steps if step.error and step.error.startswith("malformed tool call"))

    def to_record(self) -> dict[str, Any]:
        record = self.model_dump(mode="json")
        record["cost_usd"] = self.cost_usd
        record["prompt_tokens"] = self.prompt_tokens
        record["completion_tokens"] = self.completion_tokens
        return record


def write_trajectory(path: Path | str, trajectory: Trajectory) -> None:
    """Append one trajectory as a JSON line (flushed, so a killed run keeps what it finished)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(trajectory.to_record(), ensure_ascii=False) + "\n")
        handle.flush()


def read_trajectories(path: Path | str) -> Iterator[Trajectory]:
    """Read a trajectories JSONL file; a torn last line (from a kill mid-write) is skipped."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            for derived in ("cost_usd", "prompt_tokens", "completion_tokens"):
                record.pop(derived, None)
            yield Trajectory.model_validate(record)
