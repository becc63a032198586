"""The Hermes/Qwen tool-call text format used by local models.

A local model sees its tools in the system prompt as a `<tools>` block of JSON function specs and calls
them by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Tool results come back as
`<tool_response>` blocks. `parse_tool_calls` never raises: whatever it cannot read becomes an error
string that the agent loop shows to the orchestrator as an observation.
"""

from __future__ import annotations

import json
from typing import Any

from toolorchestra.backends.base import ToolCall

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_DECODER = json.JSONDecoder()


def render_tools_block(tools: list[dict[str, Any]]) -> str:
    """System-prompt text that offers `tools` (OpenAI function specs) in Hermes style."""
    specs = "\n".join(json.dumps(function_spec(tool), ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f"{CALL_OPEN}{CALL_CLOSE} XML tags:\n{CALL_OPEN}\n"
        f'{{"name": <function-name>, "arguments": <args-json-object>}}\n{CALL_CLOSE}'
    )


def function_spec(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"] if tool.get("type") == "function" and "function" in tool else tool


def render_tool_call(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def render_tool_response(content: str) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def to_plain_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, str]]:
    """Rewrite OpenAI-style messages (tool_calls, role=tool) as plain chat turns in Hermes format.

    Chat templates that ignore `tools=` (SmolLM2's does) still get the tools, because the block is
    written into the system message here.
    """
    plain: list[dict[str, str]] = []
    for message in messages:
        role = message["role"]
        content = message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = [_call_from_openai(raw) for raw in message["tool_calls"]]
            content = "\n".join([content] * bool(content) + [render_tool_call(c) for c in calls])
        if role == "tool":
            response = render_tool_response(content)
            # Consecutive tool results are one user turn, as in the Qwen template.
            if plain and plain[-1]["role"] == "user" and plain[-1]["content"].startswith("<tool_response>"):
                plain[-1]["content"] += "\n" + response
                continue
            role, content = "user", response
        plain.append({"role": role, "content": content})
    if tools:
        block = render_tools_block(tools)
        if plain and plain[0]["role"] == "system":
            plain[0] = {"role": "system", "content": plain[0]["content"] + "\n\n" + block}
        else:
            plain.insert(0, {"role": "system", "content": block})
    return plain


def _call_from_openai(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function", raw)
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = {"_raw": arguments}
    return ToolCall(id=raw.get("id", "call"), name=function.get("name", ""), arguments=arguments)


def parse_tool_calls(text: str, id_prefix: str = "call") -> tuple[str, list[ToolCall], list[str]]:
    """Split model output into (text before the first call, parsed calls, error messages).

    Tolerates whitespace, code fences and trailing text; an unclosed final block is still tried
    (generation often stops on the closing tag). The JSON of a call is read before looking for the
    closing tag, so a tag quoted inside an argument (code, an answer) does not cut the call short.
    Never raises.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    start = text.find(CALL_OPEN)
    prose = (text if start < 0 else text[:start]).strip()
    while start >= 0:
        call, error, resume = _read_block(text, start + len(CALL_OPEN), f"{id_prefix}_{len(calls) + len(errors)}")
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        start = text.find(CALL_OPEN, resume)
    return prose, calls, errors


def _read_block(text: str, body_start: int, call_id: str) -> tuple[ToolCall | None, str, int]:
    """The call whose body starts at `body_start`, its error, and where scanning resumes."""
    json_start = _skip_fence(text, body_start)
    try:
        payload, json_end = _DECODER.raw_decode(text, json_start)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        body_end, resume = _block_end(text, body_start)
        shown = _shown(text[json_start:body_end])
        return None, f"malformed tool call (invalid JSON: {exc.__class__.__name__}): {shown!r}", resume
    body_end, resume = _block_end(text, json_end)
    call, error = _call_from_payload(payload, _shown(text[json_start:body_end]), call_id)
    return call, error, resume


def _skip_fence(text: str, index: int) -> int:
    """Index of the JSON in a body that may open with whitespace and a code fence."""
    index = _skip_space(text, index)
    for fence in ("```json", "```"):
        if text.startswith(fence, index):
            return _skip_space(text, index + len(fence))
    return index


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _block_end(text: str, index: int) -> tuple[int, int]:
    """(end of the block's body, where scanning resumes), searching from `index`: the block ends at
    its closing tag, else at the next opening tag (an unclosed call followed by another), else at
    the end of the text."""
    close = text.find(CALL_CLOSE, index)
    reopen = text.find(CALL_OPEN, index)
    if close >= 0 and (reopen < 0 or close < reopen):
        return close, close + len(CALL_CLOSE)
    end = reopen if reopen >= 0 else len(text)
    return end, end


def _shown(body: str) -> str:
    body = body.strip().removesuffix("```").strip()
    return body if len(body) <= 200 else body[:200] + "..."


def _call_from_payload(payload: Any, shown: str, call_id: str) -> tuple[ToolCall | None, str]:
    if not isinstance(payload, dict):
        return None, f"malformed tool call (expected a JSON object): {shown!r}"
    if not _utf8_encodable(payload):
        # A lone surrogate escape such as "\\ud800" decodes, but could never be sent or saved as UTF-8.
        return None, f"malformed tool call (invalid unicode escape): {shown!r}"
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return None, f'malformed tool call (missing string field "name"): {shown!r}'
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError, ValueError):
            arguments = None
    if not isinstance(arguments, dict):
        return None, f'malformed tool call (field "arguments" is not a JSON object): {shown!r}'
    return ToolCall(id=call_id, name=name, arguments=arguments), ""


def _utf8_encodable(payload: dict[str, Any]) -> bool:
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError, RecursionError):
        return False
    return True
