"""LLM-backed tools: the orchestrator picks a label (expert-1, answer-2, ...) and the model behind it
answers; its tokens are charged at that model's price and its latency is recorded.

`expert` asks a model; without a `question` it asks the user's own question. `answer` ends the episode with
the orchestrator's text, or with a model's answer: a model already consulted on the user's own question is
adopted (its answer becomes the final one, no second call, nothing charged again); any other model is asked
to write the final answer from the notes."""

from __future__ import annotations

import json
import random
from typing import Any

from toolorchestra.backends.base import Completion
from toolorchestra.backends.pool import ModelPool
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

EXPERT_SYSTEM = "You are an expert assistant. Answer the question accurately and concisely."
ANSWER_SYSTEM = (
    "You give the final answer to the user's question. Use the notes if they help. Reply with the answer only."
)


_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def random_label(rng: random.Random) -> str:
    """A random pronounceable label such as `tavo-37`: short, tokenizer-friendly, and no model's name (training
    on randomized pools, and the renamed-labels test of evaluation)."""
    syllables = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(2))
    return f"{syllables}-{rng.randrange(10, 100)}"


def random_labels(items: list[str], rng: random.Random) -> dict[str, str]:
    """A distinct random label for every item."""
    labels: dict[str, str] = {}
    while len(labels) < len(items):
        label = random_label(rng)
        if label not in labels.values():
            labels[items[len(labels)]] = label
    return labels


class LLMTool(Tool):
    """Base of tools that route a request to one of several models by label."""

    default_description = ""  # a subclass's description where the catalog gives none

    def __init__(
        self, name: str, description: str, labels: dict[str, str], pool: ModelPool, max_tokens: int = 512
    ) -> None:
        self.name = name
        self.description = description or self.default_description
        self.labels = dict(labels)
        self.pool = pool
        self.max_tokens = max_tokens

    def label_property(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.labels), "description": "which model to use (see the price table)"}

    def price_rows(self) -> list[dict[str, Any]]:
        rows = []
        for label, model in self.labels.items():
            spec = self.pool.spec(model)
            rows.append(
                {
                    "tool": self.name,
                    "label": label,
                    "model": model,
                    "input_per_m": spec.price.input_per_m,
                    "output_per_m": spec.price.output_per_m,
                    "per_call": spec.price.per_call,
                    "latency_s": spec.latency.seconds(200),
                    "profile": spec.profile,
                }
            )
        return rows

    def resolve_label(self, arguments: dict[str, Any]) -> tuple[str, str] | str:
        """(label, model) for the call, or an error message naming the valid labels."""
        label = arguments.get("model")
        if label is None and len(self.labels) == 1:
            label = next(iter(self.labels))
        if label not in self.labels:
            return f"argument 'model' must be one of {list(self.labels)}; got {label!r}"
        return label, self.labels[label]

    async def ask(self, label: str, model: str, messages: list[dict[str, Any]]) -> ToolResult:
        try:
            completion, cost = await self.pool.complete(model, messages, max_tokens=self.max_tokens)
        except Exception as exc:  # a failed model call is an observation, never a crash of the episode
            return ToolResult(error=f"model {model} failed: {exc}", model=model, label=label)
        return answered(completion, cost, model, label)


def answered(completion: Completion, cost: float, model: str, label: str, output: str | None = None) -> ToolResult:
    """The result of a model call that succeeded: its text (or `output`), tokens, dollars and seconds."""
    return ToolResult(
        output=completion.text if output is None else output,
        model=model,
        label=label,
        cost_usd=cost,
        latency_s=completion.latency_s,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
    )


class ExpertTool(LLMTool):
    default_description = "Ask a language model a self-contained question."

    def __init__(
        self, name: str, description: str, labels: dict[str, str], pool: ModelPool, max_tokens: int = 512
    ) -> None:
        super().__init__(name, description, labels, pool, max_tokens)
        self.parameters = {
            "type": "object",
            "properties": {
                "model": self.label_property(),
                "question": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the full question, with any context it needs (default: the user's question)",
                },
            },
            "required": ["model"] if len(labels) > 1 else [],
        }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if isinstance(resolved := self.resolve_label(arguments), str):
            return ToolResult(error=resolved)
        question = arguments.get("question") or context.task.prompt
        if not isinstance(question, str):
            return ToolResult(error=f"argument 'question' must be a string; got {type(question).__name__}")
        label, model = resolved
        return await self.ask(
            label, model, [{"role": "system", "content": EXPERT_SYSTEM}, {"role": "user", "content": question}]
        )


class AnswerTool(LLMTool):
    """Ends the episode: either states the answer, or lets an answer model write it."""

    default_description = "Give the final answer and end the episode."

    def __init__(
        self, name: str, description: str, labels: dict[str, str], pool: ModelPool, max_tokens: int = 512
    ) -> None:
        super().__init__(name, description, labels, pool, max_tokens)
        properties: dict[str, Any] = {"answer": {"type": "string", "minLength": 1, "description": "the final answer"}}
        if labels:
            properties["model"] = self.label_property()
        self.parameters = {"type": "object", "properties": properties, "required": [] if labels else ["answer"]}

    def price_rows(self) -> list[dict[str, Any]]:
        return super().price_rows() if self.labels else Tool.price_rows(self)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if self.labels and arguments.get("model") is not None:
            if isinstance(resolved := self.resolve_label(arguments), str):
                return ToolResult(error=resolved)
            label, model = resolved
            consulted = consulted_answer(context.messages, label, context.task.prompt, self.name)
            if consulted is not None:  # adopt what this model already answered: no second call
                return ToolResult(
                    output=consulted, model=model, label=label, final=True, answer=consulted, meta={"adopted": True}
                )
            notes = _notes(context.messages)
            prompt = context.task.prompt + (f"\n\nNotes:\n{notes}" if notes else "")
            result = await self.ask(
                label, model, [{"role": "system", "content": ANSWER_SYSTEM}, {"role": "user", "content": prompt}]
            )
            if result.error is None:
                result.final, result.answer = True, result.output
            return result
        answer = arguments.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            return ToolResult(error="argument 'answer' must be a non-empty string")
        return ToolResult(output=answer, final=True, answer=answer)


def consulted_answer(
    messages: list[dict[str, Any]], label: str, question: str, answer_tool: str = "answer"
) -> str | None:
    """What the model behind `label` answered when an earlier tool call (other than `answer_tool`) asked it
    the user's own question (no `question` argument, or the question itself) without failing; None if no
    call did. Call ids may repeat across turns, so each call is matched to the next tool message with its id."""
    asked: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    continue
            if (
                isinstance(arguments, dict)
                and arguments.get("model") == label
                and function.get("name") != answer_tool
                and arguments.get("question") in (None, "", question)
            ):
                asked.add(str(call.get("id")))
        call_id = str(message.get("tool_call_id"))
        if message.get("role") == "tool" and call_id in asked:
            asked.discard(call_id)
            content = str(message.get("content") or "")
            if not content.startswith("Error: "):
                return content
    return None


def _notes(messages: list[dict[str, Any]], limit: int = 3000) -> str:
    """Tool observations so far, most recent last, cut to `limit` characters."""
    observations = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
    return "\n---\n".join(observations)[-limit:]
