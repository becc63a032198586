"""Tools derived from a domain's shape, not hand-written per domain.

Per collection (see data.CollectionShape):
- get_<record>(<key>): the full record;
- list_<collection>(filters, limit): ids of records whose dotted leaves equal the filter values;
- find_<collection>_by_<field>(value): for foreign keys, email and status leaves;
- find_<record>_id_by_email(email): where records carry an email (the policies' authentication step);
- set_<record>_status(<key>, status): where records have a top-level status with several values seen;
- update_<record>_email(<key>, email): where records carry an email;
- freeze_<record> / unfreeze_<record>: where the statuses include active and a hold value (frozen, ...).
Records nested inside others (a field mapping ids to records carrying that id, e.g. a bank client's
cards and accounts) get get_<record> and the status actions too: freeze_card, unfreeze_account, ...

Domain policy actions the rules cannot derive (bank transfers, ...) come from envs/toolscale/actions/.

Every tool validates its arguments against its JSON schema and answers a bad call with
ToolResult(error=...) naming the field; nothing raises out of `run`. Tools read and write only the
episode's `Database`, never the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import jsonschema

from toolorchestra.envs.toolscale.data import CollectionShape, Database, leaf_paths, read_path
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

HOLD_STATUSES = ("frozen", "blocked", "suspended", "on-hold")
MAX_LIST = 50


class ToolFailure(Exception):
    """A clear, expected failure of a call (unknown id, no match); becomes ToolResult.error."""


Handler = Callable[[Database, dict[str, Any]], Any]


@dataclass
class ToolSpec:
    """A derived tool, independent of any episode: bind it to a Database with `bind`."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    writes: bool = False
    collection: str = ""
    key_argument: str | None = None

    def bind(self, database: Database) -> DomainTool:
        return DomainTool(self, database)


def write_spec(
    name: str, description: str, parameters: dict[str, Any], handler: Any, collection: str, key_argument: str
) -> ToolSpec:
    """A write action: its description marked WRITE for the agent, and the collection and key argument
    that name the record it changes (what refusals forbid)."""
    return ToolSpec(
        name,
        f"WRITE. {description}",
        parameters,
        handler,
        writes=True,
        collection=collection,
        key_argument=key_argument,
    )


class WriteMaker(Protocol):
    def __call__(
        self, name: str, description: str, own: dict[str, Any], handler: Handler, optional: dict[str, Any] | None = None
    ) -> ToolSpec: ...


def writes_on(collection: str, key_argument: str, common: dict[str, Any]) -> WriteMaker:
    """A `write_spec` maker for a domain's actions on one collection: each action takes the `common` arguments
    (the record's key argument among them) before its own required ones, then any optional ones."""

    def write(
        name: str, description: str, own: dict[str, Any], handler: Handler, optional: dict[str, Any] | None = None
    ) -> ToolSpec:
        parameters = object_schema({**common, **own}, optional)
        return write_spec(name, description, parameters, handler, collection, key_argument)

    return write


class DomainTool(Tool):
    def __init__(self, spec: ToolSpec, database: Database) -> None:
        self.spec, self.database = spec, database
        self.name, self.description, self.parameters = spec.name, spec.description, spec.parameters
        self.validator = jsonschema.Draft202012Validator(spec.parameters)

    def validation_error(self, arguments: Any) -> str | None:
        if not isinstance(arguments, dict):
            return f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}"
        errors = sorted(self.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        error = errors[0]
        where = ".".join(str(part) for part in error.absolute_path) or "arguments"
        return f"{self.name}: invalid argument {where}: {error.message}"

    def call(self, arguments: Any) -> ToolResult:
        """Synchronous core of `run` (the task generator and scorer call it directly)."""
        problem = self.validation_error(arguments)
        if problem:
            return ToolResult(error=problem)
        try:
            output = self.spec.handler(self.database, arguments)
        except ToolFailure as failure:
            return ToolResult(error=f"{self.name}: {failure}")
        except Exception as exc:  # noqa: BLE001 - a tool must never raise into the agent loop
            return ToolResult(error=f"{self.name}: internal error {type(exc).__name__}: {exc}")
        return ToolResult(output=json.dumps(output, ensure_ascii=False))

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return self.call(arguments)


def key_argument(shape: CollectionShape) -> str:
    return shape.key_field or f"{shape.singular}_id"


@dataclass
class Located:
    """Where a record lives: its top-level record and the path from there (empty unless nested)."""

    collection: str
    top_key: str
    prefix: list[str]
    record: dict[str, Any]


def locate(database: Database, shape: CollectionShape, arguments: dict[str, Any]) -> Located:
    key = arguments[key_argument(shape)]
    if shape.parent and shape.parent_field:
        found = database.locate_nested(shape, key)
        if found:
            return Located(shape.parent, found[0], [shape.parent_field, key], found[1])
    elif (record := database.get(shape.name, key)) is not None:
        return Located(shape.name, key, [], record)
    raise ToolFailure(f"no {shape.singular} with {key_argument(shape)} {key!r}")


def id_schema(shape: CollectionShape, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    key = {"type": "string", "minLength": 1, "description": f"the {shape.singular}'s {key_argument(shape)}"}
    return object_schema({key_argument(shape): key, **(extra or {})})


def get_tool(shape: CollectionShape) -> ToolSpec:
    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        return locate(database, shape, arguments).record

    return ToolSpec(
        f"get_{shape.singular}",
        f"Get the full {shape.singular} record by its {key_argument(shape)}.",
        id_schema(shape),
        handler,
        collection=shape.name,
        key_argument=key_argument(shape),
    )


def matching_keys(database: Database, shape: CollectionShape, filters: dict[str, Any]) -> list[str]:
    return [
        key
        for key, record in database.records(shape.name)
        if all(read_path(record, path) == value for path, value in filters.items())
    ]


def list_tool(shape: CollectionShape) -> ToolSpec:
    leaves = sorted(shape.leaf_types)

    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        filters = arguments.get("filters", {})
        unknown = sorted(set(filters) - set(shape.leaf_types))
        if unknown:
            raise ToolFailure(f"invalid argument filters: unknown field {unknown[0]!r}; valid: {', '.join(leaves)}")
        keys = matching_keys(database, shape, filters)
        limit = arguments.get("limit", 20)
        return {"count": len(keys), key_argument(shape) + "s": keys[:limit]}

    parameters = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "filters": {
                "type": "object",
                "description": f"dotted field -> exact value; fields: {', '.join(leaves)}",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST},
        },
    }
    return ToolSpec(
        f"list_{shape.name}",
        f"List {shape.name} ids whose fields equal the filters.",
        parameters,
        handler,
        collection=shape.name,
    )


def one_argument(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The strict schema of a read that takes one required argument."""
    return {"type": "object", "additionalProperties": False, "required": [name], "properties": {name: schema}}


def find_by_tool(shape: CollectionShape, path: str) -> ToolSpec:
    field_name = path.replace(".", "_")

    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        keys = matching_keys(database, shape, {path: arguments["value"]})
        return {"count": len(keys), key_argument(shape) + "s": keys[:MAX_LIST]}

    return ToolSpec(
        f"find_{shape.name}_by_{field_name}",
        f"Find {shape.name} ids whose {path} equals value.",
        one_argument("value", {"type": shape.leaf_types[path], "description": f"the exact {path}"}),
        handler,
        collection=shape.name,
    )


def find_id_by_email_tool(shape: CollectionShape) -> ToolSpec:
    assert shape.email_path is not None
    email_path = shape.email_path

    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        wanted = arguments["email"].strip().lower()
        keys = [
            key
            for key, record in database.records(shape.name)
            if str(read_path(record, email_path) or "").lower() == wanted
        ]
        if not keys:
            raise ToolFailure(f"no {shape.singular} with email {arguments['email']!r}")
        if len(keys) > 1:  # shared emails exist in the data: say so rather than pick one silently
            return {key_argument(shape) + "s": keys[:MAX_LIST], "note": "several records share this email"}
        return {key_argument(shape): keys[0]}

    return ToolSpec(
        f"find_{shape.singular}_id_by_email",
        f"Find the {key_argument(shape)} of the {shape.singular} with this email (authentication).",
        one_argument("email", {"type": "string", "minLength": 3, "description": "the email on file"}),
        handler,
        collection=shape.name,
    )


def set_status_tool(shape: CollectionShape, name: str, fixed: str | None = None) -> ToolSpec:
    """set_<record>_status with a status argument, or a named action fixing the status (freeze...)."""

    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        where = locate(database, shape, arguments)
        new_status = fixed or arguments["status"]
        database.update(where.collection, where.top_key, [*where.prefix, "status"], new_status)
        return {
            key_argument(shape): arguments[key_argument(shape)],
            "old_status": where.record.get("status"),
            "status": new_status,
        }

    extra = {} if fixed else {"status": {"type": "string", "enum": shape.status_values}}
    what = f"Set the {shape.singular}'s status to {fixed!r}." if fixed else f"Set the {shape.singular}'s status."
    return write_spec(name, what, id_schema(shape, extra), handler, shape.name, key_argument(shape))


def update_email_tool(shape: CollectionShape) -> ToolSpec:
    """update_<record>_email: a contact change every email-carrying record allows."""
    assert shape.email_path is not None
    email_path = shape.email_path

    def handler(database: Database, arguments: dict[str, Any]) -> Any:
        key, record = arguments[key_argument(shape)], locate(database, shape, arguments).record
        new_email = arguments["email"].strip()
        if "@" not in new_email or new_email.startswith("@") or new_email.endswith("@"):
            raise ToolFailure(f"invalid argument email: {new_email!r} is not an email address")
        database.update(shape.name, key, email_path, new_email)
        return {key_argument(shape): key, "old_email": read_path(record, email_path), "email": new_email}

    extra = {"email": {"type": "string", "minLength": 3, "description": "the new email"}}
    return write_spec(
        f"update_{shape.singular}_email",
        f"Change the {shape.singular}'s email ({email_path}).",
        id_schema(shape, extra),
        handler,
        shape.name,
        key_argument(shape),
    )


def status_actions(shape: CollectionShape) -> list[ToolSpec]:
    if not shape.status_values:
        return []
    specs = [set_status_tool(shape, f"set_{shape.singular}_status")]
    hold = next((status for status in HOLD_STATUSES if status in shape.status_values), None)
    if hold and "active" in shape.status_values:
        specs.append(set_status_tool(shape, f"freeze_{shape.singular}", hold))
        specs.append(set_status_tool(shape, f"unfreeze_{shape.singular}", "active"))
    return specs


def finder_paths(shape: CollectionShape) -> list[str]:
    """Leaves worth a find tool: links to other collections, emails and the status."""
    paths = set(shape.foreign_keys)
    if shape.email_path:
        paths.add(shape.email_path)
    if shape.status_values:
        paths.add("status")
    return sorted(paths)


def derive_tools(
    shapes: dict[str, CollectionShape], nested: dict[str, CollectionShape] | None = None
) -> list[ToolSpec]:
    """Tools of the top-level collections, then get and status actions of nested records (bank cards)."""
    specs: list[ToolSpec] = []
    for shape in (nested or {}).values():
        specs += [get_tool(shape), *status_actions(shape)]
    for shape in shapes.values():
        specs += [get_tool(shape), list_tool(shape)]
        specs += [find_by_tool(shape, path) for path in finder_paths(shape)]
        if shape.email_path:
            specs += [find_id_by_email_tool(shape), update_email_tool(shape)]
        specs += status_actions(shape)
    return specs


TEXT = {"type": "string", "minLength": 1}  # the schema of a non-empty string argument (ids, names, ...)


def object_schema(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    """A strict JSON schema for an action's arguments."""
    return {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
        "additionalProperties": False,
    }


__all__ = [
    "TEXT",
    "DomainTool",
    "ToolFailure",
    "ToolSpec",
    "derive_tools",
    "key_argument",
    "leaf_paths",
    "object_schema",
    "write_spec",
    "writes_on",
]
