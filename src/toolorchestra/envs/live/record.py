"""Live runs become replay worlds: every expert answer a live eval buys is written, as its episode is scored, in
the replay format of docs/replay.md, so `replay:<run>/replay` trains and evaluates orchestrators later without
paying again.

    <run>/replay/questions.jsonl       id, problem, answer (gold), split, subset
    <run>/replay/models/<model>.jsonl  id, response (the extracted answer), correct, cost_usd, latency_s,
                                       prompt_tokens, completion_tokens, raw_response, label

A model answers a question once in the format: its first answer is kept. Lines are appended and flushed one
by one, so a killed run keeps what it bought, and a resumed run adds only what is new.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.files import drop_torn_tail

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Step
    from toolorchestra.envs.base import Task


def _ids(path: Path) -> set[str]:
    """The ids a file of the format holds. A last line that a kill cut short is cut off first, so that the
    next append starts a fresh line and that answer is bought again."""
    if not path.exists():
        return set()
    drop_torn_tail(path)
    found = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            found.add(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return found


class ReplayRecorder:
    """Appends answers to a replay-format folder, each model's answer to a question once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        (folder / "models").mkdir(parents=True, exist_ok=True)
        self.questions = _ids(folder / "questions.jsonl")
        self.answered: dict[str, set[str]] = {}

    def _append(self, path: Path, record: dict[str, Any]) -> None:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()

    def record(self, task: Task, step: Step, correct: bool) -> None:
        """Write one bought answer (an answer-tool step with a model) and its question, once each."""
        if step.model is None or step.error or not step.meta.get("attempt"):
            return
        answer = {
            "response": str(step.meta["attempt"]),
            "correct": bool(correct),
            "cost_usd": step.cost_usd,
            "latency_s": step.latency_s,
            "prompt_tokens": step.prompt_tokens,
            "completion_tokens": step.completion_tokens,
            "label": step.label,
            "raw_response": step.meta.get("response"),
        }
        self.add(task, step.model, answer)

    def has(self, model: str, task_id: str) -> bool:
        """Whether `model`'s answer to `task_id` is in the folder already (a resumed run skips it)."""
        return task_id in self._answered(model)

    def add(self, task: Task, model: str, answer: dict[str, Any]) -> bool:
        """Append `model`'s `answer` line (response, correct, cost_usd, ...) and the question, each once;
        False when the model had answered it already."""
        if task.id not in self.questions:
            question = {"id": task.id, "problem": task.prompt, "answer": task.gold, "split": task.split}
            self._append(
                self.folder / "questions.jsonl", {**question, "subset": task.subtask} if task.subtask else question
            )
            self.questions.add(task.id)
        answered = self._answered(model)
        if task.id in answered:
            return False
        self._append(self.model_file(model), {"id": task.id, **answer})
        answered.add(task.id)
        return True

    def model_file(self, model: str) -> Path:
        return self.folder / "models" / f"{model.replace('/', '_')}.jsonl"

    def _answered(self, model: str) -> set[str]:
        if model not in self.answered:
            self.answered[model] = _ids(self.model_file(model))
        return self.answered[model]


__all__ = ["ReplayRecorder"]
