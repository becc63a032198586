"""Recording a pool's answers to a question file as a replay world: `toolorchestra replay record`.

A user with live endpoints and a file of questions with gold answers (questions.jsonl of the replay format,
docs/replay.md) asks every model behind a tool's labels (the catalog's `answer` tool by default) every
question, once. Each call runs through the episode engine (`agent.engine.run_calls`), so it is priced and
timed as in `run` and `eval`; each reply is graded by the replay format's own rule (`judge_answer`: an option
letter against a letter gold, else normalized match). The answers go to OUT in the replay format, appended
line by line (envs/live/record.py), so a killed run keeps what it paid for and a rerun asks only what is
missing. OUT is then a replay world like any other: `replay check`, `profile --env replay:OUT` (what
`run --policy reader` needs for these endpoints) and `eval --env replay:OUT` read it without paying again.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from toolorchestra.agent.engine import run_calls
from toolorchestra.backends.base import ToolCall
from toolorchestra.bench.progress import ProgressBar
from toolorchestra.envs.base import Task
from toolorchestra.envs.live.judge import LiveJudge
from toolorchestra.envs.live.record import ReplayRecorder
from toolorchestra.envs.replay.format import read_questions
from toolorchestra.envs.replay.world import judge_answer
from toolorchestra.errors import UserError
from toolorchestra.tools.base import Tool
from toolorchestra.tools.llm import LLMTool


@dataclass
class ModelTally:
    """What recording one model did in this run."""

    model: str
    label: str
    asked: int = 0
    recorded: int = 0
    correct: int = 0
    skipped: int = 0  # answered in an earlier run
    cost_usd: float = 0.0
    judge_cost_usd: float = 0.0
    judged: int = 0  # replies the LLM judge graded (no match)
    errors: list[str] = field(default_factory=list)


def recorded_labels(tools: Sequence[Tool], tool_name: str, models: Sequence[str] | None) -> dict[str, str]:
    """label -> model of `tool_name`'s labels to record (all, or those whose model or label `models` names)."""
    tool = next((tool for tool in tools if tool.name == tool_name), None)
    if tool is None:
        raise UserError(f"--tool {tool_name}: the catalog has no such tool; its tools: {[t.name for t in tools]}")
    if not isinstance(tool, LLMTool) or not tool.labels:
        raise UserError(f"--tool {tool_name}: it offers no model labels to record (expected an llm or answer tool)")
    labels = dict(tool.labels)
    if models:
        unknown = [name for name in models if name not in labels and name not in labels.values()]
        if unknown:
            raise UserError(
                f"--models: {unknown} are neither labels nor models of {tool_name!r} "
                f"(labels: {', '.join(f'{label} -> {model}' for label, model in labels.items())})"
            )
        labels = {label: model for label, model in labels.items() if label in models or model in models}
    slashed = sorted({model for model in labels.values() if "/" in model})
    if slashed:
        raise UserError(
            f"models {slashed}: a recorded model's name is a file name under models/ and the name its profile "
            "goes by, so it cannot hold '/'; rename it in the catalog (its backend's `model:` keeps the "
            "provider's id)"
        )
    first_label: dict[str, str] = {}
    for label, model in labels.items():
        first_label.setdefault(model, label)  # two labels of one model: it is asked once, under the first
    return {label: model for model, label in first_label.items()}


def check_questions(questions: Sequence[Task], out: Path) -> None:
    """UserError when a question has no gold answer (its replies could not be graded), or when `out` already
    holds one of `questions`' ids with another problem, gold answer or split: its recorded answers would be
    graded against the wrong question."""
    ungraded = [task.id for task in questions if not task.gold]
    if ungraded:
        raise UserError(
            f"questions without an 'answer': {len(ungraded)} of {len(questions)} (the first: id {ungraded[0]!r}); "
            "replay record grades every reply against the question's gold answer"
        )
    if not (out / "questions.jsonl").exists():
        return
    recorded = {task.id: task for task in read_questions(out / "questions.jsonl")}
    for task in questions:
        old = recorded.get(task.id)
        if old is None:
            continue
        for field_name in ("prompt", "gold", "split", "subtask"):
            if getattr(old, field_name) != getattr(task, field_name):
                shown = {"prompt": "problem", "gold": "answer", "subtask": "subset"}.get(field_name, field_name)
                raise UserError(
                    f"question {task.id!r}: its {shown} differs from the one recorded in {out / 'questions.jsonl'}; "
                    "record a changed question file into a new --out"
                )


async def record_answers(
    tools: Sequence[Tool],
    tool_name: str,
    labels: dict[str, str],
    questions: Sequence[Task],
    out: Path,
    concurrency: int = 4,
    judge: LiveJudge | None = None,
    progress: bool = False,
) -> list[ModelTally]:
    """Ask every labelled model every question it has not answered in `out` yet, and append each reply that
    did not fail, graded, to `out` (replay format). A reply the format's rule does not match is wrong, or, with
    `judge`, graded by its LLM judge. A failed call (or a failed judge) is counted, not written: a rerun asks
    again."""
    with _exclusive(out):
        recorder = ReplayRecorder(out)
        by_name = {tool.name: tool for tool in tools}
        tallies = {label: ModelTally(model, label) for label, model in labels.items()}
        gate = asyncio.Semaphore(concurrency)

        async def ask(label: str, task: Task, bar: ProgressBar) -> None:
            tally = tallies[label]
            async with gate:
                call = ToolCall(id=f"record-{label}", name=tool_name, arguments={"model": label})
                (result,) = await run_calls(by_name, [call], task)
                tally.asked += 1
                tally.cost_usd += result.cost_usd
                reply = result.answer if result.final else result.output
                if result.error or not reply:
                    tally.errors.append(f"{task.id}: {result.error or 'empty reply'}")
                    bar.advance(False)
                    return
                correct = await _grade(task, reply, judge, tally)
            bar.advance(correct)
            if correct is None:
                return
            line = {
                "response": reply,
                "correct": correct,
                "cost_usd": result.cost_usd,
                "latency_s": result.latency_s,
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "label": label,
            }
            if recorder.add(task, tally.model, line):
                tally.recorded += 1
                tally.correct += correct

        pending = []
        for label, model in labels.items():
            for task in questions:
                if recorder.has(model, task.id):
                    tallies[label].skipped += 1
                else:
                    pending.append((label, task))
        total = len(labels) * len(questions)
        with ProgressBar("record", progress, total=total, done=total - len(pending)) as bar:
            await asyncio.gather(*(ask(label, task, bar) for label, task in pending))
        return list(tallies.values())


@contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    """Hold `out` for this process: two recorders appending to one questions.jsonl would write a question
    twice, and the world would no longer load."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".record.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"--out {out}: another `replay record` is writing it; let it finish (it records every model "
                "it was given, --concurrency calls at once), or record into another --out"
            ) from None
        yield


async def _grade(task: Task, reply: str, judge: LiveJudge | None, tally: ModelTally) -> bool | None:
    """Whether `reply` is right by the replay format's rule, else by `judge` when given; None (and the cause
    in `tally.errors`) when the judge failed, so that no grade is written that the judge did not give."""
    matched = bool(judge_answer(task, reply).correct)
    if matched or judge is None:
        return matched
    verdict = await judge.grade(task, reply)
    tally.judged += verdict.method == "llm_judge"
    tally.judge_cost_usd += verdict.cost_usd
    if verdict.error:
        tally.errors.append(f"{task.id}: {verdict.error}")
        return None
    return verdict.correct


__all__ = ["ModelTally", "check_questions", "record_answers", "recorded_labels"]
