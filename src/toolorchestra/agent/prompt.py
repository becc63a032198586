"""The orchestrator's prompt: a static system message (role and price/latency table) and a user message
(the question, then the user's preference).

The order is deliberate: everything that depends only on the tool catalog comes first and everything
that changes per request comes last, so every request over the same catalog shares one long prompt
prefix. The trainer computes that prefix once per batch and the local backend once per catalog
(prefix caching, as vLLM's automatic prefix caching does for a served model).

The preference is stated in one of several wordings (`Preference.describe(wording)`). Training draws the
wording at random; evaluation and `toolorchestra run` pick it from the task id (`wording_for`), so the
same task always gets the same text and a trained policy must read the meaning, not one fixed phrase.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.preference import WORDINGS, Preference
from toolorchestra.tools.base import Tool

if TYPE_CHECKING:
    from toolorchestra.catalog.schema import ModelProfile

ROLE = (
    "You are an orchestrator. Solve the user's task by calling tools; call at least one tool per turn. "
    "Tools that use a model take a 'model' argument naming one of the labels below. "
    "When you know the answer, call the answer tool."
)

_PRICE_COLUMNS = (("input_per_m", "$/1M in"), ("output_per_m", "$/1M out"), ("per_call", "$/call"))


def price_table(tools: list[Tool]) -> str:
    """A compact Markdown table of every label's price (USD) and expected latency. A price column that is
    zero in every row (e.g. per-token prices of a catalog that charges per call) is left out: it tells the
    orchestrator nothing and costs it prompt tokens. Tools that offer the same label at the same price (an
    expert and an answer tool over one pool) share its row: the tool column names them all."""
    rows = _merged_rows([row for tool in tools for row in tool.price_rows()])
    columns = [(key, title) for key, title in _PRICE_COLUMNS if any(row[key] for row in rows)]
    subsets = sorted({subset for row in rows if row.get("profile") for subset in row["profile"].accuracy})
    header = ["tool", "label", *(title for _, title in columns), "latency s"]
    if subsets:
        header += [f"acc {subset}" for subset in subsets] + ["declines", "out tok", "n"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        latency = "-" if row["latency_s"] is None else f"{row['latency_s']:.1f}"
        cells = [row["tool"], row["label"] or "-", *(f"{row[key]:g}" for key, _ in columns), latency]
        if subsets:
            cells += profile_cells(row.get("profile"), subsets)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def profile_cells(profile: ModelProfile | None, subsets: list[str]) -> list[str]:
    """A label's measured capability columns: accuracy per subset, share declined, mean output tokens, sample
    size ("-" where it was not measured)."""
    if profile is None:
        return ["-"] * (len(subsets) + 3)
    accuracy = [f"{profile.accuracy[subset]:.2f}" if subset in profile.accuracy else "-" for subset in subsets]
    return [*accuracy, f"{profile.declined:.2f}", f"{profile.output_tokens:.0f}", str(profile.n)]


def _merged_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per labelled (label, model, prices, latency), its tools joined in order; unlabelled rows as they are."""
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for row in rows:
        if not row.get("label"):
            out.append(row)
            continue
        key = (row["label"], row.get("model"), *(row[name] for name, _ in _PRICE_COLUMNS), row["latency_s"])
        if key in merged:
            merged[key]["tool"] += f", {row['tool']}"
            continue
        merged[key] = dict(row)
        out.append(merged[key])
    return out


def system_prompt(tools: list[Tool]) -> str:
    """The static part: role and price table (the tools' schemas are appended when rendered). With profiles,
    the table also gives each label's measured accuracy per task type, decline share, output tokens and the
    sample size they were measured on."""
    return f"{ROLE}\n\nPrices and latency:\n{price_table(tools)}"


def user_message(question: str, preference: Preference, wording: int = 0) -> str:
    """The question, then the preference in wording number `wording`."""
    return f"{question}\n\nPreference: {preference.describe(wording)}"


def wording_for(task_id: str) -> int:
    """The preference wording evaluation uses for a task: fixed per task id, spread over all wordings."""
    return int(hashlib.sha1(task_id.encode()).hexdigest()[:8], 16) % WORDINGS


def initial_messages(
    tools: list[Tool], question: str, preference: Preference, wording: int = 0, rules: str | None = None
) -> list[dict[str, Any]]:
    """The first two messages of every episode (live loop, rollouts, SFT and label scoring alike).
    `rules` (an env's task rules, e.g. a ToolScale domain policy) extend the system message: they are the
    same for every task of a domain, so they stay inside the shared, cacheable prefix."""
    system = system_prompt(tools)
    if rules:
        system = f"{system}\n\n{rules}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user_message(question, preference, wording)},
    ]


def task_rules(task: Any) -> str | None:
    """The rules a task's env asks to state in the system prompt (`task.meta["system_prompt"]`), if any."""
    rules = task.meta.get("system_prompt") if hasattr(task, "meta") else None
    return rules if isinstance(rules, str) and rules else None
