"""The Hermes/Qwen tool-call text format used by local models.

A local model sees its tools in the system prompt as a `<tools>` block of JSON function specs and calls
them by writing `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Tool results come back as
`<tool_response>` blocks. `parse_tool_calls` never raises: whatever it cannot read becomes an error
string that the agent loop shows to the orchestrator as an observation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from toolorchestra.backends.base import ToolCall

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def render_tools_block(tools: list[dict[str, Any]]) -> str:
    """System-prompt text that offers `tools` (OpenAI function specs) in Hermes style."""
    specs = "\n".join(json.dumps(_function_spec(tool), ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        f'{CALL_OPEN}{CALL_CLOSE} XML tags:\n{CALL_OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CALL_CLOSE}'
    )


def _function_spec(tool: dict[str, Any]) -> dict[str, Any]:
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
    (generation often stops on the closing tag). Never raises.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    first = text.find(CALL_OPEN)
    prose = (text if first < 0 else text[:first]).strip()
    for index, match in enumerate(_CALL_BLOCK.finditer(text)):
        body = match.group(1).strip()
        call, error = _parse_call_body(body, f"{id_prefix}_{index}")
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
    return prose, calls, errors


def _parse_call_body(body: str, call_id: str) -> tuple[ToolCall | None, str]:
    body = body.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    shown = body if len(body) <= 200 else body[:200] + "..."
    try:
        payload, _ = json.JSONDecoder().raw_decode(body)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        return None, f"malformed tool call (invalid JSON: {exc.__class__.__name__}): {shown!r}"
    if not isinstance(payload, dict):
        return None, f"malformed tool call (expected a JSON object): {shown!r}"
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return None, f'malformed tool call (missing string field "name"): {shown!r}'
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return None, f'malformed tool call (field "arguments" is not a JSON object): {shown!r}'
    if not isinstance(arguments, dict):
        return None, f'malformed tool call (field "arguments" is not a JSON object): {shown!r}'
    return ToolCall(id=call_id, name=name, arguments=arguments), ""
