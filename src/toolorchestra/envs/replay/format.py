"""The replay format: reading and validating a directory of recorded answers (docs/replay.md).

A replay world on disk is `questions.jsonl`, `models/<name>.jsonl` and an optional `prices.yaml`. This module
owns the format's rules and nothing else: the line models, the price sheet, and `load_world`, which turns a
`WorldSource` (where lines come from) into `ReplayData` plus the pricing of each model. Every mistake raises
`FormatError`, whose message names the file, the line and the field. `DirectorySource` reads a directory in
the format; other sources (the FRAMES adapter in frames.py) present differently laid out data in its terms.

What the rules are (the doc says the same in prose):
- a question's split is its `split` field, else its id's parity (even train, odd test);
- a model line is graded by `correct` (bool) or `grading` (A correct, B incorrect, C not attempted), one of
  the two per line and the same one in every line of a file;
- a call costs the line's `cost_usd` when recorded, else its tokens at the model's `prices.yaml` entry
  (`prompt_tokens`, else the question's tokens counted; `completion_tokens` + `reasoning_tokens`, else the
  response's tokens counted); a model with an unrecorded cost and no price entry is an error;
- a question that some model did not answer is left out and counted per split.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from toolorchestra.catalog.schema import LatencyPrior, Price
from toolorchestra.envs.base import Task
from toolorchestra.envs.replay.base import SPLITS, Recorded, ReplayData
from toolorchestra.errors import UserError
from toolorchestra.files import MAX_LINE_BYTES_ENV, MAX_TEXT_FILE_BYTES, LineTooLong, read_lines, yaml_problem

QUESTIONS = "questions.jsonl"
MODELS = "models"
PRICES = "prices.yaml"
GRADES = {"A": True, "B": False, "C": False}

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
Count = Annotated[int, Field(ge=0, strict=True)]
LineId = StrictStr | StrictInt


class FormatError(UserError):
    """A replay directory that breaks the format: names the file, the line (if any) and the field (if any)."""

    def __init__(self, path: Path | str, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.path, self.line, self.field = str(path), line, field
        where = self.path + (f":{line}" if line is not None else "")
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")


# --- line models -------------------------------------------------------------------------------
class QuestionLine(BaseModel):
    """One line of questions.jsonl; fields not named here are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: LineId
    problem: StrictStr
    answer: StrictStr | StrictInt | Annotated[float, Field(strict=True)] | None = None
    split: Literal["train", "test"] | None = None
    subset: StrictStr | None = None


class AnswerLine(BaseModel):
    """One line of models/<name>.jsonl; fields not named here are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: LineId
    response: StrictStr
    correct: StrictBool | None = None
    grading: Literal["A", "B", "C"] | None = None
    cost_usd: NonNegativeFloat | None = None
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    reasoning_tokens: Count | None = None
    latency_s: NonNegativeFloat | None = None


class PriceEntry(BaseModel):
    """Prices and latency prior of one model, or of every model whose name starts with the entry's key."""

    model_config = ConfigDict(extra="forbid")

    input_per_m: NonNegativeFloat
    output_per_m: NonNegativeFloat
    overhead_s: NonNegativeFloat | None = None
    output_tokens_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)] | None = None
    source: str | None = Field(None, description="where the prices come from (a note; not used)")

    def price(self) -> Price:
        return Price(input_per_m=self.input_per_m, output_per_m=self.output_per_m)

    def latency(self) -> LatencyPrior:
        default = LatencyPrior()
        return LatencyPrior(
            overhead_s=default.overhead_s if self.overhead_s is None else self.overhead_s,
            output_tokens_per_s=self.output_tokens_per_s or default.output_tokens_per_s,
        )


class PriceSheet(BaseModel):
    """prices.yaml: `models:` maps a model name or a model-name prefix to a `PriceEntry`; other top-level
    keys (as_of, currency, notes) are ignored."""

    model_config = ConfigDict(extra="ignore")

    models: dict[str, PriceEntry]

    def entry_for(self, model: str) -> tuple[str, PriceEntry] | None:
        """The entry named exactly `model`, else the one with the longest key that `model` starts with."""
        if model in self.models:
            return model, self.models[model]
        keys = [key for key in self.models if model.startswith(key)]
        if not keys:
            return None
        key = max(keys, key=len)
        return key, self.models[key]


def read_price_sheet(path: Path) -> PriceSheet:
    """Parse a price sheet in the format's layout; errors name the file and the key path."""
    if not path.is_file():
        raise FormatError(path, "price sheet not found")
    text = _sheet_text(path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc, text)
        raise FormatError(path, f"not valid YAML: {problem}", line=line) from None
    except RecursionError:
        raise FormatError(path, "not a price sheet: nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits, which Python refuses to convert
        raise FormatError(path, f"not a price sheet: {_clipped(str(exc))}") from None
    if not isinstance(raw, dict) or "models" not in raw:
        raise FormatError(
            path, "expected a mapping with a 'models:' key (model name or prefix -> prices)", field="models"
        )
    try:
        return PriceSheet.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise FormatError(path, _pydantic_message(error), field=".".join(str(part) for part in error["loc"])) from None


def _sheet_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_TEXT_FILE_BYTES:
        raise FormatError(path, f"{size:,} bytes, larger than the {MAX_TEXT_FILE_BYTES:,} a price sheet may have")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            path,
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); expected a "
            "YAML price sheet (see docs/replay.md)",
            line=data.count(b"\n", 0, exc.start) + 1,
        ) from None


def _clipped(text: str, limit: int = 60) -> str:
    """`text` cut to `limit` characters, so that a message about a huge value stays one short line."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


# --- where lines come from ---------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """One parsed JSONL line: its file, 1-based line number and JSON object."""

    path: Path
    number: int
    value: dict[str, Any]


class WorldSource(Protocol):
    """Lines of a world in the format's terms, wherever they are stored."""

    root: Path

    def questions(self) -> Iterator[Line]: ...

    def models(self) -> list[str]: ...

    def answers(self, model: str) -> Iterator[Line]: ...

    def prices(self) -> PriceSheet | None: ...


def read_jsonl(path: Path, limit: int | None = None) -> Iterator[Line]:
    """The JSON objects of a JSONL file with their line numbers; blank lines are skipped. A line longer than
    `limit` bytes (default: lines.max_line_bytes()) is refused before it is read into memory."""
    try:
        for number, raw in read_lines(path, limit):
            if not raw.strip():
                continue
            yield Line(path, number, _parse_line(path, number, raw))
    except LineTooLong as exc:
        raise FormatError(
            path,
            f"line longer than {exc.limit:,} bytes, refused without reading it (expected one "
            f"JSON object per line; {MAX_LINE_BYTES_ENV} raises the limit)",
            line=exc.line,
        ) from None


def _parse_line(path: Path, number: int, raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            path,
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); expected "
            "one JSON object per line",
            line=number,
        ) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"not valid JSON: {exc.msg} (column {exc.colno})", line=number) from None
    except RecursionError:
        raise FormatError(path, "JSON nested too deeply to read; expected a flat JSON object", line=number) from None
    except ValueError:  # the one ValueError json.loads raises beyond a decode error: an integer too long to read
        raise FormatError(
            path,
            f"a number of more than {sys.get_int_max_str_digits()} digits, which Python refuses "
            "to read; expected ids and numbers of ordinary size",
            line=number,
        ) from None
    if not isinstance(value, dict):
        raise FormatError(path, f"expected a JSON object, got {type(value).__name__}", line=number)
    return value


class DirectorySource:
    """A directory laid out in the replay format."""

    def __init__(self, root: Path) -> None:
        self.root = root
        if not root.is_dir():
            problem = "a file, not a directory" if root.exists() else "directory not found"
            raise FormatError(
                root,
                f"{problem} (expected a directory of questions.jsonl, models/<name>.jsonl and an "
                "optional prices.yaml; see docs/replay.md)",
            )
        if not (root / QUESTIONS).is_file():
            raise FormatError(root / QUESTIONS, "file not found")
        folder = root / MODELS
        if not folder.is_dir():
            raise FormatError(folder, "folder not found: every model's answers go in models/<name>.jsonl")
        self._files = {path.stem: path for path in sorted(folder.glob("*.jsonl"))}
        if not self._files:
            raise FormatError(folder, "no <name>.jsonl files: a world needs at least one model")

    def questions(self) -> Iterator[Line]:
        return read_jsonl(self.root / QUESTIONS)

    def models(self) -> list[str]:
        return list(self._files)

    def answers(self, model: str) -> Iterator[Line]:
        return read_jsonl(self._files[model])

    def prices(self) -> PriceSheet | None:
        path = self.root / PRICES
        return read_price_sheet(path) if path.exists() else None

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        """Names, sizes and modification times of the world's files (a cache key that sees edits)."""
        paths = [self.root / QUESTIONS, self.root / PRICES, *self._files.values()]
        return tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in paths if path.exists())


# --- loading -----------------------------------------------------------------------------------
@dataclass
class ModelPricing:
    """How a model's calls are charged: its price entry (None: recorded cost only) and where it came from."""

    entry: PriceEntry | None
    key: str | None = None  # the prices.yaml key that matched (the name itself or a prefix)


@dataclass
class LoadedWorld:
    """A validated world: the replay data, each model's pricing and per-model coverage counts."""

    data: ReplayData
    pricing: dict[str, ModelPricing]
    answered: dict[str, int]  # model -> questions it answered
    questions: int  # questions in questions.jsonl
    files: dict[str, str] = field(default_factory=dict)  # model -> its file, for messages


def load_world(source: WorldSource, world: str) -> LoadedWorld:
    """Validate every line of `source` and build the world (see the module docstring for the rules)."""
    tasks_by_id = _question_tasks(source.questions(), getattr(source, "root", "questions"))
    prices = source.prices()
    answers: dict[str, dict[str, Recorded]] = {}
    pricing: dict[str, ModelPricing] = {}
    files: dict[str, str] = {}
    for model in source.models():
        matched = prices.entry_for(model) if prices else None
        pricing[model] = ModelPricing(entry=matched[1] if matched else None, key=matched[0] if matched else None)
        answers[model], files[model] = _read_answers(source, model, tasks_by_id, pricing[model])
    tasks: dict[str, list[Task]] = {split: [] for split in SPLITS}
    records: dict[str, dict[str, Recorded]] = {}
    dropped = {split: 0 for split in SPLITS}
    for task_id, task in tasks_by_id.items():
        if any(task_id not in rows for rows in answers.values()):
            dropped[task.split] += 1
            continue
        tasks[task.split].append(task)
        records[task_id] = {model: rows[task_id] for model, rows in answers.items()}
    data = ReplayData(world=world, models=list(answers), tasks=tasks, records=records, dropped=dropped)
    return LoadedWorld(
        data=data,
        pricing=pricing,
        answered={model: len(rows) for model, rows in answers.items()},
        questions=len(tasks_by_id),
        files=files,
    )


def read_questions(path: Path) -> list[Task]:
    """The questions of one questions.jsonl file, validated by the format's rules (what `replay record` asks
    a pool's models before any model file exists)."""
    if not path.is_file():
        raise FormatError(path, "file not found (expected questions.jsonl: id, problem, answer, split, subset)")
    return list(_question_tasks(read_jsonl(path), path).values())


def _question_tasks(lines: Iterator[Line], where: Path | str) -> dict[str, Task]:
    """The questions by id, in the order of their lines."""
    tasks: dict[str, Task] = {}
    first_line: dict[str, int] = {}
    for line in lines:
        question = _validate(QuestionLine, line)
        task_id = _new_id(question.id, line, first_line)
        split = question.split or _split_by_parity(question.id, line)
        gold = None if question.answer is None else str(question.answer)
        tasks[task_id] = Task(id=task_id, split=split, prompt=question.problem, subtask=question.subset, gold=gold)
    if not tasks:
        raise FormatError(where, f"{QUESTIONS} holds no question")
    return tasks


def _new_id(line_id: LineId, line: Line, first_line: dict[str, int]) -> str:
    """The line's id as a task id, recorded in `first_line`; an id an earlier line of the file has is an error."""
    task_id = str(line_id)
    if task_id in first_line:
        raise FormatError(
            line.path,
            f"duplicate id {_clipped(repr(line_id))} (first on line {first_line[task_id]})",
            line=line.number,
            field="id",
        )
    first_line[task_id] = line.number
    return task_id


def _split_by_parity(task_id: str | int, line: Line) -> str:
    if isinstance(task_id, str):
        try:
            task_id = int(task_id)
        except ValueError:
            raise FormatError(
                line.path,
                f"id {_clipped(repr(task_id))} is not an integer (of at most 4300 digits), "
                "so its split cannot follow id parity: "
                "give this question a 'split' (train or test)",
                line=line.number,
                field="split",
            ) from None
    return "train" if task_id % 2 == 0 else "test"


def _read_answers(
    source: WorldSource, model: str, tasks: Mapping[str, Task], pricing: ModelPricing
) -> tuple[dict[str, Recorded], str]:
    rows: dict[str, Recorded] = {}
    first_line: dict[str, int] = {}
    grade_field: tuple[str, int] | None = None  # the file's grade field and the line that set it
    path = ""
    for line in source.answers(model):
        path = str(line.path)
        answer = _validate(AnswerLine, line)
        if str(answer.id) not in tasks:
            raise FormatError(
                line.path,
                f"unknown id {_clipped(repr(answer.id))}: no question with this id in {QUESTIONS}",
                line=line.number,
                field="id",
            )
        task_id = _new_id(answer.id, line, first_line)
        grade_field = _check_grade_field(answer, line, grade_field)
        if answer.cost_usd is None and pricing.entry is None:
            raise FormatError(
                line.path,
                f"model {model!r} has no recorded cost here and no price: give "
                f"'cost_usd' on every line, or prices for {model!r} (or a prefix of it) in {PRICES}",
                line=line.number,
                field="cost_usd",
            )
        rows[task_id] = _recorded(answer)
    return rows, path


def _check_grade_field(answer: AnswerLine, line: Line, seen: tuple[str, int] | None) -> tuple[str, int]:
    if answer.correct is not None and answer.grading is not None:
        raise FormatError(
            line.path,
            "both 'correct' and 'grading' are given; grade each line with one of them",
            line=line.number,
            field="grading",
        )
    if answer.correct is None and answer.grading is None:
        raise FormatError(
            line.path,
            "missing grade: give 'correct' (true/false) or 'grading' (A, B or C)",
            line=line.number,
            field="correct",
        )
    name = "correct" if answer.correct is not None else "grading"
    if seen is not None and seen[0] != name:
        raise FormatError(
            line.path,
            f"mixed grade fields: line {seen[1]} grades with '{seen[0]}', this line with "
            f"'{name}'; use one grade field in every line of a file",
            line=line.number,
            field=name,
        )
    return seen or (name, line.number)


def _recorded(answer: AnswerLine) -> Recorded:
    counted = [count for count in (answer.completion_tokens, answer.reasoning_tokens) if count is not None]
    correct = answer.correct if answer.correct is not None else GRADES[str(answer.grading)]
    return Recorded(
        response=answer.response,
        correct=correct,
        cost_usd=answer.cost_usd,
        output_tokens=sum(counted) if counted else None,
        grade=answer.grading,
        prompt_tokens=answer.prompt_tokens,
        latency_s=answer.latency_s,
    )


def _validate(model: type[BaseModel], line: Line) -> Any:
    try:
        return model.model_validate(line.value)
    except ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else None
        raise FormatError(line.path, _pydantic_message(error), line=line.number, field=name) from None


def _pydantic_message(error: Mapping[str, Any]) -> str:
    if error["type"] == "missing":
        return "missing (required)"
    value = error.get("input")
    try:
        shown = _clipped(json.dumps(value) if _jsonable(value) else repr(value))
    except (RecursionError, ValueError):  # a deeply nested value, or an int too long to print
        shown = f"a {type(value).__name__} that cannot be shown"
    return f"{_clipped(error['msg'], 200)}, got {shown}"


def _jsonable(value: Any) -> bool:
    if isinstance(value, float) and not math.isfinite(value):
        return False
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True
