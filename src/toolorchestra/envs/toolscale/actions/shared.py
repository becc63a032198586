"""Helpers the domain policy actions share: the fixed episode clock, record lookups that fail as the agent
should read them, new keys, amounts and addresses (write specs are `tools.write_spec`). A leaf below every
`actions/<domain>.py`: it imports only the tool layer, so domain modules, the task generator and the action
lookup never import one another in a circle.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.toolscale.tools import ToolFailure

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Database

NOW = "2025-10-16T12:00:00Z"  # the episode clock (after every timestamp in the data): writes stay deterministic
KEY_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def existing(database: Database, collection: str, key: str, argument: str, what: str | None = None) -> dict[str, Any]:
    """The record `key` of `collection`, or a ToolFailure "no WHAT with ARGUMENT 'key'" (WHAT defaults to the
    argument without its `_id`/`_ref` suffix)."""
    record = database.get(collection, key)
    if record is None:
        noun = what or argument.removesuffix("_id").removesuffix("_ref")
        raise ToolFailure(f"no {noun} with {argument} {key!r}")
    return record


def new_key(database: Database, collection: str, length: int = 8) -> str:
    """A fresh key for a created record, derived from the collection's size: the same writes in the same
    order give the same keys, so the gold and the agent's episode reach the same database hash."""
    counter = len(database.keys(collection))
    while True:
        digest = int(hashlib.sha256(f"{collection}:{counter}".encode()).hexdigest(), 16)
        key = "".join(KEY_ALPHABET[(digest >> (6 * i)) % len(KEY_ALPHABET)] for i in range(length))
        if database.get(collection, key) is None:
            return key
        counter += 1


def positive_amount(arguments: dict[str, Any], name: str = "amount", allow_zero: bool = False) -> float:
    """The validated amount argument: a finite number > 0 (>= 0 with allow_zero), as a float."""
    value = arguments[name]
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ToolFailure(
            f"invalid argument {name}: expected a finite number {'>=' if allow_zero else '>'} 0, got {value!r}"
        )
    return float(value)


def pick_entries(
    entries: list[dict[str, Any]], field: str, wanted: list[str], argument: str, holder: str, rule: str
) -> list[int]:
    """The index of one entry per value of `field` that argument `argument` lists (`wanted`; a value listed twice
    takes two entries). Where `holder` (e.g. "sale 'S1'") has too few: a ToolFailure that ends with `rule`."""
    held = Counter(entry.get(field) for entry in entries)
    for value, count in Counter(wanted).items():
        if held[value] < count:
            have = f"only {held[value]}" if held[value] else "none"
            raise ToolFailure(
                f"invalid argument {argument}: {count} x {value!r} requested but {holder} has {have}; {rule}"
            )
    pools: dict[Any, list[int]] = {}
    for index, entry in enumerate(entries):
        pools.setdefault(entry.get(field), []).append(index)
    return [pools[value].pop(0) for value in wanted]


def money(value: float) -> float:
    return round(value, 2)


def address_of(arguments: dict[str, Any], fields: Sequence[str], optional: Sequence[str]) -> dict[str, str]:
    """The address `fields` of a call, stripped; every field not in `optional` must be non-empty."""
    blank = [name for name in fields if name not in optional and not arguments[name].strip()]
    if blank:
        required = ", ".join(name for name in fields if name not in optional)
        raise ToolFailure(
            f"invalid argument {blank[0]}: every address field but {', '.join(optional)} ({required}) is required"
        )
    return {name: arguments[name].strip() for name in fields}


AMOUNT_SCHEMA = {"type": "number", "exclusiveMinimum": 0}

__all__ = ["AMOUNT_SCHEMA", "NOW", "address_of", "existing", "money", "new_key", "pick_entries", "positive_amount"]
