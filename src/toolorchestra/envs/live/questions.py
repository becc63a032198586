"""Question files of the live worlds, read line by line with errors that name the file, the line and the field.

- HLE format (`hle:FILE`, default ../shared/data/hle/hle_text_30.jsonl): `id`, `question`, `answer`,
  `answer_type` (exactMatch or multipleChoice), optional `category`; a question with a non-empty `image` is
  skipped and counted (the orchestrator and experts here read text only). Every question is in the test split.
- FRAMES (`frames-live`, ../shared/data/frames/questions.jsonl): `id`, `problem`, `answer`, `reasoning_type`;
  even ids train, odd ids test, as in replay:frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolorchestra.envs.base import Task
from toolorchestra.envs.replay.format import read_jsonl
from toolorchestra.errors import UserError

ANSWER_TYPES = ("exactMatch", "multipleChoice")


@dataclass
class QuestionSet:
    tasks: list[Task]
    skipped_images: int = 0


def _text(value: object, path: Path, line: int, field: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{path}:{line}: field {field!r}: expected a non-empty string, got {value!r}"[:300])
    return value


def read_hle(path: Path) -> QuestionSet:
    """The text questions of an HLE-format JSONL file, every one in the test split."""
    if not path.is_file():
        raise UserError(f"hle:{path}: file not found (expected HLE-format JSONL: id, question, answer, answer_type)")
    tasks: list[Task] = []
    skipped = 0
    seen: set[str] = set()
    for line in read_jsonl(path):
        row, number = line.value, line.number
        task_id = _text(row.get("id"), path, number, "id")
        if task_id in seen:
            raise UserError(f"{path}:{number}: field 'id': {task_id!r} appears twice")
        seen.add(task_id)
        question = _text(row.get("question"), path, number, "question")
        answer = _text(row.get("answer"), path, number, "answer")
        answer_type = row.get("answer_type")
        if answer_type not in ANSWER_TYPES:
            raise UserError(
                f"{path}:{number}: field 'answer_type': expected one of {list(ANSWER_TYPES)}, got {answer_type!r}"
            )
        if row.get("image"):
            skipped += 1
            continue
        category = row.get("category")
        tasks.append(
            Task(
                id=task_id,
                split="test",
                prompt=question.strip(),
                subtask=str(category) if category else None,
                gold=answer.strip(),
                meta={"answer_type": answer_type},
            )
        )
    if not tasks:
        raise UserError(f"{path}: no text question (every line has an image, or the file is empty)")
    return QuestionSet(tasks, skipped)


def read_frames(path: Path) -> QuestionSet:
    """FRAMES questions; even ids train, odd ids test."""
    if not path.is_file():
        raise UserError(f"{path}: file not found (expected the FRAMES questions under <data dir>/frames/)")
    tasks = []
    for line in read_jsonl(path):
        row, number = line.value, line.number
        task_id = _text(row.get("id"), path, number, "id")
        if not task_id.isdigit():
            raise UserError(f"{path}:{number}: field 'id': expected an integer, got {task_id!r}")
        types = [part.strip() for part in str(row.get("reasoning_type", "")).split("|") if part.strip()]
        tasks.append(
            Task(
                id=task_id,
                split="train" if int(task_id) % 2 == 0 else "test",
                prompt=_text(row.get("problem"), path, number, "problem").strip(),
                subtask=types[0] if types else None,
                gold=_text(row.get("answer"), path, number, "answer").strip(),
                meta={"answer_type": "exactMatch"},
            )
        )
    return QuestionSet(tasks)


__all__ = ["ANSWER_TYPES", "QuestionSet", "read_frames", "read_hle"]
