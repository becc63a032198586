"""The paper's protocol mode of the orchestrator loop (ToolOrchestra's HLE/FRAMES evaluation), as an option of
the one loop in agent/loop.py, not a second loop.

Two things differ from the chat-history mode our own orchestrators use:
- **The context is rebuilt every turn.** The request is a short system message and one user message: the
  problem, then the documents, code and outputs and earlier answers gathered so far (read from the episode's
  steps, tools/paper.py: `notebook`), cut to a token budget from the front, so what came last is kept.
- **Only the first valid call of a turn runs.** A call is valid when it names an offered tool and gives every
  required argument, with a `model` among that tool's labels. Later calls of the turn are skipped and recorded.

One rule is ours, not the reference's: on the last turn the turn cap allows, only the tools that end the episode
(`answer`) are offered (`answer_at_cap`), so an episode that reaches the cap still answers, as smolagents asks for
a final answer at its step cap. The reference ends such an episode without an answer (`answer_at_cap=False`).

The exact request is documented field by field in docs/hle.md (and checked by tests/test_hle.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.base import ToolCall
from toolorchestra.tools.base import Tool
from toolorchestra.tools.llm import LLMTool
from toolorchestra.tools.paper import Notebook, PaperAnswerTool, code_block, keep_last_tokens, notebook

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

SYSTEM = "You are good at using tools."
CODE_HEADER = "\npython code and execution outputs:\n"


@dataclass(frozen=True)
class PaperProtocol:
    """Per-turn context rebuild and the first-valid-call rule. Token budgets are the reference's defaults:
    the whole context 27,000 tokens less the problem's, code and answers 12,000, answers alone 8,000; each
    document is shown by its first `document_chars` characters."""

    context_tokens: int = 27000
    code_tokens: int = 12000
    attempt_tokens: int = 8000
    document_chars: int = 1200
    answer_at_cap: bool = True

    def offered(self, tools: Mapping[str, Tool], turn: int, max_turns: int) -> dict[str, Tool]:
        """The tools of this turn: all of them, or on the last turn (with `answer_at_cap`) those that end it."""
        if self.answer_at_cap and turn == max_turns - 1:
            final: dict[str, Tool] = {name: tool for name, tool in tools.items() if isinstance(tool, PaperAnswerTool)}
            if final:
                return final
        return dict(tools)

    def messages(self, problem: str, trajectory: Trajectory | None) -> list[dict[str, Any]]:
        """The request of the next turn: system, then the problem with everything gathered so far."""
        book = notebook(trajectory.steps) if trajectory is not None else Notebook()
        return [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"Problem: {problem}\n\n{self.context(problem, book)}\n\nChoose an appropriate tool.'",
            },
        ]

    def context(self, problem: str, book: Notebook) -> str:
        from toolorchestra.envs.replay.tokens import count_tokens

        documents = "".join(f"Doc {i}: {doc[: self.document_chars]} ...\n\n" for i, doc in enumerate(book.documents, 1))
        attempts = "".join(
            f"Attempt{i} answer by {label}: {answer}\n" for i, (label, answer) in enumerate(book.attempts, 1)
        )
        kept_attempts = keep_last_tokens(attempts, self.attempt_tokens)
        if kept_attempts and not kept_attempts.startswith("Attempt"):
            kept_attempts = "Attempt answer: " + kept_attempts
        code = "".join(code_block(code, output) for code, output in book.code) + kept_attempts
        kept_code = keep_last_tokens(code, self.code_tokens)
        if kept_code and not kept_code.startswith("```"):
            kept_code = "```\n" + kept_code
        room = self.context_tokens - count_tokens(problem)
        if kept_code and count_tokens(kept_code) >= room:
            return kept_code
        context = keep_last_tokens(documents + (CODE_HEADER + kept_code if kept_code else ""), max(room, 0))
        return f"Documents:\n{context}" if documents else context

    def select(
        self, calls: Sequence[ToolCall], errors: Sequence[str], tools: Mapping[str, Tool]
    ) -> tuple[list[ToolCall], list[str]]:
        """The first valid call alone, and why every other call of the turn did not run."""
        chosen: list[ToolCall] = []
        notes = list(errors)
        for index, call in enumerate(calls, start=1):
            problem = invalid_reason(call, tools)
            if problem is not None:
                notes.append(f"call {index} ({call.name}) skipped: {problem}")
            elif chosen:
                notes.append(f"call {index} ({call.name}) skipped: only the first valid call of a turn runs")
            else:
                chosen.append(call)
        return chosen, notes


def invalid_reason(call: ToolCall, tools: Mapping[str, Tool]) -> str | None:
    """Why a call is not valid under the paper's rule, or None."""
    tool = tools.get(call.name)
    if tool is None:
        return f"unknown tool; offered: {sorted(tools)}"
    missing = [name for name in tool.parameters.get("required", []) if name not in call.arguments]
    if missing:
        return f"missing argument(s) {missing}"
    if isinstance(tool, LLMTool) and "model" in call.arguments and call.arguments["model"] not in tool.labels:
        return f"model {call.arguments['model']!r} is not one of {list(tool.labels)}"
    return None


__all__ = ["SYSTEM", "PaperProtocol", "invalid_reason"]
