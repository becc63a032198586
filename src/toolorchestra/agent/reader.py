"""The reader: an orchestrator decision made from what the pool offers, never from a label's name.

For every label the answer tool offers, the reader takes only what a user can measure about it: its price,
its latency, and its capability profile (accuracy per task type on a calibration sample, mean output tokens;
`toolorchestra profile`). The orchestrator model reads the question, and only the question: it places it
among the calibration questions of each task type (backends/question_reader.py: the k nearest in the model's
own embedding space), which gives P(type | question). Then, per label:

    P(right) = sum over types of P(type | question) * the profile's accuracy on that type
    cost     = the label's price on the question's tokens and the profile's mean output tokens

and the call goes to the label with the highest expected ToolOrchestra reward under the user's preference
(`reward.expected_group_rewards`, the same expectation the counterfactual recipe trains towards), with the
cost floor the shipped recipes train with, so a much cheaper label wins over a slightly more accurate one.

Why a decision rule and not a generated label: a 135M model trained to pick a row of a price-and-profile
table learned a prior over rows, not to read the numbers (docs/results.md, "Generalization: an orchestrator
that reads its pool (first run)"). Here the model does what it does well (read a question), and the
arithmetic over prices and profiles is exact, so a renamed label, a new price or a model never seen in
training is placed by its numbers alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
