"""Converters from other published layouts into the replay format (`toolorchestra replay import-...`).

`import_routerbench`: RouterBench-style wide CSVs (one row per prompt; per model a 0/1 score column `<model>`,
`<model>|model_response` and `<model>|total_cost`; `sample_id`, `prompt`, `eval_name`) into a replay directory:
- questions.jsonl: `id` = `<sample_id>#<row key>` (as replay:routerbench names tasks), `problem` = the prompt,
  `subset` = eval_name, `split` = train/test from a file name ending in _train/_test, else by row parity;
  `answer` = for a multiple-choice prompt, the option letter every model graded correct gave (or the one
  option no model chose when none was right), as replay:routerbench derives it; otherwise none;
- models/<name>.jsonl: `id`, `response`, `correct` (score >= 0.5) and `cost_usd`; an empty score or cost cell
  writes no line, so the loader leaves that question out and counts it. `<name>` is the part of the model
  name after its last '/' (the whole name with '/' as '--' where two would collide).
Questions are written in a fixed order mixed across files (by a hash of the id), as replay:routerbench orders
its tasks, so `--limit N` samples every subset.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolorchestra.envs.replay.base import Recorded
from toolorchestra.envs.replay.format import MODELS, QUESTIONS
from toolorchestra.envs.replay.routerbench import MULTIPLE_CHOICE, _gold_letter, _last_question, _options, _unwrap
from toolorchestra.errors import UserError

MULTIPLE_CHOICE_MARK = "single choice"


@dataclass
class ImportSummary:
    """What an import wrote: questions per split, lines per model and the cells left empty."""

    out: Path
    questions: dict[str, int] = field(default_factory=lambda: {"train": 0, "test": 0})
    lines: dict[str, int] = field(default_factory=dict)
    empty_cells: int = 0


def import_routerbench(csv_paths: Sequence[Path], out: Path) -> ImportSummary:
    """Write the replay directory `out` from RouterBench-style CSVs (see the module docstring)."""
    _check_out(out)
    csv.field_size_limit(sys.maxsize)  # responses and few-shot prompts exceed the 128 KiB default
    questions: list[dict[str, Any]] = []
    answers: dict[str, list[dict[str, Any]]] = {}
    summary = ImportSummary(out=out)
    seen: set[str] = set()
    for path in csv_paths:
        _read_csv(path, questions, answers, summary, seen)
    names = file_names(list(answers))
    questions.sort(key=lambda row: hashlib.sha1(str(row["id"]).encode()).hexdigest())
    order = {row["id"]: index for index, row in enumerate(questions)}
    (out / MODELS).mkdir(parents=True)
    _write_jsonl(out / QUESTIONS, questions)
    for model, rows in answers.items():
        rows.sort(key=lambda row: order[row["id"]])
        _write_jsonl(out / MODELS / f"{names[model]}.jsonl", rows)
        summary.lines[names[model]] = len(rows)
    return summary


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory; give a new one")


def _read_csv(
    path: Path,
    questions: list[dict[str, Any]],
    answers: dict[str, list[dict[str, Any]]],
    summary: ImportSummary,
    seen: set[str],
) -> None:
    if not path.is_file():
        raise UserError(f"{path}: file not found")
    split_of_file = "train" if path.stem.endswith("_train") else "test" if path.stem.endswith("_test") else None
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        models = _models(path, reader.fieldnames or [])
        for index, row in enumerate(reader):
            line = index + 2  # the header is line 1
            question = _question(path, line, row, index, split_of_file, seen)
            recorded = _recorded_cells(row, models)
            summary.empty_cells += len(models) - len(recorded)
            gold = _gold(question["problem"], row, recorded)
            if gold is not None:
                question["answer"] = gold
            questions.append(question)
            summary.questions[question["split"]] += 1
            for model, record in recorded.items():
                answers.setdefault(model, []).append(
                    {
                        "id": question["id"],
                        "response": record.response,
                        "correct": record.correct,
                        "cost_usd": record.cost_usd,
                    }
                )


def _models(path: Path, columns: Sequence[str]) -> list[str]:
    models = [c for c in columns if f"{c}|model_response" in columns and f"{c}|total_cost" in columns]
    missing = [name for name in ("sample_id", "prompt") if name not in columns]
    if not models or missing:
        raise UserError(
            f"{path}: not a RouterBench-style CSV: expected columns sample_id, prompt (eval_name "
            "optional) and per model <model>, <model>|model_response, <model>|total_cost"
        )
    return models


def _question(
    path: Path, line: int, row: dict[str, str], index: int, split: str | None, seen: set[str]
) -> dict[str, Any]:
    sample_id = (row.get("sample_id") or "").strip()
    if not sample_id:
        raise UserError(f"{path}:{line}: field 'sample_id': empty")
    row_key = (row.get("") or "").strip() or f"{path.stem}-{index}"
    question_id = f"{sample_id}#{row_key}"
    if question_id in seen:
        question_id = f"{question_id}@{path.stem}"
    seen.add(question_id)
    subset = (row.get("eval_name") or "").strip() or sample_id.split(".")[0]
    return {
        "id": question_id,
        "problem": _unwrap(row["prompt"]),
        "subset": subset,
        "split": split or ("train" if index % 2 == 0 else "test"),
    }


def _recorded_cells(row: dict[str, str], models: list[str]) -> dict[str, Recorded]:
    recorded = {}
    for model in models:
        score, cost = (row.get(model) or "").strip(), (row.get(f"{model}|total_cost") or "").strip()
        if not score or not cost:
            continue
        recorded[model] = Recorded(
            response=_unwrap(row.get(f"{model}|model_response") or ""),
            correct=float(score) >= 0.5,
            cost_usd=float(cost),
        )
    return recorded


def _gold(prompt: str, row: dict[str, str], recorded: dict[str, Recorded]) -> str | None:
    """The gold option letter of a multiple-choice prompt (replay:routerbench's rule); None otherwise."""
    query = _last_question(prompt)
    if (row.get("eval_name") or "") not in MULTIPLE_CHOICE and MULTIPLE_CHOICE_MARK not in query:
        return None
    return _gold_letter(recorded, _options(query)) if recorded else None


def file_names(models: list[str]) -> dict[str, str]:
    """File stem per model: the part after the last '/', or the whole name with '/' as '--' on a collision."""
    short = {model: model.rsplit("/", 1)[-1] for model in models}
    counts = Counter(short.values())
    return {model: name if counts[name] == 1 else model.replace("/", "--") for model, name in short.items()}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
