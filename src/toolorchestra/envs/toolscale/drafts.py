"""What a task draft is, and the small builders every drafter uses (the generic generator in tasks.py and the
domain policy actions in actions/<domain>.py): a leaf, so the two never need to import each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Draft:
    family: str
    owner: str
    prompt: str
    actions: list[dict[str, Any]]
    facts: list[str] = field(default_factory=list)
    fact_paths: list[str] = field(default_factory=list)  # where each fact sits in its record ("address.city")
    forbidden: list[dict[str, Any]] = field(default_factory=list)  # {"name", "argument", "value"}
    error_first: bool = False
    refused: list[dict[str, Any]] = field(default_factory=list)  # calls the policy forbids: they must fail


def action(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def fact_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


__all__ = ["Draft", "action", "fact_text"]
