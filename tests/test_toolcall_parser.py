"""The Hermes tool-call format: parsing model output, rendering calls and rewriting chat history."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.toolcalls import (
    parse_tool_calls,
    render_tool_call,
    render_tool_response,
    render_tools_block,
    to_plain_messages,
)

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search a corpus.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


# -- parse_tool_calls: examples -------------------------------------------------------------------


def test_one_call_with_reasoning_before_it() -> None:
    text = 'I should search.\n<tool_call>\n{"name": "search", "arguments": {"query": "Eiffel"}}\n</tool_call>'
    prose, calls, errors = parse_tool_calls(text)
    assert prose == "I should search."
    assert [(c.name, c.arguments) for c in calls] == [("search", {"query": "Eiffel"})]
    assert errors == []


def test_whitespace_inside_and_around_the_block() -> None:
    text = '  <tool_call>  \n\n\t{ "name" : "search" ,\n "arguments" : { "query" : "x" } }\n\n </tool_call>  '
    prose, calls, errors = parse_tool_calls(text)
    assert prose == ""
    assert calls[0].name == "search" and calls[0].arguments == {"query": "x"}
    assert errors == []


def test_trailing_text_after_the_json_and_after_the_block_is_ignored() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}} oops</tool_call> and then I rambled on'
    prose, calls, errors = parse_tool_calls(text)
    assert [c.name for c in calls] == ["a"]
    assert errors == []
    assert prose == ""


def test_code_fences_around_the_json() -> None:
    for fence in ("```json", "```"):
        text = f'<tool_call>\n{fence}\n{{"name": "python", "arguments": {{"code": "print(1)"}}}}\n```\n</tool_call>'
        _, calls, errors = parse_tool_calls(text)
        assert errors == []
        assert calls[0].arguments == {"code": "print(1)"}


def test_multiple_calls_keep_their_order_and_get_distinct_ids() -> None:
    text = "".join(render_tool_call(ToolCall(id="x", name=f"t{i}", arguments={"i": i})) for i in range(3))
    _, calls, errors = parse_tool_calls(text, id_prefix="turn3")
    assert [c.name for c in calls] == ["t0", "t1", "t2"]
    assert [c.arguments["i"] for c in calls] == [0, 1, 2]
    assert [c.id for c in calls] == ["turn3_0", "turn3_1", "turn3_2"]
    assert errors == []


def test_unclosed_last_block_is_still_parsed() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"k": 1}}\n'
    _, calls, errors = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls] == [("a", {}), ("b", {"k": 1})]
    assert errors == []


def test_unclosed_block_followed_by_another_call_yields_both() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    _, calls, errors = parse_tool_calls(text)
    assert [c.name for c in calls] == ["a", "b"]
    assert errors == []


def test_tags_quoted_inside_arguments_do_not_split_the_call() -> None:
    code = 'print("<tool_call>")\nprint("</tool_call>")'
    text = render_tool_call(ToolCall(id="x", name="python", arguments={"code": code})) + "\n" + render_tool_call(
        ToolCall(id="y", name="answer", arguments={"answer": "</tool_call> is the closing tag"}))
    _, calls, errors = parse_tool_calls(text)
    assert errors == []
    assert [(c.name, c.arguments) for c in calls] == [
        ("python", {"code": code}), ("answer", {"answer": "</tool_call> is the closing tag"})]


def test_truncated_json_is_an_error_not_a_call() -> None:
    _, calls, errors = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"query": "Eiff')
    assert calls == []
    assert len(errors) == 1 and "invalid JSON" in errors[0]


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    text = '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>'
    _, calls, errors = parse_tool_calls(text)
    assert calls[0].arguments == {"query": "x"}
    assert errors == []


def test_arguments_string_that_is_not_an_object_is_an_error() -> None:
    for arguments in ('"not json"', '"[1, 2]"', "[1, 2]", "3", "null"):
        _, calls, errors = parse_tool_calls(f'<tool_call>{{"name": "a", "arguments": {arguments}}}</tool_call>')
        assert calls == [], arguments
        assert 'field "arguments" is not a JSON object' in errors[0]


def test_parameters_is_accepted_for_arguments_and_missing_arguments_are_empty() -> None:
    _, calls, _ = parse_tool_calls('<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>')
    assert calls[0].arguments == {"x": 1}
    _, calls, _ = parse_tool_calls('<tool_call>{"name": "a"}</tool_call>')
    assert calls[0].arguments == {}


def test_non_object_json_is_an_error() -> None:
    for body in ("[1, 2, 3]", '"search"', "42", "null", "true"):
        _, calls, errors = parse_tool_calls(f"<tool_call>{body}</tool_call>")
        assert calls == []
        assert "expected a JSON object" in errors[0]


def test_missing_or_empty_or_non_string_name_is_an_error() -> None:
    for body in ('{"arguments": {}}', '{"name": "", "arguments": {}}', '{"name": 3, "arguments": {}}'):
        _, calls, errors = parse_tool_calls(f"<tool_call>{body}</tool_call>")
        assert calls == []
        assert 'missing string field "name"' in errors[0]


def test_a_bad_block_does_not_hide_a_good_one() -> None:
    text = "<tool_call>{broken</tool_call><tool_call>{\"name\": \"ok\"}</tool_call>"
    _, calls, errors = parse_tool_calls(text)
    assert [c.name for c in calls] == ["ok"]
    assert len(errors) == 1


def test_lone_surrogate_escape_is_an_error() -> None:
    _, calls, errors = parse_tool_calls('<tool_call>{"name": "a", "arguments": {"q": "\\ud800"}}</tool_call>')
    assert calls == []
    assert "invalid unicode escape" in errors[0]


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    _, calls, errors = parse_tool_calls("<tool_call>" + "[" * 100_000)
    assert calls == [] and len(errors) == 1


def test_long_bodies_are_shortened_in_the_error() -> None:
    _, _, errors = parse_tool_calls("<tool_call>{" + "x" * 5000 + "</tool_call>")
    assert len(errors[0]) < 400


def test_text_without_calls() -> None:
    assert parse_tool_calls("  The answer is 4.  ") == ("The answer is 4.", [], [])
    assert parse_tool_calls("") == ("", [], [])


# -- rendering and history rewriting --------------------------------------------------------------


def test_tools_block_lists_function_specs_one_per_line() -> None:
    block = render_tools_block([SEARCH_TOOL, SEARCH_TOOL["function"]])
    inside = block.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
    assert [json.loads(line) for line in inside] == [SEARCH_TOOL["function"]] * 2
    assert "<tool_call>" in block and "</tool_call>" in block


def test_tool_response_is_wrapped() -> None:
    assert render_tool_response("42") == "<tool_response>\n42\n</tool_response>"


def test_to_plain_messages_renders_calls_results_and_tools() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who built it?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                ToolCall(id="c0", name="search", arguments={"query": "Eiffel"}).to_openai(),
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "not json"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "Gustave Eiffel"},
        {"role": "tool", "tool_call_id": "c1", "content": "nothing"},
        {"role": "assistant", "content": None},
    ]
    plain = to_plain_messages(messages, [SEARCH_TOOL])
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user", "assistant"]
    assert plain[0]["content"].startswith("Be brief.\n\n# Tools")
    assert plain[2]["content"].startswith("Let me look.\n<tool_call>")
    _, calls, errors = parse_tool_calls(plain[2]["content"])
    assert [c.arguments for c in calls] == [{"query": "Eiffel"}, {"_raw": "not json"}]
    assert errors == []
    assert plain[3]["content"] == render_tool_response("Gustave Eiffel") + "\n" + render_tool_response("nothing")
    assert plain[4]["content"] == ""
    assert all(isinstance(m["content"], str) for m in plain)


def test_to_plain_messages_adds_a_system_turn_only_when_tools_are_offered() -> None:
    messages = [{"role": "user", "content": "hi"}]
    with_tools = to_plain_messages(messages, [SEARCH_TOOL])
    assert with_tools[0]["role"] == "system" and "<tools>" in with_tools[0]["content"]
    assert to_plain_messages(messages, None) == messages
    assert to_plain_messages(messages, []) == messages


# -- properties ----------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)

FRAGMENTS = st.sampled_from([
    "<tool_call>", "</tool_call>", "<tool_call>\n", "\n</tool_call>", "<tool_", "call>", "</tool", "<tools>",
    "{", "}", "[", "]", '"', ":", ",", '"name"', '"arguments"', '"parameters"', '"search"', "null", "true",
    "1e400", "NaN", "-0", '"\\ud800"', '"\\u00e9"', "\\", "```json", "```", "\n", " ", "\t",
    '{"name": "search", "arguments": {"query": "x"}}', '{"name": "a", "arguments": "{\\"k\\": 1}"}',
    '{"name": 1}', "[1, 2]", "é", "日本", "🙂", "\u200b", "\x00",
])

MODEL_OUTPUTS = st.lists(FRAGMENTS | st.text(max_size=12), max_size=30).map("".join)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MODEL_OUTPUTS)
def test_fuzz_parse_never_raises_and_returns_well_typed_results(text: str) -> None:
    prose, calls, errors = parse_tool_calls(text)
    assert isinstance(prose, str) and "<tool_call>" not in prose
    assert all(isinstance(call, ToolCall) for call in calls)
    assert all(isinstance(error, str) and error.startswith("malformed tool call") for error in errors)
    # Every block became a call or an error; a tag quoted inside a call's JSON opens no block.
    assert (len(calls) + len(errors) >= 1) == ("<tool_call>" in text)
    assert len(calls) + len(errors) <= text.count("<tool_call>")
    for call in calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
        assert all(isinstance(key, str) for key in call.arguments)
        # Whatever was parsed can be sent back to a model and stored as UTF-8 JSON.
        json.dumps(call.to_openai(), ensure_ascii=False).encode("utf-8")
    assert len({call.id for call in calls}) == len(calls)


@settings(max_examples=300, deadline=None)
@given(
    name=st.text(min_size=1, max_size=20) | st.just("</tool_call>"),
    arguments=st.dictionaries(st.text(max_size=10) | FRAGMENTS, JSON_VALUES | FRAGMENTS, max_size=5),
    prose=st.text(max_size=40).filter(lambda s: "<tool_call>" not in s),
)
def test_rendered_calls_parse_back_to_themselves(name: str, arguments: dict[str, Any], prose: str) -> None:
    rendered = render_tool_call(ToolCall(id="c", name=name, arguments=arguments))
    parsed_prose, calls, errors = parse_tool_calls(f"{prose}\n{rendered}")
    assert errors == []
    assert parsed_prose == prose.strip()
    assert [(c.name, c.arguments) for c in calls] == [(name, arguments)]
