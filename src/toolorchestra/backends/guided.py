"""Schema-guided tool calls: an xgrammar grammar that makes a local model's turn end in a valid call.

The grammar accepts a bounded amount of free text (without a `<tool_call>` tag), then exactly one
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` whose JSON matches one of the offered
tools (the name picks the tool, the arguments follow that tool's schema), then the end of the turn.

Bounding the free text and the free strings is what makes the call certain: a small model left to
ramble would spend its whole token budget before closing its call. xgrammar's own JSON-schema
strings lose their escapes once given a maxLength, so flat argument schemas (the usual case:
strings, enums, numbers, booleans) are written here as EBNF with bounded, escape-aware strings; any
other schema falls back to xgrammar's JSON-schema conversion, whose strings are unbounded.

Imported only by the local backend, so torch, transformers and xgrammar load here at module level.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import torch
import transformers
import xgrammar as xgr

from toolorchestra.backends.schema_check import SchemaError, check_tools  # noqa: F401  (raised by get)
from toolorchestra.backends.toolcalls import CALL_CLOSE, CALL_OPEN, function_spec

# Upper bound on a free string's length even when the token budget would allow more.
MAX_STRING_CHARS = 2000
MIN_STRING_CHARS = 16
# One whitespace character between JSON tokens is all a call needs; unbounded whitespace lets
# greedy decoding loop.
MAX_WHITESPACE = 1
# Digits allowed in a number's integer and fraction parts, so numbers end too.
MAX_DIGITS = 15
# Characters a value whose length the schema leaves open may take, other than a free string.
OPEN_VALUE_CHARS = 2 * MAX_DIGITS + 3

# Schema keys the EBNF path understands; anything else in a property sends the tool set to the
# JSON-schema fallback rather than being silently ignored.
_SCALAR_KEYS = {"type", "description", "title", "enum", "const", "default", "examples", "maxLength", "minLength"}
_OBJECT_KEYS = {"type", "description", "title", "properties", "required", "additionalProperties"}

_SHARED_RULES = r"""ws ::= [ \n]?
string_char ::= [^"\\\x00-\x1f] | "\\" ["\\/bfnrt]
integer ::= "-"? ("0" | [1-9] [0-9]{0,%d})
number ::= integer ("." [0-9]{1,%d})?
boolean ::= "true" | "false"
""" % (MAX_DIGITS - 1, MAX_DIGITS)  # noqa: UP031 (the grammar's own braces would need doubling in an f-string)


@dataclass(frozen=True)
class CallBudget:
    """How a turn's max_tokens is shared: free reasoning first, then the call.

    A token writes at least one character (of ASCII text), so a call fits in the tokens left after
    the reasoning when its skeleton (tags, name, keys, enum values, whitespace) plus its free
    strings fit in that many characters. The free strings of a tool share what its skeleton leaves.
    """

    reasoning_tokens: int
    string_chars: int

    @classmethod
    def plan(cls, max_tokens: int, reasoning_tokens: int, skeleton_chars: int) -> CallBudget:
        spare = max_tokens - skeleton_chars
        reasoning = max(0, min(reasoning_tokens, spare // 4))
        return cls(reasoning, max(MIN_STRING_CHARS, min(MAX_STRING_CHARS, spare - reasoning)))


def reasoning_budget(tools: list[dict[str, Any]], max_tokens: int, reasoning_tokens: int) -> int:
    """Tokens of free reasoning a guided turn over `tools` may write before its call (0: the call starts at once)."""
    return CallBudget.plan(max_tokens, reasoning_tokens, skeleton_chars(tools)).reasoning_tokens


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    return function_spec(tool).get("parameters") or {"type": "object", "properties": {}}


def skeleton_chars(tools: list[dict[str, Any]]) -> int:
    """The longest call over `tools` with every free string empty, whitespace included."""
    longest = 0
    for tool in tools:
        properties = _parameters(tool).get("properties") or {}
        arguments = {key: _placeholder(schema) for key, schema in properties.items()}
        text = json.dumps({"name": function_spec(tool)["name"], "arguments": arguments}, ensure_ascii=False)
        # Room for one whitespace character around each brace, colon and comma.
        longest = max(longest, len(text) + 2 * MAX_WHITESPACE * (2 * len(properties) + 4))
    return longest + len(CALL_OPEN) + len(CALL_CLOSE) + 2


def _placeholder(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "x" * OPEN_VALUE_CHARS
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return max(schema["enum"], key=lambda value: len(json.dumps(value, ensure_ascii=False)))
    if _is_free_string(schema):
        return ""  # its length comes out of the string budget
    return "x" * OPEN_VALUE_CHARS


def _is_free_string(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "string" and "enum" not in schema and "const" not in schema


# -- the EBNF path ----------------------------------------------------------------------------------


def _literal(text: str) -> str:
    """`text` as an EBNF string literal."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _json_literal(value: Any) -> str:
    """An EBNF literal matching exactly the JSON text of `value`."""
    return _literal(json.dumps(value, ensure_ascii=False))


def _is_flat(parameters: dict[str, Any]) -> bool:
    """Whether the EBNF path can express these arguments: an object of scalar properties."""
    if parameters.get("type", "object") != "object" or not set(parameters) <= _OBJECT_KEYS:
        return False
    if parameters.get("additionalProperties") not in (None, False):
        return False
    properties = parameters.get("properties") or {}
    return all(isinstance(schema, dict) and _is_scalar(schema) for schema in properties.values())


def _is_scalar(schema: dict[str, Any]) -> bool:
    if not set(schema) <= _SCALAR_KEYS:
        return False
    if "const" in schema:
        return True
    if "enum" in schema:
        return isinstance(schema["enum"], list) and len(schema["enum"]) > 0
    return schema.get("type") in ("string", "integer", "number", "boolean", "null")


def _value_rule(schema: dict[str, Any], string_cap: int) -> str:
    if "const" in schema:
        return _json_literal(schema["const"])
    if "enum" in schema:
        return "(" + " | ".join(_json_literal(value) for value in schema["enum"]) + ")"
    kind = schema["type"]
    if kind == "string":
        low = max(0, int(schema.get("minLength", 0)))
        high = max(low, min(int(schema.get("maxLength", string_cap)), string_cap))
        # No bounded repetition: xgrammar's matcher costs 16 ms per token on string_char{0,60} and
        # 670 ms on {0,400}, against 0.01 ms on string_char* (benchmarks/valid_calls.py, /tmp run of
        # 2026-11-21). The string budget is kept by the stopping criteria instead: a call that runs out
        # of tokens comes back malformed and is shown to the orchestrator as an error.
        del high
        return '"\\""' + " string_char" * low + ' string_char* "\\""'
    return {"integer": "integer", "number": "number", "boolean": "boolean", "null": '"null"'}[kind]


def _arguments_rules(prefix: str, parameters: dict[str, Any], string_chars: int) -> list[str]:
    """Rules for one tool's arguments object: properties in declared order, optional ones
    skippable, each property either the first (no comma) or a later one (comma first)."""
    properties = list((parameters.get("properties") or {}).items())
    required = set(parameters.get("required") or [])
    free = sum(_is_free_string(schema) for _, schema in properties)
    string_cap = max(MIN_STRING_CHARS, string_chars // max(1, free))
    rules = [f'{prefix} ::= "{{" ws {prefix}_first_0 ws "}}"']
    for index, (key, schema) in enumerate(properties):
        pair = f'{_json_literal(key)} ws ":" ws {_value_rule(schema, string_cap)}'
        first_alternatives = [f"{pair} {prefix}_rest_{index + 1}"]
        rest_alternatives = [f'ws "," ws {pair} {prefix}_rest_{index + 1}']
        if key not in required:
            first_alternatives.append(f"{prefix}_first_{index + 1}")
            rest_alternatives.append(f"{prefix}_rest_{index + 1}")
        rules.append(f"{prefix}_first_{index} ::= " + " | ".join(f"({alt})" for alt in first_alternatives))
        if index > 0:  # the first property never follows a comma
            rules.append(f"{prefix}_rest_{index} ::= " + " | ".join(f"({alt})" for alt in rest_alternatives))
    rules.append(f'{prefix}_first_{len(properties)} ::= ""')
    rules.append(f'{prefix}_rest_{len(properties)} ::= ""')
    return rules


def call_grammar(tools: list[dict[str, Any]], string_chars: int) -> str | None:
    """EBNF of one call object over `tools`, or None when some tool's arguments are not flat."""
    if not all(_is_flat(_parameters(tool)) for tool in tools):
        return None
    rules: list[str] = []
    calls: list[str] = []
    for index, tool in enumerate(tools):
        name = function_spec(tool)["name"]
        calls.append(f"call_{index}")
        rules.append(
            f'call_{index} ::= "{{" ws {_json_literal("name")} ws ":" ws {_json_literal(name)} ws "," ws '
            f'{_json_literal("arguments")} ws ":" ws args_{index} ws "}}"'
        )
        rules.extend(_arguments_rules(f"args_{index}", _parameters(tool), string_chars))
    return "\n".join([f"root ::= {' | '.join(calls)}", *rules, _SHARED_RULES])


# -- the JSON-schema fallback -----------------------------------------------------------------------


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON schema of one call object: {"name": <a tool name>, "arguments": <that tool's arguments>}."""
    alternatives = []
    for tool in tools:
        arguments = inline_local_refs(_parameters(tool))
        if arguments.get("type", "object") == "object":
            arguments.setdefault("additionalProperties", False)
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": function_spec(tool)["name"]}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}


MAX_REF_DEPTH = 16  # deeper nesting of references is taken for a recursive schema and left unresolved


def inline_local_refs(parameters: dict[str, Any]) -> dict[str, Any]:
    """A copy of `parameters` with every local reference (`{"$ref": "#/$defs/Name"}`, also `#/definitions/`)
    replaced by the definition it names, and the definitions dropped.

    Pydantic-generated schemas (tau2-bench's tools, for one) keep nested models under `$defs`; once the
    arguments are nested inside the call schema, `#/$defs/...` would point at the call schema's root, which
    has none, and xgrammar refuses to compile. A recursive definition is cut at MAX_REF_DEPTH levels (its
    reference left in place, which xgrammar then rejects as it did before)."""
    definitions = {**(parameters.get("definitions") or {}), **(parameters.get("$defs") or {})}

    def resolve(node: Any, depth: int) -> Any:
        if isinstance(node, list):
            return [resolve(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        reference = node.get("$ref")
        if isinstance(reference, str) and depth < MAX_REF_DEPTH:
            name = _local_definition(reference)
            if name in definitions:
                siblings = {key: value for key, value in node.items() if key != "$ref"}
                return {**resolve(definitions[name], depth + 1), **resolve(siblings, depth)}
        return {key: resolve(value, depth) for key, value in node.items() if key not in ("$defs", "definitions")}

    return resolve(copy.deepcopy(parameters), 0)


def _local_definition(reference: str) -> str | None:
    for prefix in ("#/$defs/", "#/definitions/"):
        if reference.startswith(prefix):
            return reference[len(prefix) :]
    return None


def tool_call_format(tools: list[dict[str, Any]], budget: CallBudget) -> dict[str, Any]:
    """The xgrammar structural tag: bounded free text, then one tagged call."""
    grammar = call_grammar(tools, budget.string_chars)
    content: dict[str, Any] = (
        {"type": "grammar", "grammar": grammar}
        if grammar is not None
        else {"type": "json_schema", "json_schema": call_schema(tools), "max_whitespace_cnt": MAX_WHITESPACE}
    )
    call = {"type": "tag", "begin": f"{CALL_OPEN}\n", "content": content, "end": f"\n{CALL_CLOSE}"}
    if budget.reasoning_tokens <= 0:
        return {"type": "structural_tag", "format": call}
    reasoning = {"type": "any_text", "excludes": [CALL_OPEN], "max_tokens": budget.reasoning_tokens}
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": [reasoning, call]}}


GRAMMARS_KEPT = 64
"""Compiled grammars kept per tokenizer; a server that sees ever new tool sets must not grow without end."""


class GrammarError(ValueError):
    """Tool definitions that passed `check_tools` but that xgrammar still could not compile. The message
    is ours: xgrammar's own names its C++ source files."""


class ToolCallGrammars:
    """Compiled tool-call grammars of one tokenizer, the GRAMMARS_KEPT most recent cached per (tool set, budget)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: set[int] | None = None) -> None:
        # Every id that ends generation must be a stop token to xgrammar too: one it does not know as such
        # (SmolLM2's GGUF names <|im_start|> its EOS, while generation stops at <|im_end|>) is plain text
        # to the grammar, allowed in the free reasoning and in strings, and so ends the turn before its call.
        stops = sorted(stop_ids) if stop_ids else None
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
        self._compiler = xgr.GrammarCompiler(info, cache_enabled=False)  # the cache below is the bounded one
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()
        self.closing_ids = closing_token_ids(tokenizer, vocab_size)

    def get(self, tools: list[dict[str, Any]], max_tokens: int, reasoning_tokens: int) -> xgr.CompiledGrammar:
        """The grammar for `tools`; SchemaError for an unusable definition, GrammarError when xgrammar fails."""
        check_tools(tools)  # before xgrammar sees them: one clear message instead of a C++ error
        budget = CallBudget.plan(max_tokens, reasoning_tokens, skeleton_chars(tools))
        key = json.dumps(
            [[function_spec(tool) for tool in tools], budget.reasoning_tokens, budget.string_chars], sort_keys=True
        )
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            try:
                compiled = self._compiler.compile_structural_tag(tool_call_format(tools, budget))
            except (RuntimeError, ValueError, TypeError) as exc:
                raise GrammarError(
                    f"the tool definitions could not be turned into a call grammar: {_without_paths(str(exc))}"
                ) from None
            self._cache[key] = compiled
            while len(self._cache) > GRAMMARS_KEPT:
                self._cache.popitem(last=False)
            return compiled


def _without_paths(message: str) -> str:
    """xgrammar's message without the source locations it starts with (`[12:00:00] /path/file.cc:42: `)."""
    line = next((line for line in message.splitlines() if line.strip()), "")
    line = re.sub(r"^\[[^\]]*\]\s*", "", line)
    line = re.sub(r"(?:/[\w.+-]+)+(?::\d+)*:?\s*", "", line)
    return line[:300] or "no reason given"


CLOSE_RESERVE_TOKENS = 24
"""In a row's last this-many tokens (at most a quarter of its budget, at least 8), tokens that close
strings and objects are preferred."""


def close_reserve(limit: int) -> int:
    return max(8, min(CLOSE_RESERVE_TOKENS, limit // 4))


def keep_closing_near_limit(scores: torch.Tensor, row: int, limit: int, generated: int, closing: torch.Tensor) -> None:
    """Within a row's last close_reserve(limit) tokens, if the grammar allows any closing token, allow only those."""
    if limit - generated > close_reserve(limit):
        return
    kept = scores[row, closing]
    if torch.isfinite(kept).any():
        scores[row].fill_(float("-inf"))
        scores[row, closing] = kept


def closing_token_ids(tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """Ids of tokens made only of closing JSON punctuation (`"`, `}`, `]`) and spaces."""
    closing = set('"}] \n')
    ids = []
    for token_id in range(min(len(tokenizer), vocab_size)):
        text = tokenizer.decode([token_id])
        if text.strip() and set(text) <= closing:
            ids.append(token_id)
    return torch.tensor(ids, dtype=torch.long)


class GuidedLogitsProcessor(transformers.LogitsProcessor):
    """Masks each batch row's logits to the tokens its grammar allows; rows without a grammar pass
    through. One instance serves one generate() call.

    Strings in the grammar are unbounded (bounded repetitions make xgrammar's matcher hundreds of
    times slower), so the token budget is kept here: once a row is within CLOSE_RESERVE_TOKENS of its
    limit, and the grammar allows a closing token, only closing tokens stay allowed. The call then
    closes within budget instead of being cut off mid-string.
    """

    def __init__(
        self,
        grammars: list[xgr.CompiledGrammar | None],
        vocab_size: int,
        limits: list[int] | None = None,
        prompt_width: int = 0,
        closing_ids: torch.Tensor | None = None,
    ) -> None:
        self.matchers: list[xgr.GrammarMatcher | None] = [
            xgr.GrammarMatcher(grammar) if grammar is not None else None for grammar in grammars
        ]
        self.bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self.started = False
        self.limits = limits
        self.prompt_width = prompt_width
        self.closing_ids = closing_ids

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.started:
            self._accept(input_ids[:, -1].tolist())
        self.started = True
        rows = [i for i, matcher in enumerate(self.matchers) if matcher is not None and not matcher.is_terminated()]
        if not rows:
            return scores
        for row in rows:
            self.matchers[row].fill_next_token_bitmask(self.bitmask, row)  # type: ignore[union-attr]
        # xgrammar masks CPU and CUDA tensors in place; other devices go through the CPU.
        in_place = scores.device.type in ("cpu", "cuda")
        target = scores if in_place else scores.to("cpu")
        xgr.apply_token_bitmask_inplace(target, self.bitmask.to(target.device), indices=rows)
        self._close_near_limit(target, rows, input_ids.shape[1] - self.prompt_width)
        return cast(torch.FloatTensor, target if in_place else target.to(scores.device))

    def _close_near_limit(self, scores: torch.Tensor, rows: list[int], generated: int) -> None:
        if self.limits is None or self.closing_ids is None or len(self.closing_ids) == 0:
            return
        closing = self.closing_ids.to(scores.device)
        for row in rows:
            keep_closing_near_limit(scores, row, self.limits[row], generated, closing)

    def _accept(self, last_tokens: list[int]) -> None:
        for row, matcher in enumerate(self.matchers):
            if matcher is None or matcher.is_terminated():
                continue
            if not matcher.accept_token(last_tokens[row]):
                # Only padding after a row hit its token limit can be refused: stop guiding that row.
                self.matchers[row] = None
