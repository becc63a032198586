"""What one request may ask of `toolorchestra serve`, and the checks that hold it to that.

The defaults are sized for the machine this project develops on (2 cores, 24 GB shared by several jobs):
no single request may take more than a few hundred MB or hold the model for more than minutes, however it
is written. Every limit is a `serve` option (`toolorchestra serve --help`).

Body size is checked before the body is read (Content-Length, then the bytes as they arrive); nesting
depth before the body is validated; tool schemas before any grammar is compiled from them; prompt
length and `max_tokens` against the model's context before the request is queued.
"""

from __future__ import annotations

import gc
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from toolorchestra.memory import return_freed_memory

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_JSON_DEPTH = 64
# SmolLM2's context is 8192 tokens, but a full-context prefill on CPU takes well over a GB of transient
# attention memory; half of it keeps one request to a few hundred MB.
DEFAULT_MAX_PROMPT_TOKENS = 4096
DEFAULT_MAX_TOOLS = 128  # as OpenAI
DEFAULT_MAX_TOOL_SCHEMA_BYTES = 64 * 1024
DEFAULT_MAX_ENUM_VALUES = 512
DEFAULT_REQUEST_TIMEOUT_S = 300.0
DEFAULT_MAX_QUEUED = 256
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class ServeLimits:
    """Per-request limits of one server (see the module docstring)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    """Prompt tokens a request may send; a model whose context is shorter uses its context instead."""
    max_tools: int = DEFAULT_MAX_TOOLS
    max_tool_schema_bytes: int = DEFAULT_MAX_TOOL_SCHEMA_BYTES
    """JSON size of all of a request's tool definitions together."""
    max_enum_values: int = DEFAULT_MAX_ENUM_VALUES
    """Values in any one `enum` of a tool schema (each becomes a branch of the call grammar)."""
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    """Wall time one request may take, queueing included; then it is cancelled and answered 504."""
    max_queued: int = DEFAULT_MAX_QUEUED
    """Requests admitted beyond --max-concurrency to wait for a slot; more are answered 429."""

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_json_depth",
            "max_prompt_tokens",
            "max_tools",
            "max_tool_schema_bytes",
            "max_enum_values",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0; got {self.request_timeout_s}")
        if self.max_queued < 0:
            raise ValueError(f"max_queued must be >= 0; got {self.max_queued}")


class BodyError(ValueError):
    """A body that is not acceptable JSON; the message says why, for a 400."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError(f"number {text[:40]} is out of range (the largest JSON number accepted is about 1.8e308)")
    return value


def _no_constant(text: str) -> Any:
    raise BodyError(f"{text} is not a JSON value (JSON has no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


def load_json(raw: bytes, max_depth: int) -> Any:
    """`raw` parsed, refusing NaN/Infinity, numbers beyond float range, and nesting deeper than `max_depth`.

    The depth is checked on the bytes before parsing (brackets outside strings), so a body nested
    100,000 deep never reaches the recursive parser.
    """
    # Each level of nesting opens a bracket, so a body with few brackets needs no scan (most bodies).
    if raw.count(b"[") + raw.count(b"{") > max_depth and json_depth(raw, stop_above=max_depth) > max_depth:
        raise BodyError(f"JSON nested more than {max_depth} levels deep; at most {max_depth} are accepted")
    try:
        # As json.loads decodes bytes, with one decoder kept rather than one built per body.
        return _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except RecursionError:  # cannot happen below the depth bound, but never a 500
        raise BodyError(f"JSON nested too deep; at most {max_depth} levels are accepted") from None
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise BodyError(f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


_OPENERS = frozenset(b"[{")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def json_depth(raw: bytes, stop_above: int | None = None) -> int:
    """The deepest bracket nesting of JSON text `raw`, brackets inside strings not counted; once it
    passes `stop_above`, that depth plus one is returned without scanning further.

    Only the bytes that matter are visited: the text is split on quotes, and only the brackets of the
    pieces outside strings are scanned, so a body of long strings or numbers costs little.
    """
    if b"[" not in raw and b"{" not in raw:
        return 0
    depth = deepest = 0
    inside = False
    for piece in _string_split(raw):
        if not inside:
            for byte in piece.translate(None, _NOT_BRACKETS):
                if byte in _OPENERS:
                    depth += 1
                    if depth > deepest:
                        deepest = depth
                        if stop_above is not None and deepest > stop_above:
                            return deepest
                else:
                    depth -= 1
        inside = not inside
    return deepest


def _string_split(raw: bytes) -> list[bytes]:
    # Quotes that end a string are those not escaped; an escaped quote (odd run of backslashes before it)
    # stays inside its piece.
    pieces = raw.split(b'"')
    merged: list[bytes] = []
    carry: bytes | None = None
    for piece in pieces:
        current = piece if carry is None else carry + b'"' + piece
        trailing = len(current) - len(current.rstrip(b"\\"))
        if len(merged) % 2 == 1 and trailing % 2 == 1:  # inside a string, and this quote is escaped
            carry = current
            continue
        merged.append(current)
        carry = None
    if carry is not None:
        merged.append(carry)
    return merged


class MemoryReleaser:
    """Hands freed heap back to the operating system once a server is idle.

    glibc keeps freed memory of large requests (a prefill's activations, a big body) in its arenas, so
    resident memory would stay at its high-water mark; `malloc_trim` returns it. At most once a second,
    and only when no request is in flight, so it never slows a busy server.
    """

    def __init__(self, min_interval_s: float = 1.0) -> None:
        self.min_interval_s = min_interval_s
        self._last = 0.0

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.min_interval_s

    def release(self) -> None:
        self._last = time.monotonic()
        gc.collect()
        return_freed_memory()
