"""What a task draft is, and the small builders every drafter uses (the generic generator in tasks.py and the
domain policy actions in actions/<domain>.py): a leaf, so the two never need to import each other."""

from __future__ import annotations

from collections.abc import Sequence
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


class Drafter:
    """Base of the domain drafters (actions/<domain>.py) that draft the policy-action tasks of one user: every
    prompt opens with their `hello`, every gold with the `opening` actions (the authentication, or the profile
    read)."""

    def __init__(self, owner: str, hello: str, opening: Sequence[dict[str, Any]] = ()) -> None:
        self.owner, self.hello, self.opening = owner, hello, opening

    def draft(
        self,
        family: str,
        request: str,
        actions: list[dict[str, Any]],
        refused: dict[str, Any] | None = None,
        forbid: Sequence[tuple[str, str, str]] = (),
    ) -> Draft:
        """forbid: the (tool, argument, value) writes that must not succeed."""
        return Draft(
            family,
            self.owner,
            f"{self.hello} {request}",
            [*self.opening, *actions],
            forbidden=[{"name": name, "argument": argument, "value": value} for name, argument, value in forbid],
            refused=[refused] if refused else [],
        )

    def write(self, request: str, actions: list[dict[str, Any]]) -> Draft:
        """An action_write: the gold (after the opening) is `actions`."""
        return self.draft("action_write", request, actions)

    def refuse(
        self, request: str, reads: list[dict[str, Any]], call: dict[str, Any], argument: str, also: Sequence[str] = ()
    ) -> Draft:
        """An action_refusal: the gold stops after `reads`, `call` must fail, and a write by `call`'s tool (or
        the tools named in `also`) on the record its `argument` names is forbidden."""
        value = call["arguments"][argument]
        forbid = [(name, argument, value) for name in (call["name"], *also)]
        return self.draft("action_refusal", request, reads, call, forbid)

    def decide(
        self, allowed: bool, request: str, reads: list[dict[str, Any]], call: dict[str, Any], argument: str
    ) -> Draft:
        """The write (gold: `reads`, then `call`) where the policy allows it, else its refusal (see `refuse`)."""
        if allowed:
            return self.write(request, [*reads, call])
        return self.refuse(request, reads, call, argument)


__all__ = ["Draft", "Drafter", "action", "fact_text"]
