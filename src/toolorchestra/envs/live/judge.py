"""Judging a live world's final answer: exact or normalized match first, then an LLM judge.

1. **Match.** The answer equals the reference (case and surrounding space ignored), or, for a multiple-choice
   question, commits to the reference's option letter, or states it after normalization
   (envs/replay/judge.py: `normalized_match`). A match is correct without a model call.
2. **LLM judge.** Otherwise a pool model (any backend) reads the question, the student answer and the
   reference answer (`JUDGE_PROMPT`, written out in docs/hle.md) and replies with a `<correct>` tag. Anything
   but `<correct>True</correct>` counts as incorrect: a judge failure never passes an answer.

Every verdict, with the judge's reply, tokens, dollars and seconds, is stored in the trajectory
(`score_details["judge"]`); metrics report the judge's cost apart from the episode's (bench/metrics.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.replay.judge import final_answer_text, normalized_match

if TYPE_CHECKING:
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.envs.base import Task

JUDGE_PROMPT = (
    "Question: {question}\n\n"
    "Student answer: {answer}\n\n"
    "Reference answer: {gold}\n\n"
    "Take the reference answer as correct. Reply <correct>True</correct> if the student answer matches the "
    "reference answer, and <correct>False</correct> if it does not."
)
_LETTER = re.compile(r"^\W{0,3}([A-Z])(?:[\s.):\]]|$)")
_VERDICT = re.compile(r"<correct>\s*(true|false)\s*</correct>", re.IGNORECASE)
MAX_ANSWER_WORDS = 500  # a longer "answer" is a transcript, not an answer: incorrect without judging


@dataclass
class Verdict:
    correct: bool
    method: str  # exact | option_letter | normalized | llm_judge | empty | too_long
    judge_model: str | None = None
    judge_output: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None

    def record(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def matched(task: Task, answer: str) -> str | None:
    """The match method that makes `answer` correct without a judge, or None."""
    gold = task.gold or ""
    if answer.strip().lower() == gold.strip().lower():
        return "exact"
    if task.meta.get("answer_type") == "multipleChoice" and len(gold.strip()) == 1:
        found = _LETTER.match(final_answer_text(answer))
        return "option_letter" if found and found.group(1) == gold.strip().upper() else None
    return "normalized" if normalized_match(answer, gold) else None


@dataclass
class LiveJudge:
    """Match first, then `model` of `pool` as the LLM judge (None: match only, `--judge none`)."""

    pool: ModelPool | None = None
    model: str | None = None
    max_tokens: int = 16

    @property
    def method(self) -> str:
        return f"match, then LLM judge {self.model}" if self.model else "match only (--judge none)"

    async def grade(self, task: Task, answer: str | None) -> Verdict:
        answer = (answer or "").strip()
        if not answer:
            return Verdict(False, "empty")
        if len(answer.split()) > MAX_ANSWER_WORDS:
            return Verdict(False, "too_long")
        method = matched(task, answer)
        if method is not None:
            return Verdict(True, method)
        if self.pool is None or self.model is None:
            return Verdict(False, "normalized" if task.meta.get("answer_type") != "multipleChoice" else "option_letter")
        return await self._ask(task, answer)

    async def _ask(self, task: Task, answer: str) -> Verdict:
        assert self.pool is not None and self.model is not None
        prompt = JUDGE_PROMPT.format(question=task.prompt, answer=answer, gold=task.gold or "")
        started = time.perf_counter()
        try:
            completion, cost = await self.pool.complete(
                self.model, [{"role": "user", "content": prompt}], max_tokens=self.max_tokens
            )
        except Exception as exc:  # recorded as an incorrect verdict with its cause, never a crashed run
            return Verdict(False, "llm_judge", self.model, error=f"judge {self.model} failed: {exc}")
        found = _VERDICT.findall(completion.text)
        return Verdict(
            correct=bool(found) and found[-1].lower() == "true",
            method="llm_judge",
            judge_model=self.model,
            judge_output=completion.text,
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            cost_usd=cost,
            latency_s=completion.latency_s or time.perf_counter() - started,
        )


__all__ = ["JUDGE_PROMPT", "LiveJudge", "Verdict", "matched"]
