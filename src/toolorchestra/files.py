"""Reading users' files without trusting them: JSONL line by line, text and YAML with a size bound, and
pydantic-validated YAML whose every failure is one message naming the file (and line or field); and appending to
JSONL after a kill (`drop_torn_tail`), which every resumable writer (eval, tau2, recorded answers) shares.

A single 200 MB line read with a plain `for line in handle` lands in memory whole, then again as a decoded string
and again as parsed JSON: enough to get a process killed. `read_lines` reads each line with a bounded `readline`,
so a line longer than the limit is refused after reading at most limit + 1 bytes of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from toolorchestra.errors import ConfigError, UserError

MAX_LINE_BYTES_ENV = "TOOLORCHESTRA_MAX_LINE_BYTES"
DEFAULT_MAX_LINE_BYTES = 64 * 2**20
"""The longest line accepted by default: the largest saved trajectory line in results/ is about 21 KB, so 64 MiB
leaves room for long tool outputs while keeping one line's parse well under a gigabyte of memory."""


class LineTooLong(UserError):
    """A line longer than the limit; raised before the line is read into memory."""

    def __init__(self, path: Path | str, number: int, limit: int) -> None:
        self.path, self.line, self.limit = str(path), number, limit
        super().__init__(
            f"{path}:{number}: line longer than {limit:,} bytes, refused without reading it (expected "
            f"one JSON object per line; set {MAX_LINE_BYTES_ENV} to raise the limit)"
        )


def max_line_bytes() -> int:
    """The line limit: ${MAX_LINE_BYTES_ENV} when set (a positive integer), else DEFAULT_MAX_LINE_BYTES."""
    text = os.environ.get(MAX_LINE_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UserError(f"environment variable {MAX_LINE_BYTES_ENV}={text!r}: expected a positive number of bytes")
    return value


def read_lines(path: Path | str, limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw bytes without the line end) of each line of `path`; LineTooLong at the first
    line over `limit` bytes (default `max_line_bytes()`), which is never held in memory beyond limit + 1 bytes."""
    limit = max_line_bytes() if limit is None else limit
    with open(path, "rb") as handle:
        number = 0
        while raw := handle.readline(limit + 1):
            number += 1
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if len(body) > limit:
                raise LineTooLong(path, number, limit)
            yield number, body.removesuffix(b"\r")


MAX_TEXT_FILE_BYTES = 16 * 2**20
"""The largest YAML file (catalog, train config, price sheet) read: real ones are a few KB."""


def read_text_file(path: Path | str, what: str = "a UTF-8 text file", limit: int = MAX_TEXT_FILE_BYTES) -> str:
    """The UTF-8 text of a small file. A file over `limit` bytes is refused by its size, unread; a file that is
    not UTF-8 (a binary given by mistake) is a UserError naming the line and byte where decoding failed."""
    size = Path(path).stat().st_size
    if size > limit:
        raise UserError(f"{path}: {size:,} bytes, larger than the {limit:,} accepted; expected {what}")
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); expected {what}"
        ) from None


def read_json_object(path: Path | str, expected: str, limit: int = MAX_TEXT_FILE_BYTES) -> dict[str, Any]:
    """The JSON object in a small file the tool wrote earlier (metrics.json, run.json, a checkpoint's
    state.json), which a user may have edited, truncated or replaced; every failure is a UserError naming the
    file, the line and column where JSON stopped parsing, and `expected` (what the file should be)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: file not found (expected {expected})")
    if not path.is_file():
        raise UserError(f"{path}: not a file (expected {expected})")
    text = read_text_file(path, expected, limit)
    if not text.strip():
        raise UserError(f"{path}: empty file (expected {expected})")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where, problem = f"{path}:{exc.lineno}", f"not valid JSON: {exc.msg} (column {exc.colno})"
        raise UserError(f"{where}: {problem}; expected {expected}") from None
    except (RecursionError, ValueError) as exc:  # nested too deeply, or an integer of thousands of digits
        problem = str(exc)[:200] or "nested too deeply"
        raise UserError(f"{path}: not usable JSON ({problem}); expected {expected}") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected {expected} (a JSON object), got {json_type(value)}")
    return value


def json_type(value: object) -> str:
    """A parsed JSON value's type in JSON's own words (a user reads 'array', not 'list')."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def format_validation_error(path: Path | str, error: ValidationError) -> str:
    lines = [f"{path}: invalid configuration"]
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        got = item.get("input")
        got_text = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"  field {where}: {item['msg']}{got_text}")
    return "\n".join(lines)


def read_yaml(path: Path | str) -> Any:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: file not found")
    if not path.is_file():
        raise ConfigError(f"{path}: not a file (expected a YAML file)")
    try:
        text = read_text_file(path, "a YAML file")
    except UserError as exc:  # too large, or not UTF-8 (a binary given by mistake)
        raise ConfigError(str(exc)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc, text)
        raise ConfigError(f"{path}{f':{line}' if line else ''}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not a usable YAML file: nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits, which Python refuses to convert
        raise ConfigError(f"{path}: not a usable YAML file: {str(exc)[:200]}") from None


def yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The 1-based line and the one-line reason of a YAML error (PyYAML's own text spans several lines)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow, e.g. a control byte
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        return text.count("\n", 0, exc.position) + 1, f"character #x{code:04x} is not allowed in YAML"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    reason = " ".join(f"{problem}{f' ({context})' if context else ''}".split())
    return (mark.line + 1 if mark is not None else None), reason


ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_model(path: Path | str, model: type[ModelT], expected: str, empty_ok: bool = False) -> ModelT:
    """Read a YAML mapping into pydantic `model`; every failure is a ConfigError naming the file."""
    data = read_yaml(path)
    if data is None and empty_ok:
        data = {}
    if data is None:
        raise ConfigError(f"{path}: empty file; expected {expected}")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected {expected}; got {json_type(data)}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(path, exc)) from None


def drop_torn_tail(path: Path) -> None:
    """Cut a last line that a kill left without its newline, so appended lines start clean."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)
