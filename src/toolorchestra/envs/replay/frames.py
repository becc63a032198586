"""The `replay:frames` world: 28 model/reasoning-budget configurations' closed-book FRAMES answers.

Data: `frames/questions.jsonl` (824 questions with gold answers and reasoning types) and
`frames/models/<model>_frames_<budget>.jsonl` (per question the response, an LLM-judge grading A/B/C
and output token counts). Split: even ids train, odd ids test. A question that some configuration did
not answer (ids 214 and 524, both train) is left out.

The world is loaded by the generic replay-format loader (format.py, world.py): `FramesSource` is a thin
adapter that presents these files in the format's terms (see its docstring); validation, splits, dropping
and pricing are the format's. Cost of a call: recorded output tokens and question tokens (SmolLM2
tokenizer) at the list prices of `toolorchestra/data/prices_frames.yaml`, whose `output_tokens` say which
recorded fields are billed per family; latency from the same file. A free-text final answer is
judged by normalized match against the gold answer (judge.normalized_match), or by an `LLMJudge`
when the env is given one (live use).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.catalog.schema import LatencyPrior
from toolorchestra.envs.base import Score, Task
from toolorchestra.envs.replay.format import Line, LoadedWorld, PriceEntry, load_world, read_jsonl
from toolorchestra.envs.replay.format import PriceSheet as FormatPriceSheet
from toolorchestra.envs.replay.judge import LLMJudge, final_answer_text, normalized_match
from toolorchestra.envs.replay.world import LogWorldEnv, text_key
from toolorchestra.errors import ConfigError, UserError

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

WORLD = "frames"


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


class FramesSource:
    """The FRAMES files presented in the replay format's terms (a `WorldSource` for format.load_world).

    questions: `problem` stripped, `answer` as text, `subset` = the first reasoning type. Answers: the
    recorded output-token fields that the price sheet bills for the model's family, summed into
    `completion_tokens` (each source file names them differently); `response` null becomes "". Prices:
    one entry per family, keyed by the `<family>_` prefix of the model files' names."""

    def __init__(self, folder: Path, prices: PriceSheet) -> None:
        self.root = folder
        self.sheet = prices
        questions = folder / "questions.jsonl"
        if not questions.exists():
            raise UserError(f"{questions}: file not found (expected the FRAMES data under <data dir>/{WORLD}/)")
        self._files = {path.stem: path for path in sorted((folder / "models").glob("*.jsonl"))}
        if not self._files:
            raise UserError(f"{folder / 'models'}: no <model>.jsonl answer files found")
        self._billed = {model: prices.family_of(model)[1].output_tokens for model in self._files}

    def questions(self) -> Iterator[Line]:
        for line in read_jsonl(self.root / "questions.jsonl"):
            row = line.value
            types = [part.strip() for part in str(row.get("reasoning_type", "")).split("|") if part.strip()]
            problem = row.get("problem")
            yield Line(
                line.path,
                line.number,
                {
                    "id": row.get("id"),
                    "problem": problem.strip() if isinstance(problem, str) else problem,
                    "answer": None if row.get("answer") is None else str(row["answer"]),
                    "subset": types[0] if types else None,
                },
            )

    def models(self) -> list[str]:
        return list(self._files)

    def answers(self, model: str) -> Iterator[Line]:
        billed = self._billed[model]
        for line in read_jsonl(self._files[model]):
            row = line.value
            present = [name for name in billed if row.get(name) is not None]
            if any(isinstance(row[name], int) and row[name] < 0 for name in present):
                present = []  # three o4-mini lines record negative counts: count the response instead
            value = {"id": row.get("id"), "response": row.get("response") or "", "grading": row.get("grading")}
            if present:
                value["completion_tokens"] = sum(row[name] for name in present)
            yield Line(line.path, line.number, value)

    def prices(self) -> FormatPriceSheet:
        return FormatPriceSheet(
            models={
                f"{name}_": PriceEntry(
                    input_per_m=family.input_per_m,
                    output_per_m=family.output_per_m,
                    overhead_s=family.latency.overhead_s,
                    output_tokens_per_s=family.latency.output_tokens_per_s,
                    source=family.source,
                )
                for name, family in self.sheet.families.items()
            }
        )


@lru_cache(maxsize=4)
def load_frames(data_dir: Path, price_file: Path) -> LoadedWorld:
    """Parse and validate the questions and every configuration's answers once per data dir."""
    return load_world(FramesSource(data_dir / WORLD, load_prices(price_file)), world=WORLD)


class FramesEnv(LogWorldEnv):
    """replay:frames: the generic replay world over FramesSource, with FRAMES' short labels and its judges."""

    def __init__(self, data_dir: Path, price_file: Path | None = None, judge: LLMJudge | None = None) -> None:
        price_path = (price_file or default_price_file()).resolve()
        loaded = load_frames(data_dir.resolve(), price_path)
        self.prices = load_prices(price_path)
        self.judge = judge
        # gpt-5-mini_frames_low_effort -> gpt-5-mini-low-effort
        labels = {model: model.replace("_frames_", "-").replace("_", "-") for model in loaded.data.models}
        super().__init__(
            loaded,
            "replay:frames",
            WORLD,
            labels=labels,
            describe=lambda model: f"{self.prices.family_of(model)[0]} (recorded FRAMES answers, {model})",
        )

    def judge_text(self, task: Task, answer: str) -> Score:
        correct = normalized_match(answer, task.gold or "")
        return Score(
            correct=correct,
            details={"method": "normalized", "gold": task.gold, "extracted": final_answer_text(answer)[:200]},
        )

    async def ascore(self, task: Task, trajectory: Trajectory) -> Score:
        score = self.score(task, trajectory)
        if self.judge is None or score.details.get("method") != "normalized" or trajectory.final_answer is None:
            return score
        grade = await self.judge.grade(task.prompt, task.gold or "", trajectory.final_answer)
        return Score(correct=grade == "A", details={**score.details, "method": "llm_judge", "grade": grade})

    def answer_key(self, task: Task, text: str) -> str | None:
        return text_key(text)


class FramesTypedEnv(FramesEnv):
    """replay:frames-typed: replay:frames whose orchestrator also reads each question's FRAMES reasoning type.

    FRAMES annotates every question, test ones included, with its reasoning types; the first is the task's
    `subtask`, which the router baseline's features and the outcome model's targets already use. Here the
    orchestrator is shown it too, after the question (`meta["query"]`, the text evaluation and training show
    the orchestrator). Recorded answers, costs (priced from the question alone) and scores are replay:frames'
    own, so every baseline of replay:frames holds here unchanged."""

    def __init__(self, data_dir: Path, price_file: Path | None = None, judge: LLMJudge | None = None) -> None:
        super().__init__(data_dir, price_file, judge)
        self.name = "replay:frames-typed"

    def tasks(self, split: str) -> list[Task]:
        return [typed(task) for task in super().tasks(split)]


def typed(task: Task) -> Task:
    """The task with its reasoning type after the question, for the orchestrator's eyes only."""
    if not task.subtask:
        return task
    shown = f"{task.meta.get('query') or task.prompt}\n\nQuestion type (FRAMES annotation): {task.subtask}"
    return task.model_copy(update={"meta": {**task.meta, "query": shown}})
