"""Valid tool-call rate of the embedded SmolLM2 orchestrator, unguided vs schema-guided.

For each configuration (guidance off/on, temperature 0/1) the model gets the same routing prompts,
with the default tool set (python, search, expert, answer) and the orchestrator's real system prompt.
A turn counts as a valid call when it holds at least one parsed call and every call names a known
tool with arguments that validate against that tool's JSON schema. Also printed: malformed calls,
generated tokens, wall seconds per turn (batched), generated tokens per second and its ratio to the
unguided run at the same temperature, and the throughput of batched vs one-at-a-time generation.

Run: .venv/bin/python benchmarks/valid_calls.py [--prompts 12] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jsonschema

from toolorchestra.backends.base import Completion
from toolorchestra.backends.local import LocalBackend
from toolorchestra.catalog.schema import LocalBackendSpec

ROUTING_PROMPTS = [
    "What is 48,271 multiplied by 3,619?",
    "Who directed the film that won the Academy Award for Best Picture in 1998?",
    "Is 7,919 a prime number?",
    "What is the capital of the country where the Danube river ends?",
    "Compute the sum of the squares of the integers from 1 to 100.",
    "Which river flows through both Vienna and Budapest?",
    "Were Ernest Hemingway and F. Scott Fitzgerald born in the same year?",
    "How many days are there between 3 March 2021 and 17 November 2023?",
    "What is the chemical symbol of the element with atomic number 74?",
    "Who was the mother of the composer of The Magic Flute?",
    "Sort these numbers and give the median: 17, 3, 99, 42, 8, 61, 25.",
    "Translate 'good morning' into French.",
    "What year was the university attended by the author of 'Norwegian Wood' founded?",
    "Convert 98.6 degrees Fahrenheit to Celsius.",
    "Which is larger, 2^100 or 10^30?",
    "Name the author of 'One Hundred Years of Solitude'.",
]

# The default tools' schemas, used when the tool modules cannot be built here.
INLINE_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "python", "description": "Run Python 3 code in a sandbox; returns stdout and stderr.",
        "parameters": {"type": "object", "properties": {
            "code": {"type": "string", "description": "the complete Python program to run"}}, "required": ["code"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search a local Wikipedia corpus; returns the top passages.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "keywords to search for"}}, "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "expert", "description": "Ask a language model a self-contained question.",
        "parameters": {"type": "object", "properties": {
            "model": {"type": "string", "enum": ["expert-1"], "description": "which model to use"},
            "question": {"type": "string", "description": "the full question, with any context it needs"}},
            "required": ["question"]}}},
    {"type": "function", "function": {
        "name": "answer", "description": "Give the final answer and end the episode.",
        "parameters": {"type": "object", "properties": {
            "answer": {"type": "string", "description": "the final answer"}}, "required": ["answer"]}}},
]


def default_tools() -> tuple[list[dict[str, Any]], str]:
    """(tool schemas, system prompt) of the default catalog, or the inline schemas and a plain role."""
    try:
        from toolorchestra.agent.prompt import system_prompt
        from toolorchestra.backends.pool import ModelPool
        from toolorchestra.catalog.load import default_catalog
        from toolorchestra.tools.factory import build_tools

        catalog = default_catalog()
        tools = build_tools(catalog.tools, ModelPool(catalog.models))
        return [tool.schema() for tool in tools], system_prompt(tools)
    except ImportError as exc:
        print(f"(default tools unavailable: {exc}; using inline schemas)")
        from toolorchestra.agent.prompt import ROLE

        return INLINE_TOOLS, ROLE


def call_is_valid(completion: Completion, schemas: dict[str, dict[str, Any]]) -> bool:
    if not completion.tool_calls or completion.call_errors:
        return False
    for call in completion.tool_calls:
        if call.name not in schemas:
            return False
        try:
            jsonschema.validate(call.arguments, schemas[call.name])
        except jsonschema.ValidationError:
            return False
    return True


@dataclass
class Row:
    label: str
    valid: int
    malformed: int
    total: int
    tokens: int
    seconds: float
    tools: Counter[str]

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def run_config(backend: LocalBackend, label: str, conversations: list[list[dict[str, Any]]],
               tools: list[dict[str, Any]], temperature: float, max_tokens: int) -> Row:
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    started = time.perf_counter()
    completions = backend.generate_batch(conversations, tools, max_tokens=max_tokens, temperature=temperature,
                                         seed=0)
    seconds = time.perf_counter() - started
    print(f"  {label}: {seconds:.0f} s", file=sys.stderr, flush=True)
    return Row(
        label=label,
        valid=sum(call_is_valid(c, schemas) for c in completions),
        malformed=sum(bool(c.call_errors) for c in completions),
        total=len(completions),
        tokens=sum(c.usage.completion_tokens for c in completions),
        seconds=seconds,
        tools=Counter(call.name for c in completions for call in c.tool_calls),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=12, help=f"routing prompts to use (1-{len(ROUTING_PROMPTS)})")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice); 1 avoids OpenMP spinning on a busy machine")
    args = parser.parse_args()
    if not 1 <= args.prompts <= len(ROUTING_PROMPTS):
        parser.error(f"--prompts must be between 1 and {len(ROUTING_PROMPTS)}")

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tools, system = default_tools()
    conversations = [[{"role": "system", "content": system}, {"role": "user", "content": prompt}]
                     for prompt in ROUTING_PROMPTS[: args.prompts]]
    guided = LocalBackend(LocalBackendSpec(max_batch_size=args.batch_size))
    forced = LocalBackend(LocalBackendSpec(max_batch_size=args.batch_size), reasoning_tokens=0)
    unguided = LocalBackend(LocalBackendSpec(max_batch_size=args.batch_size, guided_tool_calls=False))
    guided.generate_batch(conversations[:1], tools, max_tokens=8)  # load the model and compile the grammar

    rows: list[tuple[Row, float]] = []
    for temperature in (0.0, 1.0):
        baseline = run_config(unguided, f"unguided T={temperature:g}", conversations, tools, temperature,
                              args.max_tokens)
        rows.append((baseline, 1.0))
        for backend, name in ((guided, f"guided (reasoning<={guided.reasoning_tokens} tok)"),
                              (forced, "guided, call at once")):
            row = run_config(backend, f"{name} T={temperature:g}", conversations, tools, temperature,
                             args.max_tokens)
            rows.append((row, row.tokens_per_s / baseline.tokens_per_s))

    print(f"\n{len(conversations)} routing prompts, {len(tools)} tools, max_tokens={args.max_tokens}, "
          f"batch size {args.batch_size}, CPU with {torch.get_num_threads()} torch threads\n")
    header = (f"{'configuration':<40} {'valid':>9} {'malformed':>9} {'gen tok':>8} {'s/turn':>7} {'tok/s':>7} "
              f"{'vs unguided':>11}  calls")
    print(header)
    print("-" * len(header))
    for row, ratio in rows:
        calls = ", ".join(f"{name}:{count}" for name, count in sorted(row.tools.items()))
        print(f"{row.label:<40} {row.valid:>3}/{row.total:<2} {row.valid / row.total:>4.0%} {row.malformed:>9} "
              f"{row.tokens:>8} {row.seconds / row.total:>7.1f} {row.tokens_per_s:>7.1f} {ratio:>10.2f}x  {calls}")

    # Batching: the same requests one at a time vs batched (unguided, greedy, short answers).
    short = 48
    one_at_a_time = LocalBackend(LocalBackendSpec(max_batch_size=1, guided_tool_calls=False))
    single = run_config(one_at_a_time, "batch size 1", conversations, tools, 0.0, short)
    batched = run_config(unguided, f"batch size {args.batch_size}", conversations, tools, 0.0, short)
    print(f"\nthroughput, {len(conversations)} requests x up to {short} tokens: "
          f"one at a time {single.tokens_per_s:.1f} tok/s, batched {batched.tokens_per_s:.1f} tok/s "
          f"({batched.tokens_per_s / single.tokens_per_s:.2f}x)")


if __name__ == "__main__":
    main()
