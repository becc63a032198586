"""The reader: an orchestrator decision made from what the pool offers, never from a label's name.

For every label the answer tool offers, the reader takes only what a user can measure about it: its price,
its latency, and its capability profile (accuracy per task type on a calibration sample, mean output tokens;
`toolorchestra profile`), and the label's outcomes on those calibration questions. The orchestrator model
reads the question, and only the question: it places it
among the calibration questions of each task type (backends/question_reader.py: the k nearest in the model's
own embedding space), which gives P(type | question). Then, per label:

    P(right) = sum over types of P(type | question) * the profile's accuracy on that type
    cost     = the label's price on the question's tokens and the profile's mean output tokens

and the call goes to the label with the highest expected ToolOrchestra reward under the user's preference
(`reward.expected_group_rewards`, the same expectation the counterfactual recipe trains towards), with the
cost floor the shipped recipes train with, so a much cheaper label wins over a slightly more accurate one.

With a consult tool and per-question outcomes in the profiles (`PlanTable`, `choose_plan`), the candidates are
plans: answer with one label, or consult one, adopt its answer when it commits to one the world can compare,
and answer with a second label otherwise. A plan's P(right) is what it got right on the calibration questions
of the question's type; the second label is paid on the share of questions the first leaves to it.

Why a decision rule and not a generated label: a 135M model trained to pick a row of a price-and-profile
table learned a prior over rows, not to read the numbers (docs/results.md, "Generalization: an orchestrator
that reads its pool (first run)"). Here the model does what it does well (read a question), and the
arithmetic over prices and profiles is exact, so a renamed label, a new price or a model never seen in
training is placed by its numbers alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolorchestra.catalog.schema import ModelProfile, Price
from toolorchestra.errors import UserError
from toolorchestra.reward import expected_group_rewards, with_cost_floor
from toolorchestra.tools.base import Tool

# The cost weight the shipped recipes train with at least (reward.with_cost_floor). Under the accuracy
# preference it makes a much cheaper label win when its chance of being right is within about a tenth of the
# best one's (the cost feature is min-max normalized over the offered labels).
COST_FLOOR = 0.1


@dataclass(frozen=True)
class Offer:
    """One label as the pool offers it: no model name, only what can be measured."""

    tool: str
    label: str
    price: Price
    latency_s: float | None
    profile: ModelProfile | None


def offers(tools: Sequence[Tool], tool_name: str = "answer") -> list[Offer]:
    """The labels of `tool_name` with their prices, latency and profiles (the rows of the prompt's table)."""
    tool = next((tool for tool in tools if tool.name == tool_name), None)
    if tool is None:
        raise UserError(f"reader: no {tool_name!r} tool among {[tool.name for tool in tools]}")
    found = []
    for row in tool.price_rows():
        if not row.get("label"):
            continue
        price = Price(input_per_m=row["input_per_m"], output_per_m=row["output_per_m"], per_call=row["per_call"])
        found.append(Offer(tool_name, row["label"], price, row["latency_s"], row.get("profile")))
    if not found:
        raise UserError(f"reader: the {tool_name!r} tool offers no labelled model")
    missing = [offer.label for offer in found if offer.profile is None]
    if missing:
        raise UserError(
            f"reader: labels {missing} have no capability profile; measure them with `toolorchestra profile` "
            "(or --profiles train on a replay world), or give them a `profile:` in the catalog"
        )
    return found


def all_outcomes(pool: Sequence[Offer]) -> bool:
    """Whether every label's profile holds per-question calibration outcomes on some questions they all share
    (what plans are judged on; profiles measured on different samples share none)."""
    outcomes = [set(offer.profile.outcomes) for offer in pool if offer.profile is not None and offer.profile.outcomes]
    return len(outcomes) == len(pool) and bool(set.intersection(*outcomes))


def task_types(pool: Sequence[Offer]) -> list[str]:
    """Every task type some profile measured, sorted."""
    return sorted({subset for offer in pool if offer.profile for subset in offer.profile.accuracy})


def p_right(offer: Offer, type_posterior: Mapping[str, float]) -> float:
    """P(the label answers right) under P(type | question); a type its profile did not measure counts at the
    profile's mean accuracy."""
    assert offer.profile is not None
    accuracy = offer.profile.accuracy
    mean = sum(accuracy.values()) / len(accuracy)
    total = sum(type_posterior.values())
    if total <= 0:
        return mean
    return sum(weight * accuracy.get(subset, mean) for subset, weight in type_posterior.items()) / total


def expected_rewards(
    pool: Sequence[Offer], type_posterior: Mapping[str, float], question_tokens: int, preference: Mapping[str, float]
) -> list[float]:
    """Each label's expected reward for one question: P(right) from the profiles, dollars from its price on the
    question's tokens and its profile's output tokens, seconds from its latency prior."""
    features = []
    for offer in pool:
        assert offer.profile is not None
        output_tokens = round(offer.profile.output_tokens)
        features.append(
            {
                "cost": offer.price.cost(question_tokens, output_tokens),
                "latency": offer.latency_s or 0.0,
                f"calls:{offer.tool}": 1.0,
                f"calls:{offer.label}": 1.0,
            }
        )
    weights = with_cost_floor(preference, COST_FLOOR)
    return expected_group_rewards(features, [p_right(offer, type_posterior) for offer in pool], weights)


def choose(
    pool: Sequence[Offer], type_posterior: Mapping[str, float], question_tokens: int, preference: Mapping[str, float]
) -> Offer:
    """The label with the highest expected reward; among equals, the one offered first."""
    rewards = expected_rewards(pool, type_posterior, question_tokens, preference)
    return pool[max(range(len(pool)), key=lambda index: (rewards[index], -index))]


@dataclass(frozen=True)
class Plan:
    """Answer with `first`. With a `fallback`: consult `first`, adopt its answer when it commits to one the world
    can compare, and otherwise answer with `fallback`. With a `check` too: consult `first` and `check`, adopt
    their answer when both commit to the same one, and otherwise answer with `fallback` (the cascade's plan;
    a fallback that was consulted is adopted, not paid again)."""

    first: Offer
    fallback: Offer | None = None
    check: Offer | None = None


@dataclass(frozen=True)
class PlanOdds:
    """What each plan gets right on a set of calibration questions, and how often it pays its fallback.
    L labels: `single` (L,) each alone; `pair` (L, L) consult a, else answer with b; `handed` (L,) the share a
    leaves to b; with answer keys, `agreed` (L, L) the share where a and b commit to the same answer and a is
    right, `split_right` (L, L, L) the share where they do not and c is right, `split` (L, L) how often not."""

    single: Any
    pair: Any
    handed: Any
    agreed: Any = None
    split_right: Any = None
    split: Any = None

    @classmethod
    def measure(cls, letters: list[list[str]], keys: list[list[str | None]] | None) -> PlanOdds:
        import numpy as np

        right = np.array([[letter in "Rr" for letter in row] for row in letters], dtype=float)
        committed = np.array([[letter in "RW" for letter in row] for row in letters], dtype=float)
        count = right.shape[1]
        # consult a, adopt where it committed, else answer with b: E[c_a * right_a + (1 - c_a) * right_b]
        pair = (committed * right).mean(axis=1)[:, None] + ((1 - committed) @ right.T) / count
        odds = cls(right.mean(axis=1), pair, 1 - committed.mean(axis=1))
        if keys is None:
            return odds
        labels = len(keys)
        agree = np.array(
            [[[x is not None and x == y for x, y in zip(keys[a], keys[b], strict=True)] for b in range(labels)]
             for a in range(labels)],
            dtype=float,
        )  # (L, L, Q)
        split = 1 - agree
        return cls(
            odds.single,
            odds.pair,
            odds.handed,
            agreed=(agree * right[:, None, :]).mean(axis=2),
            split_right=(split.reshape(labels * labels, count) @ right.T).reshape(labels, labels, labels) / count,
            split=split.mean(axis=2),
        )

    def scaled(self, weight: float) -> PlanOdds:
        return PlanOdds(*(None if part is None else weight * part for part in self._parts()))

    def plus(self, other: PlanOdds) -> PlanOdds:
        return PlanOdds(*(None if a is None or b is None else a + b for a, b in zip(self._parts(), other._parts())))

    def _parts(self) -> tuple[Any, ...]:
        return (self.single, self.pair, self.handed, self.agreed, self.split_right, self.split)


class PlanTable:
    """What every plan over one pool gets right on the calibration questions, per task type, from the profiles'
    per-question outcomes (`ModelProfile.outcomes`) and, where every profile has them, answer keys
    (`ModelProfile.answers`): computed once per pool, mixed per question by P(type).
    `question_types`: calibration question id -> its task type; a question it lacks has no type, and only counts
    when P(type) names no type the calibration questions have."""

    def __init__(self, pool: Sequence[Offer], question_types: Mapping[str, str]) -> None:
        profiles = [offer.profile for offer in pool]
        if any(profile is None or not profile.outcomes for profile in profiles):
            raise ValueError("PlanTable needs every label's per-question outcomes")
        measured = [profile for profile in profiles if profile is not None]
        shared = sorted(set.intersection(*(set(profile.outcomes or {}) for profile in measured)))
        with_keys = all(profile.answers is not None for profile in measured)
        self.by_type: dict[str, PlanOdds] = {}
        for subset in sorted({question_types.get(question, "") for question in shared}):
            questions = [question for question in shared if question_types.get(question, "") == subset]
            letters = [[(profile.outcomes or {})[question] for question in questions] for profile in measured]
            keys = [[(profile.answers or {}).get(question) for question in questions] for profile in measured]
            self.by_type[subset] = PlanOdds.measure(letters, keys if with_keys else None)

    def mixed(self, type_posterior: Mapping[str, float]) -> PlanOdds:
        """Every plan's odds for one question: the types' odds weighted by P(type | question)."""
        weights = {subset: type_posterior.get(subset, 0.0) for subset in self.by_type}
        total = sum(weights.values())
        if total <= 0:  # a type no calibration question has: every type alike
            weights, total = dict.fromkeys(self.by_type, 1.0), float(len(self.by_type))
        parts = [self.by_type[subset].scaled(weight / total) for subset, weight in weights.items()]
        mixed = parts[0]
        for part in parts[1:]:
            mixed = mixed.plus(part)
        return mixed


def choose_plan(
    pool: Sequence[Offer],
    table: PlanTable,
    type_posterior: Mapping[str, float],
    question_tokens: int,
    preference: Mapping[str, float],
    consult_tool: str,
) -> Plan:
    """The plan with the highest expected reward among: answering with one label; consulting one label with
    another as the fallback; and, with answer keys, consulting two and answering with a third when they disagree.
    P(right) comes from the calibration outcomes, dollars and seconds from the prices and latency priors (a
    fallback is paid on the share of questions it is left, and only if it was not consulted)."""
    odds = table.mixed(type_posterior)
    costs = [offer.price.cost(question_tokens, round(offer.profile.output_tokens)) for offer in pool if offer.profile]
    latency = [offer.latency_s or 0.0 for offer in pool]
    candidates: list[Plan] = [Plan(offer) for offer in pool]
    features = [
        {"cost": costs[a], "latency": latency[a], f"calls:{offer.tool}": 1.0, f"calls:{offer.label}": 1.0}
        for a, offer in enumerate(pool)
    ]
    p_right = [float(value) for value in odds.single]
    for a, first in enumerate(pool):
        for b, fallback in enumerate(pool):
            if a == b:
                continue
            candidates.append(Plan(first, fallback))
            features.append(
                {
                    "cost": costs[a] + float(odds.handed[a]) * costs[b],
                    "latency": latency[a] + float(odds.handed[a]) * latency[b],
                    f"calls:{consult_tool}": 1.0,
                    f"calls:{first.tool}": 1.0,
                    f"calls:{first.label}": 1.0,
                    f"calls:{fallback.label}": float(odds.handed[a]),
                }
            )
            p_right.append(float(odds.pair[a, b]))
    if odds.agreed is not None:
        for a, b in ((a, b) for a in range(len(pool)) for b in range(a + 1, len(pool))):
            split = float(odds.split[a, b])
            for c, fallback in enumerate(pool):
                paid = 0.0 if c in (a, b) else split  # a consulted fallback's answer is adopted
                candidates.append(Plan(pool[a], fallback, check=pool[b]))
                features.append(
                    {
                        "cost": costs[a] + costs[b] + paid * costs[c],
                        "latency": max(latency[a], latency[b]) + paid * latency[c],
                        f"calls:{consult_tool}": 2.0,
                        f"calls:{pool[a].tool}": 1.0,
                        f"calls:{pool[a].label}": 1.0,
                        f"calls:{pool[b].label}": 1.0,
                    }
                    | ({} if c in (a, b) else {f"calls:{fallback.label}": paid})
                )
                p_right.append(float(odds.agreed[a, b] + odds.split_right[a, b, c]))
    # The pool's single labels set the price scale, so that considering plans does not change how much a dollar
    # counts: a plan dearer than the dearest label scores below it.
    rewards = expected_group_rewards(features, p_right, with_cost_floor(preference, COST_FLOOR), scale_rows=len(pool))
    return candidates[max(range(len(candidates)), key=lambda index: (rewards[index], -index))]
