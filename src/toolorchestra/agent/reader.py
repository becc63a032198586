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
plans: answer with one label; consult one, adopt its answer when it commits to one the world can compare, and
answer with a second label otherwise; and, with the profiles' answer keys (`ModelProfile.answers`), consult two,
adopt their answer when both commit to the same one, and answer with a third otherwise (the cascade's plan). A
plan's P(right) is what it got right on the calibration questions of the question's type; a fallback is paid on
the share of questions the consulted labels leave to it.

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
        raise UserError(
            f"reader: the {tool_name!r} tool offers no labelled model; the reader chooses among the `models:` of "
            "a catalog's answer tool (e.g. configs/pools/reader-openai-compatible.yaml)"
        )
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
    return by_type(accuracy, type_posterior, sum(accuracy.values()) / len(accuracy))


def expected_cost(offer: Offer, type_posterior: Mapping[str, float], question_tokens: int) -> float:
    """The label's expected dollars on the question under P(type | question). A price per token is paid on the
    question's tokens and the profile's mean output tokens on the type (RouterBench's models write one token for
    an option letter, hundreds for a program). A flat price per call, which a replay world shows as its recorded
    mean, is scaled by how the type's answers compared to that mean on the calibration sample."""
    assert offer.profile is not None
    price, profile = offer.price, offer.profile
    if price.input_per_m or price.output_per_m:
        tokens = by_type(profile.output_tokens_by_type, type_posterior, profile.output_tokens)
        return price.cost(question_tokens, round(tokens))
    return price.per_call * by_type(profile.relative_cost_by_type, type_posterior, 1.0)


def expected_latency(offer: Offer, type_posterior: Mapping[str, float]) -> float:
    """The label's expected seconds on the question under P(type | question): its profile's mean per type where
    measured (a program takes longer to write than an option letter), else its latency prior."""
    assert offer.profile is not None
    return by_type(offer.profile.latency_s_by_type, type_posterior, offer.latency_s or 0.0)


def by_type(values: Mapping[str, float] | None, type_posterior: Mapping[str, float], default: float) -> float:
    """A per-type profile figure under P(type | question); `default` for a type it lacks, or without figures."""
    total = sum(type_posterior.values())
    if not values or total <= 0:
        return default
    return sum(weight * values.get(subset, default) for subset, weight in type_posterior.items()) / total


def expected_rewards(
    pool: Sequence[Offer], type_posterior: Mapping[str, float], question_tokens: int, preference: Mapping[str, float]
) -> list[float]:
    """Each label's expected reward for one question: P(right) from the profiles, dollars from its price on the
    question's tokens and its profile's output tokens on the question's type, seconds on that type too."""
    features = []
    for offer in pool:
        features.append(
            {
                "cost": expected_cost(offer, type_posterior, question_tokens),
                "latency": expected_latency(offer, type_posterior),
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
class PlanStats:
    """Every plan of a `PlanTable` on the calibration questions of one task type: `right` (plans,) the share it
    gets right, and `paid` (plans,) the share of questions on which it pays its fallback."""

    right: Any
    paid: Any


class PlanTable:
    """Every plan over one pool, and what each gets right on the calibration questions per task type, from the
    profiles' per-question outcomes (`ModelProfile.outcomes`) and, where every profile has them, answer keys
    (`ModelProfile.answers`): computed once per pool, mixed per question by P(type).

    The plans, in this order: each label alone; consult a, else answer with b (every a != b); with answer keys,
    consult a and b (a before b), else answer with c (every c; a consulted c is adopted, not paid again).
    `question_types`: calibration question id -> its task type; a question it lacks has no type, and only counts
    when P(type) names no type the calibration questions have."""

    def __init__(self, pool: Sequence[Offer], question_types: Mapping[str, str]) -> None:
        import numpy as np

        profiles = [offer.profile for offer in pool]
        if any(profile is None or not profile.outcomes for profile in profiles):
            raise ValueError("PlanTable needs every label's per-question outcomes")
        measured = [profile for profile in profiles if profile is not None]
        shared = sorted(set.intersection(*(set(profile.outcomes or {}) for profile in measured)))
        with_keys = all(profile.answers is not None for profile in measured)
        labels = len(pool)
        self.plans: list[Plan] = [Plan(offer) for offer in pool]
        self.plans += [Plan(pool[a], pool[b]) for a in range(labels) for b in range(labels) if a != b]
        consult_two = [(a, b) for a in range(labels) for b in range(a + 1, labels)] if with_keys else []
        self.plans += [Plan(pool[a], pool[c], check=pool[b]) for a, b in consult_two for c in range(labels)]
        self.by_type: dict[str, PlanStats] = {}
        for subset in sorted({question_types.get(question, "") for question in shared}):
            questions = [question for question in shared if question_types.get(question, "") == subset]
            letters = [[(profile.outcomes or {})[question] for question in questions] for profile in measured]
            right = np.array([[letter in "Rr" for letter in row] for row in letters], dtype=float)  # (L, Q)
            committed = np.array([[letter in "RW" for letter in row] for row in letters], dtype=float)
            off_diagonal = ~np.eye(labels, dtype=bool)
            # consult a, adopt where it committed, else answer with b
            pair = committed[:, None] * right[:, None] + (1 - committed[:, None]) * right[None, :]  # (L, L, Q)
            rows = [right, pair[off_diagonal]]
            paid = [np.zeros(labels), np.repeat(1 - committed.mean(axis=1), labels - 1)]
            if consult_two:
                keys = [[(profile.answers or {}).get(question) for question in questions] for profile in measured]
                for a, b in consult_two:
                    agree = np.array([x is not None and x == y for x, y in zip(keys[a], keys[b], strict=True)])
                    rows.append(np.where(agree, right[a], right))  # (L, Q): c answers where they disagree
                    split = 1 - agree.mean()
                    paid.append(np.array([0.0 if c in (a, b) else split for c in range(labels)]))
            plans_right = np.concatenate(rows)  # (plans, Q), one row per plan in self.plans's order
            self.by_type[subset] = PlanStats(plans_right.mean(axis=1), np.concatenate(paid))

    def mixed(self, type_posterior: Mapping[str, float]) -> tuple[Any, Any]:
        """For one question, with the types' shares weighted by P(type | question): each plan's P(right), and the
        share of questions on which it pays its fallback."""
        weights = {subset: type_posterior.get(subset, 0.0) for subset in self.by_type}
        total = sum(weights.values())
        if total <= 0:  # a type no calibration question has: every type alike
            weights, total = dict.fromkeys(self.by_type, 1.0), float(len(self.by_type))
        shares = {subset: weight / total for subset, weight in weights.items() if weight > 0}
        right = sum(share * self.by_type[subset].right for subset, share in shares.items())
        paid = sum(share * self.by_type[subset].paid for subset, share in shares.items())
        return right, paid


def choose_plan(
    pool: Sequence[Offer],
    table: PlanTable,
    type_posterior: Mapping[str, float],
    question_tokens: int,
    preference: Mapping[str, float],
    consult_tool: str,
) -> Plan:
    """The plan of `table` with the highest expected reward: P(right) is what it got right on the calibration
    questions of the question's type, dollars and seconds come from the prices and latency priors, and a
    fallback is paid on the share of questions it is left.

    With hundreds of plans judged on a few dozen questions per type, the best measured one is partly the
    luckiest: docs/results.md ("Consult-two plans") measures what that costs on questions outside the sample."""
    right, paid = table.mixed(type_posterior)
    index = {offer.label: position for position, offer in enumerate(pool)}
    costs = [expected_cost(offer, type_posterior, question_tokens) for offer in pool]
    latency = [expected_latency(offer, type_posterior) for offer in pool]
    features = []
    for plan, share in zip(table.plans, paid, strict=True):
        first = index[plan.first.label]
        calls = {f"calls:{plan.first.tool}": 1.0, f"calls:{plan.first.label}": 1.0}
        cost, seconds = costs[first], latency[first]
        if plan.check is not None:
            check = index[plan.check.label]
            cost, seconds = cost + costs[check], max(seconds, latency[check])
            calls[f"calls:{plan.check.label}"] = 1.0
        if plan.fallback is not None:
            fallback = index[plan.fallback.label]
            cost, seconds = cost + float(share) * costs[fallback], seconds + float(share) * latency[fallback]
            calls[f"calls:{consult_tool}"] = 1.0 if plan.check is None else 2.0
            calls.setdefault(f"calls:{plan.fallback.label}", float(share))
        features.append({"cost": cost, "latency": seconds, **calls})
    p_right = [float(value) for value in right]
    # The pool's single labels set the price scale, so that considering plans does not change how much a dollar
    # counts: a plan dearer than the dearest label scores below it.
    rewards = expected_group_rewards(features, p_right, with_cost_floor(preference, COST_FLOOR), scale_rows=len(pool))
    return table.plans[max(range(len(table.plans)), key=lambda position: (rewards[position], -position))]
