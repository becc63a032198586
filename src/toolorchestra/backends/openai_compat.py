"""Chat completions from any OpenAI-compatible server (OpenAI, vLLM, SGLang, llama.cpp server).

This module owns `OpenAIBackend`: the request (built on the official `openai` SDK's `AsyncOpenAI`), an
explicit retry policy, reading tool calls out of the response, and the token counts a `Completion`
carries when the server reports none.

Retry policy: the SDK's own retries are switched off (`max_retries=0`) so that every attempt is visible
here. Timeouts, connection errors, HTTP 429, HTTP 5xx and 200 responses whose body is not a chat
completion (invalid JSON, wrong shape) are retried up to `spec.max_retries` times with exponential
backoff and jitter; any other 4xx fails at once. When all attempts fail, `BackendError` names the
endpoint, the model, the number of attempts and the last cause. The API key is never logged, put in an
error message or returned in a completion, in any form a server may echo it (`secret_redactor`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus, urlparse

from toolorchestra.backends.base import Backend, Completion, Message, ToolCall, Usage
from toolorchestra.backends.toolcalls import CALL_OPEN, parse_tool_calls, render_tool_call, to_plain_messages
from toolorchestra.catalog.schema import OpenAIBackendSpec
from toolorchestra.errors import BackendError, UserError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "EMPTY"
"""Sent when the spec names no key variable: local servers ignore it, but the SDK insists on some key."""

DEFAULT_BACKOFF_BASE_S = 0.5
DEFAULT_BACKOFF_MAX_S = 8.0

CHARS_PER_TOKEN = 4
"""Fallback token estimate: about four characters of English text per BPE token."""
MESSAGE_OVERHEAD_TOKENS = 4
"""Fallback estimate of the chat-template tokens (role markers, separators) around each message."""

SNIPPET_CHARS = 300
_OPENAI_HOSTS = {"api.openai.com"}


class _RetryableFailure(Exception):
    """One attempt failed in a way worth trying again; the message is the cause shown to users."""

    def __init__(self, cause: str, retry_after_s: float | None = None) -> None:
        super().__init__(cause)
        self.retry_after_s = retry_after_s


class OpenAIBackend(Backend):
    """A model served behind an OpenAI-compatible `/chat/completions` endpoint.

    Tools are passed natively (`tools=`). Tool calls are read from the response's `tool_calls`; when
    the server returns none but the text holds Hermes `<tool_call>` blocks (a server without a tool
    parser), those are parsed instead, and malformed ones become `call_errors`.

    Token usage comes from the response's `usage`. When the server reports none, tokens are counted with
    the HF tokenizer named by `spec.tokenizer` (a hub id, a local directory, or a `.gguf` file), loaded
    lazily on first need. If no tokenizer is configured or it cannot be loaded, the counts are a
    documented estimate: `ceil(len(text) / CHARS_PER_TOKEN)` per text plus `MESSAGE_OVERHEAD_TOKENS` per
    prompt message, where the prompt is the messages with the tools rendered in Hermes style.

    `latency_s` is the wall time of the request including every retry and backoff wait, but not the
    time spent counting tokens locally.
    """

    def __init__(
        self,
        spec: OpenAIBackendSpec,
        name: str = "openai",
        *,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        rng: random.Random | None = None,
    ) -> None:
        if backoff_base_s < 0 or backoff_max_s < 0:
            raise UserError(f"model {name!r}: backoff_base_s and backoff_max_s must be >= 0")
        self.spec = spec
        self.name = name
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._rng = rng or random.Random()
        self._api_key = _read_api_key(spec, name)
        # `_redact(text)`: `text` (which may quote a server's reply) without the API key, if the server echoed it
        self._redact = secret_redactor(self._api_key) if self._api_key != PLACEHOLDER_API_KEY else _unchanged
        self.endpoint = spec.base_url.rstrip("/") + "/chat/completions"
        # One SDK client per event loop: its connection pool cannot outlive the loop it was made on.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncOpenAI] = weakref.WeakKeyDictionary()
        self._tokenizer: Any | None = None
        self._tokenizer_tried = False
        self._tokenizer_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIBackend(name={self.name!r}, endpoint={self.endpoint!r}, model={self.spec.model!r})"

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        request = self._build_request(messages, tools, max_tokens, temperature, top_p, seed)
        started = time.perf_counter()
        response = await self._create_with_retries(request)
        latency_s = time.perf_counter() - started
        completion = self._redacted(_read_choice(response))
        completion.latency_s = latency_s
        completion.model = self.name
        completion.usage = _reported_usage(response) or await self._counted_usage(messages, tools, response)
        return completion

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        client = self._clients.pop(loop, None)
        if client is not None:
            await client.close()

    # --- the request and its retries ---

    def _build_request(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create`, reused by every retry."""
        arguments: dict[str, Any] = {
            "model": self.spec.model,
            "messages": messages,
            "temperature": temperature,
            "top_p": top_p,
        }
        # OpenAI's own API rejects `max_tokens` for its reasoning models; the other servers all accept it,
        # while not all of them know the newer `max_completion_tokens`.
        is_openai = urlparse(self.spec.base_url).hostname in _OPENAI_HOSTS
        arguments["max_completion_tokens" if is_openai else "max_tokens"] = max_tokens
        if tools:
            arguments["tools"] = tools
        if seed is not None:
            arguments["seed"] = seed
        return arguments

    def _client(self) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(
                api_key=self._api_key, base_url=self.spec.base_url, timeout=self.spec.timeout_s, max_retries=0
            )
            self._clients[loop] = client
        return client

    async def _create_with_retries(self, request: dict[str, Any]) -> Any:
        attempts = self.spec.max_retries + 1
        last_cause = "no attempt made"
        for attempt in range(1, attempts + 1):
            try:
                return await self._attempt(request)
            except _RetryableFailure as failure:
                last_cause = self._redact(str(failure))
                if attempt == attempts:
                    break
                delay_s = self._backoff_s(attempt, failure.retry_after_s)
                log.warning(
                    "%s: attempt %d/%d failed (%s); retrying in %.2f s",
                    self.endpoint,
                    attempt,
                    attempts,
                    last_cause,
                    delay_s,
                )
                await asyncio.sleep(delay_s)
        raise BackendError(
            f"{self.endpoint} (model {self.spec.model!r}) failed after {attempts} attempt(s); last cause: {last_cause}"
        )

    async def _attempt(self, request: dict[str, Any]) -> Any:
        """One request. Raises `_RetryableFailure` for transient failures, `BackendError` for the rest."""
        import openai

        try:
            # The SDK's timeout bounds each connect/read/write separately; this bounds the whole attempt,
            # so a server that trickles bytes cannot hold it for longer.
            async with asyncio.timeout(self.spec.timeout_s):
                response = await self._client().chat.completions.create(**request)
        except (TimeoutError, openai.APITimeoutError):
            raise _RetryableFailure(f"timed out after {self.spec.timeout_s:g} s") from None
        except openai.APIConnectionError as exc:
            reason = exc.__cause__ or exc
            raise _RetryableFailure(f"connection error: {reason.__class__.__name__}: {reason}") from None
        except openai.APIStatusError as exc:
            raise self._status_failure(exc) from None
        except (openai.APIResponseValidationError, json.JSONDecodeError) as exc:
            raise _RetryableFailure(f"invalid JSON in the response: {exc.__class__.__name__}: {exc}") from None
        problem = _shape_problem(response, self._redact)
        if problem:
            raise _RetryableFailure(f"invalid response: {problem}")
        return response

    def _status_failure(self, exc: Any) -> Exception:
        status = exc.status_code
        body = snippet(self._redact(exc.response.text if exc.response is not None else str(exc.message)))
        if status == 429 or status >= 500:
            return _RetryableFailure(f"HTTP {status}: {body}", _retry_after_s(exc.response))
        return BackendError(
            f"{self.endpoint} (model {self.spec.model!r}) rejected the request with HTTP {status} (not retried): {body}"
        )

    def _redacted(self, completion: Completion) -> Completion:
        """`completion` with the key taken out of its text, call errors and call arguments: a server (or a model
        shown the request) that echoes the key must not put it on the console or into saved trajectories."""
        completion.text = self._redact(completion.text)
        completion.call_errors = [self._redact(error) for error in completion.call_errors]
        for call in completion.tool_calls:
            call.arguments = _redact_strings(call.arguments, self._redact)
        return completion

    def _backoff_s(self, failed_attempt: int, retry_after_s: float | None) -> float:
        """Exponential backoff with jitter: between half and all of base * 2^(n-1), capped at the max."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (failed_attempt - 1))
        delay_s = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        if retry_after_s is not None:
            delay_s = max(delay_s, min(retry_after_s, self.backoff_max_s))
        return delay_s

    # --- token counting when the server reports no usage ---

    async def _counted_usage(self, messages: list[Message], tools: list[dict[str, Any]] | None, response: Any) -> Usage:
        output_text = _raw_output_text(response)
        # Tokenizer loading and encoding are blocking CPU/disk work; keep them off the event loop.
        return await asyncio.to_thread(self.count_usage, messages, tools, output_text)

    def count_usage(self, messages: list[Message], tools: list[dict[str, Any]] | None, output_text: str) -> Usage:
        """Token counts of a prompt and an output, with the tokenizer if one loads, else the estimate."""
        plain = to_plain_messages(messages, tools)
        tokenizer = self._load_tokenizer()
        if tokenizer is None:
            return Usage(prompt_tokens=estimate_prompt_tokens(plain), completion_tokens=estimate_tokens(output_text))
        return Usage(
            prompt_tokens=_tokenizer_prompt_tokens(tokenizer, plain),
            completion_tokens=len(tokenizer.encode(output_text, add_special_tokens=False)),
        )

    def _load_tokenizer(self) -> Any | None:
        with self._tokenizer_lock:
            if not self._tokenizer_tried:
                self._tokenizer_tried = True
                self._tokenizer = _load_hf_tokenizer(self.spec.tokenizer, self.name)
            return self._tokenizer


def secret_redactor(secret: str, mask: str = "***") -> Callable[[str], str]:
    """A function that replaces `secret` in a text with `mask`, in every form a server may echo it: as it is;
    JSON-escaped (once or twice, `/` escaped or not); URL-encoded (`%2F` or `%2f`, `+` for space); in any letter
    case; and base64-encoded inside any text (`user:key` of HTTP Basic auth, or the key alone; standard or
    URL-safe alphabet). The match ignores case, so an upper- or lower-cased echo of any form is caught too."""
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    for escaped in (json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        forms |= {escaped, escaped.replace("/", "\\/"), json.dumps(escaped)[1:-1]}
    data, cores = secret.encode(), set()
    for start in range(3):
        # base64 encodes 3 bytes as 4 characters from the start of the encoded text, so wherever the key sits
        # (after "user:" or not), the characters that encode only key bytes are one of these three runs
        core = data[start : start + (len(data) - start) // 3 * 3]
        if len(core) >= 6:  # shorter runs would be a few characters that ordinary text may contain
            cores |= {base64.b64encode(core).decode(), base64.urlsafe_b64encode(core).decode()}
    alternatives = [re.escape(form) for form in sorted(forms, key=len, reverse=True)]
    # a base64 run is masked whole, so the characters that mix key bytes with "user:" go too
    alternatives += [rf"[A-Za-z0-9+/_-]*{re.escape(core)}[A-Za-z0-9+/_-]*=*" for core in sorted(cores)]
    pattern = re.compile("|".join(alternatives), re.IGNORECASE)
    return lambda text: pattern.sub(mask, text)


def _unchanged(text: str) -> str:
    return text


def _redact_strings(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` (parsed JSON) with `redact` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(key)): _redact_strings(item, redact) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_strings(item, redact) for item in value]
    return value


def _read_api_key(spec: OpenAIBackendSpec, model_name: str) -> str:
    if spec.api_key_env is None:
        return PLACEHOLDER_API_KEY
    key = os.environ.get(spec.api_key_env, "").strip()
    if not key:
        raise UserError(
            f"model {model_name!r}: environment variable {spec.api_key_env} is not set; it must hold the API key "
            f"for {spec.base_url} (or remove 'api_key_env' from the model's backend for a server without keys)"
        )
    return key


def _shape_problem(response: Any, redact: Callable[[str], str]) -> str:
    """Why `response` is not a usable chat completion, or "" if it is.

    The SDK builds response objects without validation and returns plain text for a non-JSON content
    type, so a 200 from a misbehaving server can arrive as almost anything.
    """
    from openai.types.chat import ChatCompletion

    if not isinstance(response, ChatCompletion):
        return f"expected a chat completion JSON object, got {snippet(redact(str(response)))!r}"
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        return "the response has no 'choices'"
    if getattr(choices[0], "message", None) is None:
        return "the first choice has no 'message'"
    return ""


def _read_choice(response: Any) -> Completion:
    text, calls, errors = _native_reply(response)
    if not calls and not errors and CALL_OPEN in text:
        text, calls, errors = parse_tool_calls(text)
    return Completion(text=text, tool_calls=calls, call_errors=errors)


def _native_reply(response: Any) -> tuple[str, list[ToolCall], list[str]]:
    """The first choice's text, its native tool calls, and an error for each malformed one."""
    message = response.choices[0].message
    text = message.content if isinstance(getattr(message, "content", None), str) else ""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for index, raw in enumerate(getattr(message, "tool_calls", None) or []):
        function = getattr(raw, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            errors.append(f"malformed tool call #{index} (no function name): {snippet(repr(raw))}")
            continue
        arguments_text = getattr(function, "arguments", None) or "{}"
        try:
            arguments = json.loads(arguments_text) if isinstance(arguments_text, str) else arguments_text
        except (json.JSONDecodeError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            errors.append(
                f"malformed tool call {name!r} (arguments are not a JSON object): {snippet(str(arguments_text))!r}"
            )
            continue
        call_id = getattr(raw, "id", None)
        call_id = call_id if isinstance(call_id, str) and call_id else f"call_{index}"
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
    return text, calls, errors


def _reported_usage(response: Any) -> Usage | None:
    usage = getattr(response, "usage", None)
    prompt_tokens = getattr(usage, "prompt_tokens", None)
    completion_tokens = getattr(usage, "completion_tokens", None)
    if isinstance(prompt_tokens, int) and isinstance(completion_tokens, int):
        return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    return None


def _raw_output_text(response: Any) -> str:
    """Everything the model generated: its text plus its native tool calls in Hermes form."""
    text, calls, _ = _native_reply(response)
    return "\n".join([text] * bool(text) + [render_tool_call(call) for call in calls])


def estimate_tokens(text: str) -> int:
    """The fallback token count of `text`: ceil(characters / CHARS_PER_TOKEN)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_prompt_tokens(plain_messages: list[dict[str, str]]) -> int:
    """The fallback token count of a prompt: each message's text plus MESSAGE_OVERHEAD_TOKENS."""
    return sum(estimate_tokens(message["content"]) + MESSAGE_OVERHEAD_TOKENS for message in plain_messages)


def _tokenizer_prompt_tokens(tokenizer: Any, plain_messages: list[dict[str, str]]) -> int:
    if getattr(tokenizer, "chat_template", None):
        encoded = tokenizer.apply_chat_template(plain_messages, tokenize=True, add_generation_prompt=True)
        # transformers 5 returns a BatchEncoding here; 4.x returned the list of ids.
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        return len(ids)
    text = "\n".join(message["content"] for message in plain_messages)
    return len(tokenizer.encode(text, add_special_tokens=True))


def _load_hf_tokenizer(reference: str | None, model_name: str) -> Any | None:
    """The HF tokenizer `reference` names, or None (with a warning) if it is unset or fails to load."""
    if reference is None:
        return None
    path = Path(reference).expanduser()
    looks_local = reference.endswith(".gguf") or reference.startswith((".", "/", "~")) or path.exists()
    if looks_local and not path.exists():
        # Checked here so that a mistyped path is not sent to the HF hub as a repository id.
        log.warning("model %r: tokenizer path %s does not exist; using the character-count estimate", model_name, path)
        return None
    try:
        from transformers import AutoTokenizer

        if path.is_file() and path.suffix == ".gguf":
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        return AutoTokenizer.from_pretrained(str(path) if looks_local else reference)
    except Exception as exc:  # any failure to load only costs accuracy of the counts
        log.warning(
            "model %r: could not load tokenizer %r (%s: %s); using the character-count estimate",
            model_name,
            reference,
            exc.__class__.__name__,
            exc,
        )
        return None


def _retry_after_s(response: Any) -> float | None:
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date; the exponential backoff is used instead
        return None


def snippet(text: str) -> str:
    """`text` on one line, cut to SNIPPET_CHARS (a server's reply quoted in an error message)."""
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS] + "..."
