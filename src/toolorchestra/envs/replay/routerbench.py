"""The `replay:routerbench` world: 11 models' recorded answers to ARC-Challenge, MBPP and Winogrande.

Data: `routerbench/{arc_challenge,mbpp,winogrande}_{train,test}.csv` under the data dir. Per prompt and
model, a 0/1 score, the response (a Python list literal holding one string) and the measured dollar
cost. A row where any model's score or cost cell is empty is left out (8 of 953 test rows, 20 of 2,225
train rows).

RouterBench has no gold-answer column. A free-text final answer is judged as follows:
- ARC-Challenge and Winogrande (multiple choice): the option letter it commits to is compared with the
  gold letter, the letter every model graded correct gave (they always agree); when no model was
  correct, the gold is the one option no model chose, if exactly one is left; otherwise unknown and
  the answer counts as wrong.
- MBPP (code): recorded grades come from unit tests that are not in the data, so only a final answer
  that is a recorded response (inherited grade) can be correct.

Latency: output tokens (counted with the SmolLM2 tokenizer, see tokens.py) at a per-model throughput
plus a fixed overhead, from `LATENCY` below (rough published figures for these 2023-era endpoints;
pass `latency=` to override).

Task order is fixed but mixed across the three subsets (sorted by a hash of the id), so `--limit N`
takes a sample of all three.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import re
import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

from toolorchestra.catalog.schema import LatencyPrior, ModelSpec, Price, ReplayBackendSpec
from toolorchestra.envs.base import Score, Task
from toolorchestra.envs.replay.base import SPLITS, Recorded, ReplayData, ReplayEnv, shown_prices
from toolorchestra.envs.replay.judge import option_letter
from toolorchestra.errors import UserError

WORLD = "routerbench"
SUBSETS = ("arc_challenge", "mbpp", "winogrande")
MULTIPLE_CHOICE = {"arc-challenge", "winogrande"}

# Seconds of fixed overhead and output tokens per second. Assumed figures of the order the providers'
# endpoints showed in 2023-24 (public throughput dashboards); they set simulated latency only.
LATENCY: dict[str, LatencyPrior] = {
    "WizardLM/WizardLM-13B-V1.2": LatencyPrior(overhead_s=0.4, output_tokens_per_s=60),
    "claude-instant-v1": LatencyPrior(overhead_s=0.6, output_tokens_per_s=90),
    "claude-v1": LatencyPrior(overhead_s=1.0, output_tokens_per_s=35),
    "claude-v2": LatencyPrior(overhead_s=1.0, output_tokens_per_s=35),
    "gpt-3.5-turbo-1106": LatencyPrior(overhead_s=0.5, output_tokens_per_s=70),
    "gpt-4-1106-preview": LatencyPrior(overhead_s=0.8, output_tokens_per_s=25),
    "meta/code-llama-instruct-34b-chat": LatencyPrior(overhead_s=0.5, output_tokens_per_s=40),
    "meta/llama-2-70b-chat": LatencyPrior(overhead_s=0.6, output_tokens_per_s=30),
    "mistralai/mistral-7b-chat": LatencyPrior(overhead_s=0.3, output_tokens_per_s=100),
    "mistralai/mixtral-8x7b-chat": LatencyPrior(overhead_s=0.4, output_tokens_per_s=80),
    "zero-one-ai/Yi-34B-Chat": LatencyPrior(overhead_s=0.5, output_tokens_per_s=40),
}

# Short labels for the orchestrator's tools (the full names cost it many prompt tokens).
LABELS = {
    "WizardLM/WizardLM-13B-V1.2": "wizardlm-13b",
    "claude-instant-v1": "claude-instant",
    "claude-v1": "claude-v1",
    "claude-v2": "claude-v2",
    "gpt-3.5-turbo-1106": "gpt-3.5",
    "gpt-4-1106-preview": "gpt-4",
    "meta/code-llama-instruct-34b-chat": "codellama-34b",
    "meta/llama-2-70b-chat": "llama2-70b",
    "mistralai/mistral-7b-chat": "mistral-7b",
    "mistralai/mixtral-8x7b-chat": "mixtral-8x7b",
    "zero-one-ai/Yi-34B-Chat": "yi-34b",
}

_CHOICES = re.compile(r'single choice\s+from\s+((?:"[A-Z]"(?:\s*or\s*)?)+)')
_OPTION_LINE = re.compile(r"^([A-E])\)", re.MULTILINE)


@lru_cache(maxsize=4)
def load_routerbench(data_dir: Path) -> ReplayData:
    """Parse the six CSVs once per data dir (the trainer builds many envs over the same data)."""
    folder = data_dir / WORLD
    csv.field_size_limit(sys.maxsize)  # responses and few-shot prompts exceed the 128 KiB default
    models: list[str] | None = None
    tasks: dict[str, list[Task]] = {split: [] for split in SPLITS}
    records: dict[str, dict[str, Recorded]] = {}
    dropped = {split: 0 for split in SPLITS}
    for split in SPLITS:
        for subset in SUBSETS:
            path = folder / f"{subset}_{split}.csv"
            if not path.exists():
                raise UserError(f"{path}: file not found (expected the RouterBench CSVs under <data dir>/{WORLD}/)")
            with open(path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                file_models = _score_columns(path, reader.fieldnames or [])
                models = models or file_models
                for index, row in enumerate(reader):
                    # sample_id repeats for a few duplicated train prompts; a row key keeps ids unique.
                    row_key = (row.get("") or "").strip() or f"{subset}-{split}-{index}"
                    parsed = _parse_row(row, split, models, row_key)
                    if parsed is None:
                        dropped[split] += 1
                        continue
                    task, task_records = parsed
                    tasks[split].append(task)
                    records[task.id] = task_records
        tasks[split].sort(key=lambda task: hashlib.sha1(task.id.encode()).hexdigest())
    return ReplayData(world=WORLD, models=models or [], tasks=tasks, records=records, dropped=dropped)


def _score_columns(path: Path, columns: Sequence[str]) -> list[str]:
    models = [c for c in columns if f"{c}|model_response" in columns and f"{c}|total_cost" in columns]
    if not models or "prompt" not in columns or "sample_id" not in columns:
        raise UserError(
            f"{path}: expected columns sample_id, prompt, eval_name and per model "
            "<model>, <model>|model_response, <model>|total_cost"
        )
    return models


def _parse_row(
    row: dict[str, str], split: str, models: list[str], row_key: str
) -> tuple[Task, dict[str, Recorded]] | None:
    if any(not row.get(model, "").strip() or not row.get(f"{model}|total_cost", "").strip() for model in models):
        return None
    task_records = {
        model: Recorded(
            response=_unwrap(row[f"{model}|model_response"]),
            correct=float(row[model]) >= 0.5,
            cost_usd=float(row[f"{model}|total_cost"]),
        )
        for model in models
    }
    prompt = _unwrap(row["prompt"])
    subtask = row.get("eval_name") or row["sample_id"].split(".")[0]
    task_id = f"{row['sample_id']}#{row_key}"
    query = _last_question(prompt)
    meta: dict[str, object] = {"query": query, "sample_id": row["sample_id"]}
    gold = None
    if subtask in MULTIPLE_CHOICE:
        options = _options(query)
        meta["options"] = options
        gold = _gold_letter(task_records, options)
    return Task(id=task_id, split=split, prompt=prompt, subtask=subtask, gold=gold, meta=meta), task_records


def _unwrap(cell: str) -> str:
    """Cells hold a Python list literal with one string, e.g. "['B\\n']"; other cells are kept as is."""
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return cell
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        return "\n".join(value)
    return cell


def _last_question(prompt: str) -> str:
    """The question actually asked: the last block of a few-shot prompt."""
    blocks = [block for block in prompt.split("\n\n") if block.strip()]
    return blocks[-1].strip() if blocks else prompt


def _options(question: str) -> str:
    match = _CHOICES.search(question)
    letters = re.findall(r"[A-Z]", match.group(1)) if match else _OPTION_LINE.findall(question)
    return "".join(letters) or "ABCD"


def _gold_letter(task_records: dict[str, Recorded], options: str) -> str | None:
    letters = {name: option_letter(record.response, options) for name, record in task_records.items()}
    right = {letters[name] for name, record in task_records.items() if record.correct and letters[name]}
    if len(right) == 1:
        return right.pop()
    if right:
        return None  # graders disagree: no trustworthy gold
    wrong = {letters[name] for name, record in task_records.items() if letters[name]}
    left = [letter for letter in options if letter not in wrong]
    return left[0] if len(left) == 1 else None


class RouterBenchEnv(ReplayEnv):
    name = "replay:routerbench"

    def __init__(self, data_dir: Path, latency: Mapping[str, LatencyPrior] | None = None) -> None:
        data = load_routerbench(data_dir.resolve())
        latency_by_model = {**LATENCY, **(latency or {})}
        specs = [
            ModelSpec(
                name=model,
                backend=ReplayBackendSpec(world=WORLD, model=model),
                price=Price(per_call=price),
                latency=latency_by_model.get(model, LatencyPrior()),
                description=f"{model} (recorded RouterBench answers)",
            )
            for model, price in shown_prices(data).items()
        ]
        super().__init__(data, specs, labels=LABELS)

    def as_dev_world(self, seed: int = 0) -> None:
        """The dev world, with the price table measured on its own train half: the prices shown are mean train
        costs, and the dev world's test half must not leak into them."""
        super().as_dev_world(seed)
        prices = shown_prices(self.data)
        self._build_pool(
            [spec.model_copy(update={"price": Price(per_call=prices[name])}) for name, spec in self.specs.items()]
        )

    def judge_text(self, task: Task, answer: str) -> Score:
        if task.subtask not in MULTIPLE_CHOICE:
            return Score(
                correct=False,
                details={
                    "method": "unjudgeable",
                    "reason": "code answers are graded only by inheriting a recorded grade",
                },
            )
        letter = option_letter(answer, str(task.meta.get("options", "ABCDE")))
        correct = task.gold is not None and letter == task.gold
        return Score(correct=correct, details={"method": "letter", "extracted": letter, "gold": task.gold})

    def answer_key(self, task: Task, text: str) -> str | None:
        if task.subtask not in MULTIPLE_CHOICE:
            return None
        return option_letter(text, str(task.meta.get("options", "ABCDE")))
