"""Loading a ToolScale domain (db.json + policy.md) and inferring the shape of its collections.

The file is read once; every episode works on a `Database`, an overlay of changed records over the
never-mutated base, so an episode can neither write the file nor leak changes into another episode.
The state hash covers the whole database yet costs only the changed records: equal states hash equal
because a record written back to its base value leaves the overlay. Records created in an episode live
in the overlay too; a deleted base record is an overlay entry of None (a tombstone).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from toolorchestra.errors import UserError

DOMAINS = (
    "bank",
    "basketball",
    "ecommerce",
    "medicine",
    "movie",
    "railway",
    "restaurant",
    "school",
    "travel",
    "weather",
)
KEY_SUFFIXES = ("_id", "_ref", "_key", "_number")
SCALARS = (str, int, float, bool)
MAX_LEAF_DEPTH = 2  # dotted paths like contact.email; deeper leaves are reachable through get_<record>


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def leaf_paths(record: dict[str, Any], prefix: str = "", depth: int = 1) -> dict[str, Any]:
    """Scalar leaves of nested dicts (not lists) up to MAX_LEAF_DEPTH, keyed by dotted path."""
    leaves: dict[str, Any] = {}
    for name, value in record.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict) and depth < MAX_LEAF_DEPTH:
            leaves.update(leaf_paths(value, f"{path}.", depth + 1))
        elif isinstance(value, SCALARS):
            leaves[path] = value
    return leaves


def read_path(record: dict[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


@dataclass
class CollectionShape:
    """What the schema rules derive tools from: names, the key field, leaves, statuses and links."""

    name: str
    singular: str
    key_field: str | None
    leaf_types: dict[str, str]  # dotted path -> json type of the scalar leaf
    status_values: list[str] = field(default_factory=list)
    email_path: str | None = None
    foreign_keys: dict[str, str] = field(default_factory=dict)  # path -> referenced collection
    parent: str | None = None  # for nested records (bank cards inside clients): the holding collection
    parent_field: str | None = None  # ... and the field of the parent record that holds them


@dataclass
class Domain:
    name: str
    policy: str
    base: dict[str, dict[str, dict[str, Any]]]
    base_digest: str
    shapes: dict[str, CollectionShape]
    nested: dict[str, CollectionShape] = field(default_factory=dict)  # by singular name

    def new_database(self) -> Database:
        return Database(self)


class Database:
    """One episode's copy: reads see the base through an overlay of this episode's writes."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.changed: dict[tuple[str, str], dict[str, Any] | None] = {}  # None: a tombstone over a base record

    def keys(self, collection: str) -> list[str]:
        """Base keys (less deleted ones), then keys created in this episode, in creation order."""
        base = self.domain.base[collection]
        created = [key for (coll, key), record in self.changed.items() if coll == collection and key not in base]
        return [key for key in base if self.get(collection, key) is not None] + created

    def get(self, collection: str, key: str) -> dict[str, Any] | None:
        if (collection, key) in self.changed:
            return self.changed[(collection, key)]
        return self.domain.base[collection].get(key)

    def records(self, collection: str) -> list[tuple[str, dict[str, Any]]]:
        # keys() lists only live records, so the filter drops nothing; it tells the type checker so
        return [(key, record) for key in self.keys(collection) if (record := self.get(collection, key)) is not None]

    def create(self, collection: str, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """Add a record under a new key (KeyError if the key is taken)."""
        if self.get(collection, key) is not None:
            raise KeyError(key)
        self._store(collection, key, copy.deepcopy(record))
        return record

    def delete(self, collection: str, key: str) -> dict[str, Any]:
        """Remove a record (KeyError if absent): a tombstone over the base, or drop a created one."""
        record = self.get(collection, key)
        if record is None:
            raise KeyError(key)
        self._store(collection, key, None)
        return record

    def _store(self, collection: str, key: str, record: dict[str, Any] | None) -> None:
        """Keep the overlay minimal: a record equal to its base value (or an absent one) leaves it."""
        if record == self.domain.base[collection].get(key):
            self.changed.pop((collection, key), None)
        else:
            self.changed[(collection, key)] = record

    def locate_nested(self, shape: CollectionShape, key: str) -> tuple[str, dict[str, Any]] | None:
        """The parent key and nested record with this key (e.g. the client holding card `key`)."""
        assert shape.parent and shape.parent_field
        for parent_key, parent in self.records(shape.parent):
            held = parent.get(shape.parent_field)
            if isinstance(held, dict) and isinstance(held.get(key), dict):
                return parent_key, held[key]
        return None

    def update(self, collection: str, key: str, path: str | list[str], value: Any) -> dict[str, Any]:
        """Set one path (dotted, or a list of parts) of a record, copying it, never touching the base."""
        record = copy.deepcopy(self.get(collection, key))
        if record is None:
            raise KeyError(key)
        target = record
        *parents, last = path.split(".") if isinstance(path, str) else path
        for part in parents:
            target = target[part]
        target[last] = value
        self._store(collection, key, record)
        return record

    def digest(self) -> str:
        overlay = sorted((f"{collection}/{key}", record) for (collection, key), record in self.changed.items())
        return hashlib.sha256((self.domain.base_digest + canonical(overlay)).encode()).hexdigest()


def singular_name(collection: str, key_field: str | None) -> str:
    if key_field:
        for suffix in KEY_SUFFIXES:
            if key_field.endswith(suffix):
                return key_field[: -len(suffix)]
    return collection.removesuffix("s")


def find_key_field(records: dict[str, dict[str, Any]]) -> str | None:
    """The top-level field whose value equals the record's key in (nearly) every record."""
    first = next(iter(records.values()), {})
    for name in first:
        matches = sum(1 for key, rec in records.items() if isinstance(rec, dict) and str(rec.get(name)) == key)
        if matches >= 0.9 * len(records):
            return name
    return None


def json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def infer_shape(name: str, records: dict[str, dict[str, Any]]) -> CollectionShape:
    key_field = find_key_field(records)
    leaf_types: dict[str, str] = {}
    statuses: set[str] = set()
    for record in records.values():
        for path, value in leaf_paths(record).items():
            leaf_types.setdefault(path, json_type(value))
        if isinstance(record.get("status"), str):
            statuses.add(record["status"])
    email_paths = sorted(p for p, t in leaf_types.items() if t == "string" and p.split(".")[-1].endswith("email"))
    return CollectionShape(
        name=name,
        singular=singular_name(name, key_field),
        key_field=key_field,
        leaf_types=leaf_types,
        status_values=sorted(statuses) if len(statuses) > 1 else [],
        email_path=email_paths[0] if email_paths else None,
    )


def link_collections(base: dict[str, dict[str, dict[str, Any]]], shapes: dict[str, CollectionShape]) -> None:
    """A string leaf whose values all name records of another collection is a foreign key."""
    for shape in shapes.values():
        for path, kind in shape.leaf_types.items():
            if kind != "string" or path == shape.key_field:
                continue
            values = {read_path(rec, path) for rec in base[shape.name].values()} - {None, ""}
            for other, records in base.items():
                if other != shape.name and values and values <= set(records):
                    shape.foreign_keys[path] = other
                    break


def nested_shapes(base: dict[str, dict[str, dict[str, Any]]]) -> dict[str, CollectionShape]:
    """Records kept inside other records (a field mapping ids to records with that id), by singular name."""
    found: dict[str, CollectionShape] = {}
    for collection, records in base.items():
        first = next(iter(records.values()), {})
        for field_name in first:
            holders = [rec[field_name] for rec in records.values() if isinstance(rec.get(field_name), dict)]
            inner = {key: sub for held in holders for key, sub in held.items()}
            if not inner or not all(isinstance(sub, dict) for sub in inner.values()):
                continue
            shape = infer_shape(field_name, inner)
            if shape.key_field and shape.key_field.endswith("_id"):
                shape.parent, shape.parent_field = collection, field_name
                found.setdefault(shape.singular, shape)
    return found


@cache
def load_domain(data_dir: Path, name: str) -> Domain:
    """Read and analyse one domain once per process (the base is shared, never mutated)."""
    folder = Path(data_dir) / "toolscale" / name
    if name not in DOMAINS or not (folder / "db.json").is_file():
        raise UserError(f"toolscale domain {name!r}: no db.json under {folder}; valid: {', '.join(DOMAINS)}")
    raw = (folder / "db.json").read_text(encoding="utf-8")
    base = {coll: recs for coll, recs in json.loads(raw).items() if isinstance(recs, dict)}
    shapes = {coll: infer_shape(coll, recs) for coll, recs in base.items()}
    link_collections(base, shapes)
    policy = (folder / "policy.md").read_text(encoding="utf-8") if (folder / "policy.md").is_file() else ""
    top_level = {shape.singular for shape in shapes.values()}
    nested = {singular: shape for singular, shape in nested_shapes(base).items() if singular not in top_level}
    return Domain(
        name=name,
        policy=policy,
        base=base,
        base_digest=hashlib.sha256(raw.encode()).hexdigest(),
        shapes=shapes,
        nested=nested,
    )
