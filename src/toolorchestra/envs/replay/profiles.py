"""Model profiles of a replay world: what each model's recorded answers show about it on a calibration sample.

A profile (`catalog.schema.ModelProfile`) is measured on the world's train split only, so a test question
never informs the prompt it is asked under: accuracy per subset (the task's `subtask`, e.g. RouterBench's
arc-challenge/mbpp/winogrande or a FRAMES reasoning type), the share of questions the model declined (FRAMES
grade C, or an answer with nothing to compare, e.g. "I don't know"), and its mean output tokens. The sample is
`per_subset` questions per subset, drawn with a fixed seed, so every model is measured on the same questions.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError

from toolorchestra.catalog.schema import ModelProfile
from toolorchestra.envs.base import Task
from toolorchestra.envs.replay.base import ReplayEnv
from toolorchestra.errors import UserError
from toolorchestra.files import read_yaml

UNTYPED = "all"  # the subset name of tasks without a subtask


def calibration_sample(tasks: list[Task], per_subset: int | None, seed: int = 0) -> list[Task]:
    """Up to `per_subset` tasks of each subset (all with None), the same ones for every call with one seed."""
    by_subset: dict[str, list[Task]] = defaultdict(list)
    for task in sorted(tasks, key=lambda task: task.id):
        by_subset[task.subtask or UNTYPED].append(task)
    rng = random.Random(seed)
    sample: list[Task] = []
    for subset in sorted(by_subset):
        members = by_subset[subset]
        sample.extend(members if per_subset is None or len(members) <= per_subset else rng.sample(members, per_subset))
    return sample


def decline_rate(env: ReplayEnv, sample: list[Task], model: str) -> float:
    """The share of `sample` that `model` did not attempt: FRAMES grade C where grades are recorded; else an
    answer that commits to nothing (no option letter, "I don't know") on a question where some model's answer
    does commit (a code answer commits to nothing comparable for any model, so MBPP does not count)."""
    declines, counted = 0, 0
    for task in sample:
        record = env.record(task.id, model)
        if record.grade is not None:
            declines, counted = declines + (record.grade == "C"), counted + 1
            continue
        keys = {other: env.answer_key(task, env.record(task.id, other).response) for other in env.models()}
        if any(key is not None for key in keys.values()):
            declines, counted = declines + (keys[model] is None), counted + 1
    return declines / counted if counted else 0.0


def outcome(env: ReplayEnv, task: Task, model: str) -> tuple[Literal["R", "W", "r", "n"], str | None]:
    """One calibration question's outcome letter, and the answer key it committed to. The letter is right or
    wrong (R, W) when the answer commits to something the world can compare (its `answer_key`), else r or n: an
    orchestrator can tell the two kinds apart from the text alone, so a plan that escalates when the consulted
    answer commits to nothing is judged by these letters, and one that escalates when two consulted answers
    disagree by the keys."""
    record = env.record(task.id, model)
    key = env.answer_key(task, record.response)
    if key is not None:
        return ("R" if record.correct else "W"), key
    return ("r" if record.correct else "n"), None


def measure_profiles(
    env: ReplayEnv, split: str = "train", per_subset: int | None = 50, seed: int = 0
) -> dict[str, ModelProfile]:
    """Every model's profile on the calibration sample of `split` (train by default: see the module docstring)."""
    sample = calibration_sample(env.tasks(split), per_subset, seed)
    if not sample:
        raise ValueError(f"{env.name}: split {split!r} has no tasks to measure profiles on")
    profiles = {}
    for model in env.models():
        right: dict[str, list[bool]] = defaultdict(list)
        tokens: dict[str, list[int]] = defaultdict(list)
        dollars: dict[str, list[float]] = defaultdict(list)
        seconds: dict[str, list[float]] = defaultdict(list)
        for task in sample:
            right[task.subtask or UNTYPED].append(env.record(task.id, model).correct)
            tokens[task.subtask or UNTYPED].append(env.output_tokens(task, model))
            dollars[task.subtask or UNTYPED].append(env.call_cost(task, model))
            seconds[task.subtask or UNTYPED].append(env.call_latency(task, model))
        mean_dollars = sum(sum(paid) for paid in dollars.values()) / len(sample)
        outcomes = {task.id: outcome(env, task, model) for task in sample}
        profiles[model] = ModelProfile(
            n=len(sample),
            accuracy={subset: round(sum(marks) / len(marks), 3) for subset, marks in right.items()},
            declined=round(decline_rate(env, sample, model), 3),
            output_tokens=round(sum(sum(counts) for counts in tokens.values()) / len(sample), 1),
            output_tokens_by_type={subset: round(sum(counts) / len(counts), 1) for subset, counts in tokens.items()},
            latency_s_by_type={subset: round(sum(taken) / len(taken), 2) for subset, taken in seconds.items()},
            relative_cost_by_type={
                subset: round(sum(paid) / len(paid) / mean_dollars, 3) for subset, paid in dollars.items()
            }
            if mean_dollars > 0
            else None,
            outcomes={question: letter for question, (letter, _) in outcomes.items()},
            answers={question: key for question, (_, key) in outcomes.items() if key is not None},
        )
    return profiles


def write_profiles(profiles: dict[str, ModelProfile], path: Path, source: str) -> None:
    """A profile file: `source` (how it was measured) as a comment, then model name -> profile."""
    body = yaml.safe_dump({model: profile.model_dump() for model, profile in profiles.items()}, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {source}\n{body}")


def read_profiles(path: Path, models: list[str], *, others: bool = False) -> dict[str, ModelProfile]:
    """A profile file (`toolorchestra profile --out`) for these models; a model it lacks keeps no profile, and a
    bad entry is a UserError naming it. So is a model the world lacks, unless `others` (a live catalog may
    deploy some of the models its owner's logs were measured on): then that entry is skipped."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of model name -> profile")
    unknown = sorted(set(data) - set(models))
    if unknown and not others:
        raise UserError(f"{path}: no model {', '.join(map(repr, unknown))} in this world; models: {', '.join(models)}")
    data = {model: entry for model, entry in data.items() if model in models}
    profiles = {}
    for model, entry in data.items():
        try:
            profiles[model] = ModelProfile.model_validate(entry)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "(entry)"
            raise UserError(f"{path}: profile of {model!r}, field {where}: {problem['msg']}") from None
    return profiles
