"""`replay:DIR`: any directory in the replay format (format.py, docs/replay.md) as an environment.

`LogWorldEnv` turns a `LoadedWorld` into a `ReplayEnv`: one model spec per model file, priced by its
prices.yaml entry (or, with recorded costs only, a per-call price equal to its mean train cost, the figure
the orchestrator's price table shows), with the entry's latency prior. Free-text final answers are judged
against the question's gold `answer`: as an option letter when the gold is a single letter A-E, else by
normalized match (judge.py); with no gold only a recorded response (inherited grade) can be right.

`world_summary` is what `toolorchestra replay check` prints per model; `apply_price_options` is what
`eval --price-scale/--prices` do to any replay env.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from toolorchestra.catalog.schema import LatencyPrior, ModelSpec, Price, ReplayBackendSpec
from toolorchestra.envs.base import Score, Task
from toolorchestra.envs.replay.base import ReplayEnv, shown_prices
from toolorchestra.envs.replay.format import DirectorySource, LoadedWorld, load_world, read_price_sheet
from toolorchestra.envs.replay.judge import final_answer_text, normalize, normalized_match, option_letter
from toolorchestra.errors import UserError

NOT_ATTEMPTED = {"i dont know", "i do not know", "unknown", "cannot determine", "not sure"}
LETTERS = "ABCDE"


def model_specs(loaded: LoadedWorld, world: str, describe: Callable[[str], str]) -> list[ModelSpec]:
    """One spec per model: its price entry's prices and latency prior; recorded costs only: a per-call price
    of its mean cost on the train split (test when train is empty) and the default latency prior."""
    shown = shown_prices(loaded.data)
    specs = []
    for model in loaded.data.models:
        entry = loaded.pricing[model].entry
        if entry is not None:
            price, latency = entry.price(), entry.latency()
        else:
            price, latency = Price(per_call=shown[model]), LatencyPrior()
        specs.append(
            ModelSpec(
                name=model,
                backend=ReplayBackendSpec(world=world, model=model),
                price=price,
                latency=latency,
                description=describe(model),
            )
        )
    return specs


class LogWorldEnv(ReplayEnv):
    """A replay world loaded through the replay format (a directory, or an adapter such as FRAMES')."""

    def __init__(
        self,
        loaded: LoadedWorld,
        name: str,
        world: str,
        *,
        labels: Mapping[str, str] | None = None,
        describe: Callable[[str], str] | None = None,
    ) -> None:
        self.name = name
        self.loaded = loaded
        self._letter_world: bool | None = None  # whether every gold answer is an option letter (live_answer_key)
        specs = model_specs(loaded, world, describe or (lambda model: f"{model} (recorded answers)"))
        super().__init__(loaded.data, specs, labels=dict(labels or {}))

    def judge_text(self, task: Task, answer: str) -> Score:
        return judge_answer(task, answer)

    def answer_key(self, task: Task, text: str) -> str | None:
        if task.gold and _is_letter(task.gold):
            return option_letter(text, LETTERS)
        return text_key(text)

    def live_answer_key(self, text: str) -> str | None:
        """A live reply's answer key: an option letter in a world whose every gold answer is one, else its
        normalized final answer (as this world's free-text answers are compared)."""
        if self._letter_world is None:
            golds = [task.gold for tasks in self.data.tasks.values() for task in tasks if task.gold]
            self._letter_world = bool(golds) and all(_is_letter(gold) for gold in golds)
        return option_letter(text, LETTERS) if self._letter_world else text_key(text)


def judge_answer(task: Task, answer: str) -> Score:
    """A free-text answer against the question's gold: as an option letter when the gold is a single letter
    A-E, else by normalized match; without a gold answer it cannot be right."""
    if not task.gold:
        return Score(
            correct=False,
            details={"method": "unjudgeable", "reason": "no gold answer: only a recorded response is graded"},
        )
    if _is_letter(task.gold):
        letter = option_letter(answer, LETTERS)
        return Score(
            correct=letter == task.gold.strip().upper(),
            details={"method": "letter", "extracted": letter, "gold": task.gold},
        )
    return Score(
        correct=normalized_match(answer, task.gold),
        details={"method": "normalized", "gold": task.gold, "extracted": final_answer_text(answer)[:200]},
    )


def text_key(text: str) -> str | None:
    """A free-text answer's key: its normalized final answer; None when empty or a way of saying "I don't know"."""
    key = normalize(final_answer_text(text))
    return None if not key or key in NOT_ATTEMPTED else key


def _is_letter(gold: str) -> bool:
    return len(gold.strip()) == 1 and gold.strip().upper() in LETTERS


class DirectoryWorldEnv(LogWorldEnv):
    """`replay:DIR`: the directory's world, named by the env name the user gave."""

    def __init__(self, root: Path, name: str | None = None) -> None:
        root = root.expanduser().resolve()
        loaded = load_directory(root)
        super().__init__(
            loaded,
            name or f"replay:{root}",
            str(root),
            describe=lambda model: f"{model} (recorded answers in {root.name})",
        )


def load_directory(root: Path) -> LoadedWorld:
    """Load (once per content: the cache key holds file sizes and modification times) a replay directory."""
    source = DirectorySource(root)
    return _load_cached(root, source.signature())


@lru_cache(maxsize=8)
def _load_cached(root: Path, signature: tuple[tuple[str, int, int], ...]) -> LoadedWorld:
    return load_world(DirectorySource(root), world=str(root))


# --- replay check ------------------------------------------------------------------------------
@dataclass
class ModelSummary:
    """One row of `replay check`: a model's coverage and, over the kept tasks, accuracy, cost and latency."""

    model: str
    answered: int
    questions: int
    accuracy: float
    cost_usd: float
    cost_per_task_usd: float
    latency_mean_s: float
    cost_source: str  # recorded | prices (KEY) | recorded + prices (KEY)


def world_summary(env: LogWorldEnv) -> list[ModelSummary]:
    """Per model: questions answered, and accuracy, total and mean cost, mean latency over every kept task."""
    tasks = [task for split in ("train", "test") for task in env.tasks(split)]
    rows = []
    for model in env.models():
        records = [env.record(task.id, model) for task in tasks]
        cost = sum(env.call_cost(task, model) for task in tasks)
        latency = sum(env.call_latency(task, model) for task in tasks)
        count = max(len(tasks), 1)
        rows.append(
            ModelSummary(
                model=model,
                answered=env.loaded.answered[model],
                questions=env.loaded.questions,
                accuracy=sum(record.correct for record in records) / count,
                cost_usd=cost,
                cost_per_task_usd=cost / count,
                latency_mean_s=latency / count,
                cost_source=_cost_source(env, model, records),
            )
        )
    return rows


def _cost_source(env: LogWorldEnv, model: str, records: list[Any]) -> str:
    recorded = sum(record.cost_usd is not None for record in records)
    key = env.loaded.pricing[model].key
    if recorded == len(records):
        return "recorded"
    priced = f"prices ({key})" if key == model else f"prices (prefix {key})"
    return priced if recorded == 0 else f"recorded + {priced}"


# --- evaluation-time prices --------------------------------------------------------------------
def parse_price_scale(items: list[str]) -> dict[str, float]:
    """`MODEL=X` items (X > 0) as a dict; errors name the item."""
    factors: dict[str, float] = {}
    for item in items:
        model, sep, value = item.rpartition("=")
        try:
            factor = float(value)
        except ValueError:
            factor = -1.0
        if not sep or not model or not factor > 0:
            raise UserError(f"--price-scale {item!r}: expected MODEL=X with a factor X > 0, e.g. gpt-4=0.5")
        factors[model] = factor
    return factors


def apply_price_options(env: Any, price_scale: Mapping[str, float] | None, prices: Path | None) -> None:
    """Apply `--prices FILE` (a price sheet in the replay format: the models it prices are charged at its
    prices) and then `--price-scale MODEL=X` to a replay env. Models may be named by name or tool label."""
    if not price_scale and prices is None:
        return
    if not isinstance(env, ReplayEnv):
        raise UserError(f"--price-scale/--prices apply to replay worlds, not to {env.name}")
    sheet: dict[str, tuple[Price, LatencyPrior | None]] = {}
    if prices is not None:
        parsed = read_price_sheet(prices)
        for model in env.models():
            matched = parsed.entry_for(model)
            if matched is not None:
                entry = matched[1]
                latency = entry.latency() if entry.overhead_s is not None or entry.output_tokens_per_s else None
                sheet[model] = (entry.price(), latency)
        if not sheet:
            raise UserError(f"--prices {prices}: prices none of the models of {env.name}: {', '.join(env.models())}")
    env.reprice({_model_named(env, name): factor for name, factor in (price_scale or {}).items()}, sheet)


def _model_named(env: ReplayEnv, name: str) -> str:
    if name in env.models():
        return name
    by_label = {env.label(model): model for model in env.models()}
    if name in by_label:
        return by_label[name]
    raise UserError(
        f"--price-scale {name}=...: {env.name} has no model or label {name!r}; models: {', '.join(env.models())}"
    )
