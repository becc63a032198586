"""The orchestrator's system prompt: its role, the price/latency table and the user's preference."""

from __future__ import annotations

from toolorchestra.agent.preference import Preference
from toolorchestra.tools.base import Tool

ROLE = (
    "You are an orchestrator. Solve the user's task by calling tools; call at least one tool per turn. "
    "Tools that use a model take a 'model' argument naming one of the labels below. "
    "When you know the answer, call the answer tool."
)


def price_table(tools: list[Tool]) -> str:
    """A compact Markdown table of every label's price (USD per 1M tokens) and expected latency."""
    lines = ["| tool | label | $/1M in | $/1M out | $/call | latency s |", "|---|---|---|---|---|---|"]
    for tool in tools:
        for row in tool.price_rows():
            latency = "-" if row["latency_s"] is None else f"{row['latency_s']:.1f}"
            lines.append(
                f"| {row['tool']} | {row['label'] or '-'} | {row['input_per_m']:g} | {row['output_per_m']:g} "
                f"| {row['per_call']:g} | {latency} |"
            )
    return "\n".join(lines)


def system_prompt(tools: list[Tool], preference: Preference) -> str:
    return f"{ROLE}\n\nPrices and latency:\n{price_table(tools)}\n\nPreference: {preference.describe()}"
