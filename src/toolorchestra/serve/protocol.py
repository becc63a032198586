"""The OpenAI chat-completions wire format as this server speaks it.

Requests are validated with pydantic (strict types, unknown fields ignored as OpenAI's own clients send
many); responses, stream chunks and error bodies are plain dicts built here. Nothing in this module
imports FastAPI, so the format can be tested and reused without a web framework.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Completion, Message, Usage
from toolorchestra.backends.schema_check import SchemaError, check_tools
from toolorchestra.serve.limits import BodyError, ServeLimits, load_json

MIN_TEMPERATURE = 1e-6


class ApiError(Exception):
    """A request the server answers with an OpenAI-style error body and this HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


# --- the request -------------------------------------------------------------------------------------


class _Wire(BaseModel):
    # strict: a string where a number belongs is a 400, not silently coerced; extra fields (user,
    # metadata, logprobs, ...) are accepted and ignored so that stock clients work unchanged.
    model_config = ConfigDict(strict=True, extra="ignore")


class FunctionDefinition(_Wire):
    name: str = Field(..., min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ToolDefinition(_Wire):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionCall(_Wire):
    name: str
    arguments: str


class ToolCallIn(_Wire):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Wire):
    type: str
    text: str | None = None


class ChatMessage(_Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class NamedFunction(_Wire):
    name: str


class NamedToolChoice(_Wire):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Wire):
    include_usage: bool = False


class ChatRequest(_Wire):
    model: str = Field(..., min_length=1)
    messages: list[ChatMessage] = Field(..., min_length=1)
    tools: list[ToolDefinition] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    # The range torch.manual_seed accepts.
    seed: int | None = Field(None, ge=-(2**63), le=2**64 - 1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1, description="only one choice is generated")

    @field_validator("temperature")
    @classmethod
    def _temperature_not_vanishing(cls, value: float | None) -> float | None:
        # Sampling divides the logits by the temperature: below this they overflow to infinity.
        if value is not None and 0.0 < value < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy decoding) or at least {MIN_TEMPERATURE:g}; got {value:g}")
        return value

    def max_tokens_field(self) -> str:
        """The name under which the client set its completion limit (for error messages)."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    def sampling(self) -> dict[str, Any]:
        """Keyword arguments for `Backend.complete`: only what the client set, so that an omitted field
        keeps the backend's own default (greedy decoding for every backend of this project)."""
        sampling: dict[str, Any] = {}
        max_tokens = self.max_completion_tokens or self.max_tokens
        if max_tokens is not None:
            sampling["max_tokens"] = max_tokens
        for name in ("temperature", "top_p", "seed"):
            value = getattr(self, name)
            if value is not None:
                sampling[name] = value
        return sampling

    def offered_tools(self) -> list[dict[str, Any]] | None:
        """The tools to offer the backend. `Backend.complete` cannot force a call, so `tool_choice` is
        honoured as far as offering goes: `none` offers nothing, a named function offers only that one,
        and `required` offers every tool, like `auto`."""
        if not self.tools or self.tool_choice == "none":
            return None
        tools = [tool.model_dump(exclude_none=True) for tool in self.tools]
        if isinstance(self.tool_choice, NamedToolChoice):
            wanted = self.tool_choice.function.name
            tools = [tool for tool in tools if tool["function"]["name"] == wanted]
            if not tools:
                raise ApiError(
                    400, f"tool_choice names function {wanted!r}, which is not in tools", param="tool_choice"
                )
        return tools

    def backend_messages(self) -> list[Message]:
        """The conversation as the dict messages backends take, with text content parts joined."""
        return [_backend_message(index, message) for index, message in enumerate(self.messages)]

    def last_user_text(self) -> str:
        """The last user message: the task an orchestrator episode answers."""
        for index in range(len(self.messages) - 1, -1, -1):
            if self.messages[index].role == "user":
                return _text_of(index, self.messages[index])
        raise ApiError(400, "an orchestrator model needs at least one user message", param="messages")


def _text_of(index: int, message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    texts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"content part of type {part.type!r} is not supported; only text parts are",
                param=f"messages.{index}.content",
            )
        texts.append(part.text)
    return "\n".join(texts)


def _backend_message(index: int, message: ChatMessage) -> Message:
    # Backends know system/user/assistant/tool; OpenAI's newer `developer` role means the same as system.
    role = "system" if message.role == "developer" else message.role
    converted: Message = {"role": role, "content": _text_of(index, message)}
    if message.tool_calls:
        converted["tool_calls"] = [call.model_dump() for call in message.tool_calls]
    if message.tool_call_id is not None:
        converted["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        converted["name"] = message.name
    return converted


def parse_chat_request(raw_body: bytes, limits: ServeLimits | None = None) -> ChatRequest:
    """The validated request, or ApiError 400 naming the first offending field."""
    limits = limits or ServeLimits()
    try:
        data = load_json(raw_body, limits.max_json_depth)
    except BodyError as exc:
        raise ApiError(400, str(exc)) from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object; got {type(data).__name__}")
    try:
        request = ChatRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or None
        raise ApiError(400, f"{where or 'body'}: {first['msg']}", param=where) from None
    _check_tools(data.get("tools"), limits)
    return request


def _check_tools(tools: list[Any] | None, limits: ServeLimits) -> None:
    """Tool definitions are checked as sent (not as pydantic re-serialises them), before any backend
    builds a grammar or a prompt from them."""
    if not tools:
        return
    if len(tools) > limits.max_tools:
        raise ApiError(400, f"tools: {len(tools)} tools; at most {limits.max_tools} are accepted", param="tools")
    try:
        check_tools(tools, max_bytes=limits.max_tool_schema_bytes, max_enum_values=limits.max_enum_values)
    except SchemaError as exc:
        raise ApiError(400, str(exc), param=exc.where) from None


# --- the answer and its rendering --------------------------------------------------------------------


@dataclass
class Answer:
    """What a served model produced for one request: the turn, its price, and for an orchestrator the
    episode it ran."""

    completion: Completion
    cost_usd: float
    finish_reason: Literal["stop", "tool_calls", "length"]
    trajectory: Trajectory | None = None


@dataclass
class ResponseIds:
    """The identity every object of one response shares (its id, model and creation time)."""

    id: str
    model: str
    created: int

    @classmethod
    def new(cls, model: str) -> ResponseIds:
        # 128 random bits as 32 hex digits (the shape uuid4().hex had), at a quarter of its cost.
        return cls(id=f"chatcmpl-{os.urandom(16).hex()}", model=model, created=int(time.time()))


def usage_body(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def _tool_calls_body(completion: Completion) -> list[dict[str, Any]]:
    return [call.to_openai() for call in completion.tool_calls]


def _extras(answer: Answer) -> dict[str, Any]:
    # Fields beyond OpenAI's: every answer's dollar cost at the pool's prices, and the episode's id for
    # an orchestrator (the SDK keeps unknown fields, readable with `model_extra`).
    extras: dict[str, Any] = {"cost_usd": answer.cost_usd}
    if answer.trajectory is not None:
        extras["trajectory_id"] = answer.trajectory.task_id
        extras["stop_reason"] = answer.trajectory.stop_reason
    return extras


def completion_body(answer: Answer, ids: ResponseIds) -> dict[str, Any]:
    completion = answer.completion
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["content"] = completion.text or None
        message["tool_calls"] = _tool_calls_body(completion)
    return {
        "id": ids.id,
        "object": "chat.completion",
        "created": ids.created,
        "model": ids.model,
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason, "logprobs": None}],
        "usage": usage_body(completion.usage),
        **_extras(answer),
    }


def _chunk(ids: ResponseIds, choices: list[dict[str, Any]], include_usage: bool) -> dict[str, Any]:
    chunk = {
        "id": ids.id,
        "object": "chat.completion.chunk",
        "created": ids.created,
        "model": ids.model,
        "choices": choices,
    }
    if include_usage:
        chunk["usage"] = None  # as OpenAI: null on every chunk but the last
    return chunk


def _delta(delta: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]


def stream_chunks(answer: Answer, ids: ResponseIds, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The answer as `chat.completion.chunk` objects. Backends return whole turns, so the text comes in
    one content chunk and all tool calls in one tool-call chunk, each call complete."""
    completion = answer.completion
    yield _chunk(ids, _delta({"role": "assistant", "content": ""}), include_usage)
    if completion.text:
        yield _chunk(ids, _delta({"content": completion.text}), include_usage)
    if completion.tool_calls:
        calls = [{"index": index, **call} for index, call in enumerate(_tool_calls_body(completion))]
        yield _chunk(ids, _delta({"tool_calls": calls}), include_usage)
    yield _chunk(ids, _delta({}, answer.finish_reason), include_usage)
    if include_usage:
        yield {**_chunk(ids, [], False), "usage": usage_body(completion.usage), **_extras(answer)}


def models_body(model_ids: list[str], created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_entry(model_id, created) for model_id in model_ids]}


def model_entry(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "toolorchestra"}
