"""The `replay:frames` world: 28 model/reasoning-budget configurations' closed-book FRAMES answers.

Data: `frames/questions.jsonl` (824 questions with gold answers and reasoning types) and
`frames/models/<model>_frames_<budget>.jsonl` (per question the response, an LLM-judge grading A/B/C
and output token counts). Split: even ids train, odd ids test. A question that some configuration did
not answer (ids 214 and 524, both train) is left out.

Cost of a call: recorded output tokens and question tokens (SmolLM2 tokenizer) at the list prices of
`toolorchestra/data/prices_frames.yaml`; latency from the same file. A free-text final answer is
judged by normalized match against the gold answer (judge.normalized_match), or by an `LLMJudge`
when the env is given one (live use).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.catalog.schema import LatencyPrior, ModelSpec, Price, ReplayBackendSpec
from toolorchestra.envs.base import Score, Task
from toolorchestra.envs.replay.base import SPLITS, Recorded, ReplayData, ReplayEnv
from toolorchestra.envs.replay.judge import LLMJudge, final_answer_text, normalize, normalized_match
from toolorchestra.errors import ConfigError, UserError

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

WORLD = "frames"
NOT_ATTEMPTED = {"i dont know", "i do not know", "unknown", "cannot determine", "not sure"}


class FamilyPrices(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_per_m: float = Field(..., ge=0)
    output_per_m: float = Field(..., ge=0)
    source: str
    output_tokens: list[str] = Field(..., min_length=1, description="recorded fields summed into output tokens")
    latency: LatencyPrior


class PriceSheet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    as_of: str
    currency: str
    unit: str
    tokenizer: str
    latency_source: str
    families: dict[str, FamilyPrices]

    def family_of(self, model: str) -> tuple[str, FamilyPrices]:
        """The family whose name the model's file name starts with, e.g. gpt-5-mini for gpt-5-mini_frames_low_effort."""
        matches = [name for name in self.families if model.startswith(f"{name}_")]
        if not matches:
            raise ConfigError(f"prices: no family for model {model!r}; families are {sorted(self.families)}")
        name = max(matches, key=len)
        return name, self.families[name]


def default_price_file() -> Path:
    return Path(str(resources.files("toolorchestra") / "data" / "prices_frames.yaml"))


@lru_cache(maxsize=4)
def load_prices(path: Path) -> PriceSheet:
    if not path.exists():
        raise ConfigError(f"{path}: price file not found")
    try:
        return PriceSheet.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (ValidationError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: invalid FRAMES price sheet: {exc}") from None


@lru_cache(maxsize=4)
def load_frames(data_dir: Path, price_file: Path) -> ReplayData:
    """Parse the questions and every configuration's answers once per data dir."""
    folder = data_dir / WORLD
    questions_path = folder / "questions.jsonl"
    if not questions_path.exists():
        raise UserError(f"{questions_path}: file not found (expected the FRAMES data under <data dir>/{WORLD}/)")
    prices = load_prices(price_file)
    questions = _read_jsonl(questions_path)
    answers: dict[str, dict[int, dict]] = {}
    for path in sorted((folder / "models").glob("*.jsonl")):
        answers[path.stem] = {int(row["id"]): row for row in _read_jsonl(path)}
    if not answers:
        raise UserError(f"{folder / 'models'}: no <model>.jsonl answer files found")
    fields = {model: prices.family_of(model)[1].output_tokens for model in answers}
    tasks: dict[str, list[Task]] = {split: [] for split in SPLITS}
    records: dict[str, dict[str, Recorded]] = {}
    dropped = {split: 0 for split in SPLITS}
    for question in sorted(questions, key=lambda row: int(row["id"])):
        number = int(question["id"])
        split = "train" if number % 2 == 0 else "test"
        if any(number not in rows for rows in answers.values()):
            dropped[split] += 1
            continue
        task = _task(question, split)
        tasks[split].append(task)
        records[task.id] = {model: _record(rows[number], fields[model]) for model, rows in answers.items()}
    return ReplayData(world=WORLD, models=list(answers), tasks=tasks, records=records, dropped=dropped)


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UserError(f"{path}:{number}: not valid JSON: {exc}") from None
    return rows


def _task(question: dict, split: str) -> Task:
    types = [part.strip() for part in str(question.get("reasoning_type", "")).split("|") if part.strip()]
    return Task(id=str(question["id"]), split=split, prompt=question["problem"].strip(),
                subtask=types[0] if types else None, gold=str(question["answer"]),
                meta={"reasoning_types": types})


def _record(row: dict, token_fields: list[str]) -> Recorded:
    present = [name for name in token_fields if row.get(name) is not None]
    tokens = sum(int(row[name]) for name in present) if present else None
    return Recorded(response=str(row.get("response") or ""), correct=row.get("grading") == "A",
                    output_tokens=tokens, grade=row.get("grading"))


class FramesEnv(ReplayEnv):
    name = "replay:frames"

    def __init__(self, data_dir: Path, price_file: Path | None = None, judge: LLMJudge | None = None) -> None:
        price_path = (price_file or default_price_file()).resolve()
        data = load_frames(data_dir.resolve(), price_path)
        self.prices = load_prices(price_path)
        self.judge = judge
        specs = []
        for model in data.models:
            family, sheet = self.prices.family_of(model)
            specs.append(ModelSpec(
                name=model, backend=ReplayBackendSpec(world=WORLD, model=model),
                price=Price(input_per_m=sheet.input_per_m, output_per_m=sheet.output_per_m),
                latency=sheet.latency, description=f"{family} (recorded FRAMES answers, {model})",
            ))
        # gpt-5-mini_frames_low_effort -> gpt-5-mini-low-effort
        labels = {model: model.replace("_frames_", "-").replace("_", "-") for model in data.models}
        super().__init__(data, specs, labels=labels)

    def judge_text(self, task: Task, answer: str) -> Score:
        correct = normalized_match(answer, task.gold or "")
        return Score(correct=correct, details={"method": "normalized", "gold": task.gold,
                                               "extracted": final_answer_text(answer)[:200]})

    async def ascore(self, task: Task, trajectory: Trajectory) -> Score:
        score = self.score(task, trajectory)
        if self.judge is None or score.details.get("method") != "normalized" or trajectory.final_answer is None:
            return score
        grade = await self.judge.grade(task.prompt, task.gold or "", trajectory.final_answer)
        return Score(correct=grade == "A", details={**score.details, "method": "llm_judge", "grade": grade})

    def answer_key(self, task: Task, text: str) -> str | None:
        key = normalize(final_answer_text(text))
        return None if not key or key in NOT_ATTEMPTED else key
