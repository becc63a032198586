"""The paper's three tools (ToolOrchestra's HLE and FRAMES protocol), each with one required `model` argument.

- `search`: the labelled model writes a query from the question and the context so far; retrieval (BM25 over a
  corpus file, or a dense index) returns the top documents, which join the episode's documents;
- `enhance_reasoning`: the labelled model writes Python; our sandbox runs it; the code and what it printed are
  kept when it printed something;
- `answer`: the labelled model answers from the gathered context; the episode ends.

The `model` argument's description carries the labels, the models behind them and their prices and latency
(`price_table`), so an orchestrator reads its pool from the schema, as the released Orchestrator-8B was trained.

The episode's notebook (documents, code with its output, earlier answers) lives in no tool: it is read back
from the episode's steps (`Step.meta`, see `notebook`), so the orchestrator's per-turn context
(agent/paper.py) and every tool see the same one, and a saved trajectory carries it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.pool import ModelPool
from toolorchestra.tools.base import Tool, ToolContext, ToolResult
from toolorchestra.tools.llm import LLMTool

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Step

Retriever = Callable[[str, int], Awaitable[list[str]]]
"""query, top_k -> documents (each a passage's text, titled): tools/retrieval.py."""

QUERY_INSTRUCTION = (
    "Instead of directly answering the question, please write a query to search for a piece of relevant and "
    "missing information. The query should be a few key words about the information to search or a short "
    "sentence. Wrap the query within <query> and </query>."
)
CODE_INSTRUCTION = (
    "Instead of directly answering the question, please write additional python code that will give "
    "intermediate results after execution. Wrap the code within ```python and ```. The code should be "
    "self-contained with all the import and initialization."
)
ANSWER_INSTRUCTION = (
    "Think it through, then wrap only the exact answer, without any explanation, within <answer> and </answer>."
)


@dataclass
class Notebook:
    """What an episode has gathered: documents (deduplicated, in order), code that printed something with its
    output, and the answers attempted so far (label, answer)."""

    documents: list[str] = field(default_factory=list)
    code: list[tuple[str, str]] = field(default_factory=list)
    attempts: list[tuple[str, str]] = field(default_factory=list)


def notebook(steps: Sequence[Step]) -> Notebook:
    """The notebook of an episode, read from its tool steps' `meta` (failed calls add nothing)."""
    book = Notebook()
    seen: set[str] = set()
    for step in steps:
        if step.kind != "tool" or step.error:
            continue
        for document in step.meta.get("documents") or []:
            if document not in seen:
                seen.add(document)
                book.documents.append(document)
        output = str(step.meta.get("code_output") or "")
        if step.meta.get("code") and output.strip():
            book.code.append((str(step.meta["code"]), output))
        if step.meta.get("attempt"):
            book.attempts.append((step.label or step.model or "", str(step.meta["attempt"])))
    return book


def code_block(code: str, output: str) -> str:
    return f"```python\n{code}\n```\n\n```output\n{output}\n```\n\n"


def keep_last_tokens(text: str, budget: int) -> str:
    """The end of `text` that fits `budget` tokens (SmolLM2's tokenizer): the context keeps what came last."""
    from toolorchestra.envs.replay.tokens import tokenizer

    if not text or len(text) <= budget:  # a token is at least one character: nothing to cut
        return text
    encoding = tokenizer().encode(text)
    if len(encoding.ids) <= budget:
        return text
    start = encoding.offsets[len(encoding.ids) - budget][0]
    return text[start:]


def tool_context(book: Notebook, budget: int, document_chars: int | None = None) -> str:
    """The context a tool's model is given: documents, then code and outputs, cut to `budget` tokens."""
    documents = "".join(
        f"Doc {index}: {doc if document_chars is None else doc[:document_chars]}\n\n"
        for index, doc in enumerate(book.documents, start=1)
    )
    code = "".join(code_block(code, output) for code, output in book.code)
    context = keep_last_tokens(documents + code, budget)
    return f"Documents:\n{context}" if documents else context


def price_table(labels: dict[str, str], pool: ModelPool) -> str:
    """One line per label: the model behind it, its token prices and expected latency."""
    lines = []
    for label, model in labels.items():
        spec = pool.spec(model)
        price = spec.price
        per_call = f" + ${price.per_call:g} per call" if price.per_call else ""
        lines.append(
            f"{label} -> {model}: ${price.input_per_m:g} input / ${price.output_per_m:g} output per 1M tokens"
            f"{per_call}, about {spec.latency.seconds(200):.1f} s per call"
        )
    return "; ".join(lines)


class PaperTool(LLMTool):
    """A paper tool: one required `model` argument whose description lists the labels with their prices."""

    purpose = "The model used"
    instruction = ""  # what the labelled model is told to write, after the question

    def __init__(
        self,
        name: str,
        description: str,
        labels: dict[str, str],
        pool: ModelPool,
        max_tokens: int = 512,
        context_tokens: int = 24000,
        document_chars: int | None = 1000,
        label_enum: bool = False,
    ) -> None:
        super().__init__(name, description, labels, pool, max_tokens)
        self.context_tokens = context_tokens
        self.document_chars = document_chars
        model: dict[str, Any] = {
            "description": f"{self.purpose}. Choices: {list(labels)}. {price_table(labels, pool)}.",
            "type": "string",
        }
        if label_enum:  # not in the reference's schema; lets a schema-guided decoder keep the label valid
            model["enum"] = list(labels)
        self.parameters = {
            "properties": {"model": model},
            "required": ["model"],
            "title": "parameters",
            "type": "object",
        }

    def context(self, tool_context_: ToolContext) -> str:
        return tool_context(notebook(tool_context_.steps), self.context_tokens, self.document_chars)

    def prompt(self, context: ToolContext) -> str:
        """What the labelled model is asked: the episode's context, the problem and the tool's instruction."""
        return f"{self.context(context).strip()}\n\nQuestion: {context.task.prompt}\n{self.instruction}"

    async def use(self, reply: ToolResult, context: ToolContext) -> ToolResult:
        """The call's result from the model's successful reply (charged already)."""
        raise NotImplementedError

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if isinstance(resolved := self.resolve_label(arguments), str):
            return ToolResult(error=resolved)
        label, model = resolved
        reply = await self.ask(label, model, [{"role": "user", "content": self.prompt(context).lstrip()}])
        return reply if reply.error else await self.use(reply, context)


class PaperSearchTool(PaperTool):
    purpose = "The model used to search for missing information"
    default_description = "Search for missing information."
    instruction = QUERY_INSTRUCTION

    def __init__(self, *args: Any, retriever: Retriever, top_k: int = 5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.retriever = retriever
        self.top_k = top_k

    async def use(self, result: ToolResult, context: ToolContext) -> ToolResult:
        query = written_query(result.output) or context.task.prompt
        try:
            documents = await self.retriever(query[:390], self.top_k)
        except Exception as exc:  # a retrieval failure is the call's error, shown to the orchestrator
            result.error = f"retrieval failed: {exc.__class__.__name__}: {exc}"  # the query writer is still paid
            return result
        shown = "\n\n".join(f"Doc {index}: {doc}" for index, doc in enumerate(documents, start=1))
        result.output = f"Query: {query}\n\n{shown or 'No documents found.'}"
        result.meta = {"query": query, "documents": documents}
        return result


class PaperReasoningTool(PaperTool):
    purpose = "The model used to reason"
    default_description = (
        "Enhance the answer model's reasoning: analyze the problem, write code, execute it and return "
        "intermediate results that help solve the problem."
    )
    instruction = CODE_INSTRUCTION

    def __init__(self, *args: Any, sandbox: Tool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sandbox = sandbox

    async def use(self, result: ToolResult, context: ToolContext) -> ToolResult:
        code = written_code(result.output)
        if not code:
            result.output = "The model wrote no ```python block; nothing was run."
            result.meta = {"code": "", "code_output": ""}
            return result
        started = time.perf_counter()
        ran = await self.sandbox.run({"code": code}, context)
        output = ran.output if ran.error is None else f"Error: {ran.error}"
        result.output = code_block(code, output).strip()
        result.latency_s += ran.latency_s or time.perf_counter() - started  # the run's seconds count too
        result.meta = {"code": code, "code_output": output}
        return result


class PaperAnswerTool(PaperTool):
    purpose = "The model used to answer"
    default_description = "Give the final answer. Not allowed to call if documents is empty."

    def prompt(self, context: ToolContext) -> str:
        return f"{self.context(context).strip()}\n\nProblem:\n{context.task.prompt}\n\n{ANSWER_INSTRUCTION}"

    async def use(self, result: ToolResult, context: ToolContext) -> ToolResult:
        answer = extracted_answer(result.output)
        result.final, result.answer = True, answer
        result.meta = {"attempt": answer, "response": result.output}
        return result


_QUERY = re.compile(r"<query>(.*?)(?:</query>|$)", re.DOTALL)
_CODE = re.compile(r"```python\s*\n(.*?)(?:```|$)", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)


def written_query(text: str) -> str:
    """The query inside <query> tags, else the first non-empty line; '' when shorter than 5 characters."""
    matches = [match.strip() for match in _QUERY.findall(text) if match.strip()]
    query = matches[-1] if matches else next((line.strip() for line in text.splitlines() if line.strip()), "")
    return query if len(query) >= 5 else ""


def written_code(text: str) -> str:
    """The last ```python block of a reply ('' if none)."""
    blocks = [block.strip() for block in _CODE.findall(text) if block.strip()]
    return blocks[-1] if blocks else ""


def extracted_answer(text: str) -> str:
    """The answer inside the last <answer> tags, else inside the last \\boxed{...}, else the reply stripped."""
    tagged = [match.strip() for match in _ANSWER.findall(text) if match.strip()]
    if tagged:
        return tagged[-1]
    boxed = text.rsplit("\\boxed{", 1)
    if len(boxed) == 2 and "}" in boxed[1]:
        return boxed[1][: boxed[1].rindex("}")].strip()
    return text.strip()
