"""Tool definitions checked before anything is built from them.

A tool's `parameters` schema becomes a grammar (xgrammar, for schema-guided calls) and a prompt; a
malformed one used to fail deep inside xgrammar, whose C++ error names its own source files, or to cost
minutes and gigabytes (a 20,000-value enum). `check_tools` refuses such definitions first, with one
message that names the offending place (`tools.0.function.parameters.properties.city.type`) and what was
expected there. It covers the parts of JSON Schema that tool definitions use; keywords it does not know
are left alone.

No heavy imports: `serve` calls it for every request, the local backend before compiling a grammar.
"""

from __future__ import annotations

import json
import re
from typing import Any

JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
DEFAULT_MAX_ENUM_VALUES = 512
DEFAULT_MAX_SCHEMA_BYTES = 64 * 1024
MAX_NAME_CHARS = 128

_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


class SchemaError(ValueError):
    """A tool definition that cannot be used; `where` is the dotted path of the offending value."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def check_tools(
    tools: list[Any],
    *,
    where: str = "tools",
    max_bytes: int = DEFAULT_MAX_SCHEMA_BYTES,
    max_enum_values: int = DEFAULT_MAX_ENUM_VALUES,
) -> None:
    """Raise SchemaError for the first unusable tool definition of `tools` (OpenAI `{"type": "function",
    "function": {...}}` entries, or bare function objects)."""
    size = len(json.dumps(tools, ensure_ascii=False, default=str).encode())
    if size > max_bytes:
        raise SchemaError(where, f"tool definitions take {size} bytes of JSON; at most {max_bytes} are accepted")
    names: set[str] = set()
    for index, tool in enumerate(tools):
        place = f"{where}.{index}"
        if not isinstance(tool, dict):
            raise SchemaError(place, f"expected a tool object; got {_kind(tool)}")
        function = tool.get("function") if tool.get("type") == "function" else tool
        if "function" in tool:
            place += ".function"
        if not isinstance(function, dict):
            raise SchemaError(place, f"expected a function object; got {_kind(function)}")
        name = function.get("name")
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME_CHARS:
            raise SchemaError(
                f"{place}.name", f"expected a name of 1 to {MAX_NAME_CHARS} characters; got {_short(name)}"
            )
        if name in names:
            raise SchemaError(f"{place}.name", f"two tools are named {name!r}")
        names.add(name)
        parameters = function.get("parameters")
        if parameters is not None:
            check_parameters(parameters, where=f"{place}.parameters", max_enum_values=max_enum_values)


def check_parameters(
    parameters: Any, *, where: str = "parameters", max_enum_values: int = DEFAULT_MAX_ENUM_VALUES
) -> None:
    """Raise SchemaError unless `parameters` is a usable object schema."""
    if not isinstance(parameters, dict):
        raise SchemaError(where, f"expected a JSON Schema object; got {_kind(parameters)}")
    if parameters.get("type", "object") != "object":
        raise SchemaError(
            f"{where}.type",
            f'the arguments of a call are an object; expected "object", got {_short(parameters.get("type"))}',
        )
    _Walker(parameters, max_enum_values).schema(parameters, where)


class _Walker:
    def __init__(self, root: dict[str, Any], max_enum_values: int) -> None:
        self.root = root
        self.max_enum_values = max_enum_values

    def schema(self, node: Any, where: str) -> None:
        if isinstance(node, bool):  # `true` / `false` are schemas too
            return
        if not isinstance(node, dict):
            raise SchemaError(where, f"expected a schema (an object or true/false); got {_kind(node)}")
        self._type(node, where)
        for key in _SCHEMA_MAPS:
            if key in node:
                self._schema_map(node[key], f"{where}.{key}")
        for key in _SCHEMA_LISTS:
            if key in node:
                self._schema_list(node[key], f"{where}.{key}")
        for key in _SCHEMA_VALUES:
            if key in node:
                value = node[key]
                if key == "items" and isinstance(value, list):  # the draft-4 tuple form
                    self._schema_list(value, f"{where}.items")
                else:
                    self.schema(value, f"{where}.{key}")
        self._keywords(node, where)

    def _type(self, node: dict[str, Any], where: str) -> None:
        if "type" not in node:
            return
        value = node["type"]
        kinds = value if isinstance(value, list) else [value]
        if not kinds or any(not isinstance(kind, str) or kind not in JSON_TYPES for kind in kinds):
            raise SchemaError(
                f"{where}.type",
                f"expected one of {', '.join(sorted(JSON_TYPES))} (or a list of them); got {_short(value)}",
            )

    def _schema_map(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise SchemaError(where, f"expected an object mapping names to schemas; got {_kind(value)}")
        for name, schema in value.items():
            self.schema(schema, f"{where}.{name}")

    def _schema_list(self, value: Any, where: str) -> None:
        if not isinstance(value, list) or not value:
            raise SchemaError(where, f"expected a non-empty list of schemas; got {_short(value)}")
        for index, schema in enumerate(value):
            self.schema(schema, f"{where}.{index}")

    def _keywords(self, node: dict[str, Any], where: str) -> None:
        if "$ref" in node:
            self._reference(node["$ref"], f"{where}.$ref")
        if "enum" in node:
            enum = node["enum"]
            if not isinstance(enum, list) or not enum:
                raise SchemaError(f"{where}.enum", f"expected a non-empty list of values; got {_short(enum)}")
            if len(enum) > self.max_enum_values:
                raise SchemaError(
                    f"{where}.enum", f"{len(enum)} values; at most {self.max_enum_values} are accepted in one enum"
                )
        if "pattern" in node:
            pattern = node["pattern"]
            if not isinstance(pattern, str):
                raise SchemaError(f"{where}.pattern", f"expected a regular expression string; got {_kind(pattern)}")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SchemaError(f"{where}.pattern", f"not a valid regular expression: {exc}") from None
        if "required" in node:
            required = node["required"]
            if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
                raise SchemaError(f"{where}.required", f"expected a list of property names; got {_short(required)}")
        for key in _COUNTS:
            if key in node and (not _is_int(node[key]) or node[key] < 0):
                raise SchemaError(f"{where}.{key}", f"expected a non-negative integer; got {_short(node[key])}")
        for key in _NUMBERS:
            if key in node and (not isinstance(node[key], (int, float)) or isinstance(node[key], bool)):
                raise SchemaError(f"{where}.{key}", f"expected a number; got {_short(node[key])}")

    def _reference(self, reference: Any, where: str) -> None:
        if not isinstance(reference, str) or not reference.startswith("#"):
            raise SchemaError(
                where,
                "only references inside the same parameters schema are supported "
                f'("#/$defs/NAME"); got {_short(reference)}',
            )
        node: Any = self.root
        for part in reference[1:].split("/")[1:] if reference != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(where, f"reference {reference!r} points at nothing in this schema")
        if not isinstance(node, (dict, bool)):
            raise SchemaError(where, f"reference {reference!r} points at {_kind(node)}, not a schema")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
