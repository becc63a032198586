"""The live worlds (hle, hle:FILE, frames-live) and the paper's protocol mode, without a model.

The orchestrator and the experts here are one FAKE OpenAI-compatible server (`fake_vllm`, named as such): a
real HTTP server on 127.0.0.1 that answers like vLLM serving Orchestrator-8B without a tool parser (Hermes
`<tool_call>` blocks in the text), so every other part is the real one: the OpenAI backend and its Hermes
parsing, the loop in protocol mode, the paper's tools, BM25 over a corpus file, the sandbox, the judge,
metrics by role and the replay recorder. tests/test_hle_offline.py runs the same with SmolLM2 behind serve.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from toolorchestra.agent.paper import SYSTEM, PaperProtocol
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.catalog import load_catalog
from toolorchestra.serve.server import ServerThread

REPO = Path(__file__).resolve().parents[1]

DOCUMENTED_USER_MESSAGE = (
    "Problem: What is 2+2?\n\n"
    "Documents:\n"
    "Doc 1: Alpha\nfirst passage ...\n\n"
    "Doc 2: Beta\nsecond passage ...\n\n"
    "\npython code and execution outputs:\n"
    "```python\nprint(2+2)\n```\n\n```output\n4\n\n```\n\n"
    "\n\nChoose an appropriate tool.'"
)


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "toolorchestra.cli.main", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def _catalog(tmp_path: Path, base_url: str, corpus: Path, extra: str = "") -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(f"""
orchestrator: orchestrator-8b
judge: expert
models:
  - {{name: orchestrator-8b, backend: {{type: openai, base_url: "{base_url}", model: orch}}, price: {{input_per_m: 0.2, output_per_m: 0.2}}}}
  - {{name: expert, backend: {{type: openai, base_url: "{base_url}", model: expert}}, price: {{input_per_m: 1.25, output_per_m: 10.0}}}}
tools:
  - {{name: search, type: paper_search, description: "Search for missing information", models: {{search-1: expert, search-2: expert}}, options: {{corpus: "{corpus}", top_k: 2}}}}
  - {{name: enhance_reasoning, type: paper_reasoning, models: {{reasoner-1: expert}}, options: {{timeout_s: 10}}}}
  - {{name: answer, type: paper_answer, models: {{answer-1: expert}}{extra}}}
""")
    return path


def _corpus(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([
        {"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Berlin", "text": "Berlin is the capital of Germany."},
    ]))
    return corpus


def _fake_server(reply):
    """A FAKE OpenAI-compatible server (unit-test stand-in) on 127.0.0.1 whose every reply's text is
    `reply(body, last message)`; it keeps the request bodies it got in `.requests`."""
    app, requests = FastAPI(), []

    @app.post("/v1/chat/completions")
    async def complete(request: Request) -> dict[str, Any]:
        body = await request.json()
        requests.append(body)
        text = reply(body, body["messages"][-1]["content"])
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}

    server = ServerThread(app)
    server.requests = requests
    return server


@pytest.fixture
def fake_vllm():
    """FAKE vLLM (unit-test stand-in): the orchestrator writes three Hermes calls on its first turn (an invalid
    label, a valid search, an answer), then answers; experts reply in the tags the paper's tools ask for."""

    def reply(body: dict[str, Any], prompt: str) -> str:
        if body.get("tools"):
            if "Documents:" in prompt:
                return '<tool_call>\n{"name": "answer", "arguments": {"model": "answer-1"}}\n</tool_call>'
            return "I should search first.\n" + "".join(
                f'<tool_call>\n{{"name": "{name}", "arguments": {{"model": "{label}"}}}}\n</tool_call>\n'
                for name, label in (("search", "search-9"), ("search", "search-2"), ("answer", "answer-1")))
        if "<query>" in prompt:
            return "<query>capital of France</query>"
        if "<correct>" in prompt:
            return "<correct>False</correct>"
        return "<think>The documents say so.</think>\n<answer>Paris</answer>"

    with _fake_server(reply) as server:
        yield server


def test_protocol_request_is_the_documented_format(tmp_path, isolated_cache):
    """docs/hle.md "The request": system and user messages, then the tools JSON, field by field."""
    catalog = load_catalog(_catalog(tmp_path, "http://127.0.0.1:9/v1", _corpus(tmp_path)))
    trajectory = Trajectory(task_id="q", steps=[
        Step(turn=0, kind="orchestrator", name="orchestrator-8b"),
        Step(turn=0, kind="tool", name="search", label="search-1",
             meta={"query": "x", "documents": ["Alpha\nfirst passage", "Beta\nsecond passage"]}),
        Step(turn=1, kind="tool", name="enhance_reasoning", label="reasoner-1",
             meta={"code": "print(2+2)", "code_output": "4\n"}),
        Step(turn=2, kind="tool", name="search", label="search-1", error="failed",
             meta={"documents": ["never shown"]}),
    ])
    assert PaperProtocol().messages("What is 2+2?", trajectory) == [
        {"role": "system", "content": "You are good at using tools."},
        {"role": "user", "content": DOCUMENTED_USER_MESSAGE},
    ]
    assert PaperProtocol().messages("What is 2+2?", None)[1]["content"] == (
        "Problem: What is 2+2?\n\n\n\nChoose an appropriate tool.'")
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.tools.factory import build_tools

    tools = {tool.name: tool.schema() for tool in build_tools(catalog.tools, ModelPool(catalog.models))}
    assert tools["search"] == {"type": "function", "function": {
        "name": "search",
        "description": "Search for missing information",
        "parameters": {
            "properties": {"model": {
                "description": "The model used to search for missing information. Choices: ['search-1', "
                "'search-2']. search-1 -> expert: $1.25 input / $10 output per 1M tokens, about 4.5 s per call; "
                "search-2 -> expert: $1.25 input / $10 output per 1M tokens, about 4.5 s per call.",
                "type": "string"}},
            "required": ["model"], "title": "parameters", "type": "object"}}}
    assert [list(schema["function"]["parameters"]["properties"]) for schema in tools.values()] == [["model"]] * 3


def test_paper_pool_config_has_the_references_labels(tmp_path):
    catalog = load_catalog(REPO / "configs" / "pools" / "paper-hle.yaml")
    labels = {tool.name: list(tool.models) for tool in catalog.tools}
    assert labels == {
        "enhance_reasoning": ["reasoner-1", "reasoner-2", "reasoner-3"],
        "answer": ["answer-math-1", "answer-math-2", "answer-1", "answer-2", "answer-3", "answer-4"],
        "search": ["search-1", "search-2", "search-3"],
    }
    assert catalog.judge == "gpt-5" and catalog.orchestrator == "nemotron-orchestrator-8b"
    every_backend = [model.backend for model in catalog.models]
    assert all(backend.type == "openai" and backend.base_url_env for backend in every_backend)


def test_first_valid_call_rule():
    from toolorchestra.backends.base import ToolCall
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.catalog.schema import ModelSpec
    from toolorchestra.tools.paper import PaperAnswerTool

    pool = ModelPool([ModelSpec(name="m", backend={"type": "local"})])
    tools = {"answer": PaperAnswerTool("answer", "", {"answer-1": "m"}, pool)}
    calls = [ToolCall(id="1", name="search", arguments={"model": "x"}),
             ToolCall(id="2", name="answer", arguments={}),
             ToolCall(id="3", name="answer", arguments={"model": "answer-1"}),
             ToolCall(id="4", name="answer", arguments={"model": "answer-1"})]
    chosen, notes = PaperProtocol().select(calls, ["malformed tool call: x"], tools)
    assert [call.id for call in chosen] == ["3"]
    assert notes == [
        "malformed tool call: x",
        "call 1 (search) skipped: unknown tool; offered: ['answer']",
        "call 2 (answer) skipped: missing argument(s) ['model']",
        "call 4 (answer) skipped: only the first valid call of a turn runs",
    ]


def test_hle_run_through_an_openai_endpoint_judges_accounts_and_records_a_replay_world(
        tmp_path, fake_vllm, isolated_cache):
    questions = tmp_path / "hle.jsonl"
    questions.write_text("\n".join(json.dumps(row) for row in [
        {"id": "q1", "question": "What is the capital of France?", "answer": "Paris", "answer_type": "exactMatch",
         "category": "Other"},
        {"id": "q2", "question": "Which option? A) Paris B) Rome", "answer": "B", "answer_type": "multipleChoice"},
        {"id": "q3", "question": "Describe the image.", "answer": "a cat", "answer_type": "exactMatch",
         "image": "data:image/png;base64,AAAA"},
    ]) + "\n")
    config = _catalog(tmp_path, fake_vllm.base_url, _corpus(tmp_path))
    out = tmp_path / "run"
    result = _cli("eval", "--env", f"hle:{questions}", "--config", str(config), "--out", str(out), "--no-progress")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n"], metrics["correct"], metrics["errors"], metrics["no_answer"]) == (2, 1, 0, 0)
    assert metrics["judge"]["verdicts"] == {"exact:correct": 1, "llm_judge:incorrect": 1}
    assert metrics["judge"]["mode"] == ["match, then LLM judge expert"]
    assert metrics["judge"]["llm_calls"] == 1 and metrics["judge"]["cost_usd"] == pytest.approx(100 * 1.25e-6 + 10 * 1e-5)
    roles = metrics["by_role"]
    assert roles["orchestrator"]["calls"] == 4 and roles["tool:search"]["calls"] == 2
    assert roles["label:search-2"]["calls"] == 2 and roles["tool:answer"]["calls"] == 2 and roles["judge"]["calls"] == 1
    # The judge's dollars are not the episodes': cost_usd is orchestrator + tools only.
    assert metrics["cost_usd"] == pytest.approx(sum(roles[r]["cost_usd"] for r in ("orchestrator", "tool:search", "tool:answer")))

    trajectories = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    first = next(t for t in trajectories if t["task_id"] == "q1")  # episodes end in any order
    assert first["steps"][0]["error"] == (
        "call 1 (search) skipped: model 'search-9' is not one of ['search-1', 'search-2']; "
        "call 3 (answer) skipped: only the first valid call of a turn runs")
    assert [step["name"] for step in first["steps"] if step["kind"] == "tool"] == ["search", "answer"]
    assert first["steps"][1]["meta"]["documents"][0] == "Paris\nParis is the capital of France."
    assert first["score_details"]["judge"]["method"] == "exact"

    # The second turn's request was rebuilt: short system message, the problem with the documents found.
    orchestrator_requests = [body for body in fake_vllm.requests if body.get("tools")]
    rebuilt = [body["messages"] for body in orchestrator_requests if "Documents:" in body["messages"][-1]["content"]]
    assert rebuilt and all(len(messages) == 2 and messages[0] == {"role": "system", "content": SYSTEM}
                           for messages in rebuilt)
    assert any(messages[1]["content"].startswith("Problem: What is the capital of France?\n\nDocuments:\nDoc 1: Paris")
               for messages in rebuilt)

    check = _cli("replay", "check", str(out / "replay"))
    assert check.returncode == 0, check.stderr
    replayed = tmp_path / "replayed"
    again = _cli("eval", "--env", f"replay:{out / 'replay'}", "--policy", "single:expert", "--out", str(replayed),
                 "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    replay_metrics = json.loads((replayed / "metrics.json").read_text())
    assert (replay_metrics["n"], replay_metrics["correct"]) == (2, 1)
    run = json.loads((out / "run.json").read_text())
    assert run["context"] == "paper"


def _run_one_question(tmp_path: Path, server: ServerThread, question: dict[str, Any], *options: str) -> Path:
    """`eval --env hle:FILE` over a one-question file, against the fake server; the run's folder."""
    questions = tmp_path / "hle.jsonl"
    questions.write_text(json.dumps(question) + "\n")
    config = _catalog(tmp_path, server.base_url, _corpus(tmp_path))
    out = tmp_path / "run"
    result = _cli("eval", "--env", f"hle:{questions}", "--config", str(config), "--out", str(out), "--no-progress",
                  *options)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_judge_none_says_so_and_matches_only(tmp_path, fake_vllm, isolated_cache):
    out = _run_one_question(tmp_path, fake_vllm, {"id": "q2", "question": "Which? A) Paris B) Rome", "answer": "B",
                                                  "answer_type": "multipleChoice"}, "--judge", "none")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["judge"]["verdicts"] == {"option_letter:incorrect": 1} and metrics["judge"]["llm_calls"] == 0
    assert metrics["judge"]["mode"] == ["match only (--judge none)"]
    assert "judge" not in metrics["by_role"]


@pytest.mark.parametrize(("line", "expected"), [
    ('{"id": "a", "question": "q?", "answer": "1"}',
     "field 'answer_type': expected one of ['exactMatch', 'multipleChoice'], got None"),
    ('{"id": "a", "question": "", "answer": "1", "answer_type": "exactMatch"}',
     "field 'question': expected a non-empty string"),
    ('{"id": "a", "question": "q?", "answer": "1", "answer_type": "exactMatch"',
     "not valid JSON"),
])
def test_a_malformed_hle_line_names_file_line_and_field(tmp_path, line, expected):
    questions = tmp_path / "hle.jsonl"
    good = json.dumps({"id": "z", "question": "q?", "answer": "1", "answer_type": "exactMatch"})
    questions.write_text(good + "\n" + line + "\n")
    result = _cli("eval", "--env", f"hle:{questions}", "--out", str(tmp_path / "out"), "--no-progress")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{questions}:2" in result.stderr and expected in result.stderr, result.stderr


def test_a_label_without_a_model_names_the_label(tmp_path):
    config = _catalog(tmp_path, "http://127.0.0.1:9/v1", _corpus(tmp_path))
    config.write_text(config.read_text().replace("answer-1: expert", "answer-1: gpt-7"))
    result = _cli("eval", "--env", "hle", "--config", str(config), "--out", str(tmp_path / "out"), "--no-progress")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "label 'answer-1' names model 'gpt-7'" in result.stderr, result.stderr


def test_a_catalog_without_the_paper_tools_is_refused(tmp_path, shared_data):
    config = tmp_path / "pool.yaml"
    config.write_text("orchestrator: m\nmodels: [{name: m, backend: {type: local}}]\n"
                      "tools: [{name: answer, type: answer}]\n")
    result = _cli("eval", "--env", "frames-live", "--config", str(config), "--out", str(tmp_path / "out"),
                  "--no-progress")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "paper_answer" in result.stderr


def test_hle_questions_skip_images_and_frames_live_splits_by_parity(shared_data, tmp_path, isolated_cache):
    from toolorchestra.envs.live.questions import read_frames, read_hle

    hle = read_hle(shared_data / "hle" / "hle_text_30.jsonl")
    assert (len(hle.tasks), hle.skipped_images) == (30, 0)
    assert {task.meta["answer_type"] for task in hle.tasks} == {"exactMatch", "multipleChoice"}
    frames = read_frames(shared_data / "frames" / "questions.jsonl")
    assert len(frames.tasks) == 824 and {t.split for t in frames.tasks if int(t.id) % 2} == {"test"}


def test_dense_retrieval_embeds_the_corpus_once_through_an_embeddings_endpoint(tmp_path, isolated_cache):
    """FAKE embeddings server (unit-test stand-in): a hashed bag of words per text, over real HTTP."""
    import asyncio
    import hashlib

    from toolorchestra.tools.retrieval import make_retriever

    app, inputs = FastAPI(), []

    def vector(text: str) -> list[float]:
        values = [0.0] * 64
        for word in text.lower().replace(".", " ").split():
            values[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        return values

    @app.post("/v1/embeddings")
    async def embed(request: Request) -> dict[str, Any]:
        body = await request.json()
        inputs.append(body["input"])
        return {"object": "list", "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1},
                "data": [{"object": "embedding", "index": i, "embedding": vector(text)}
                         for i, text in enumerate(body["input"])]}

    corpus = _corpus(tmp_path)
    with ServerThread(app) as server:
        options = {"retriever": "dense", "corpus": str(corpus), "embeddings": {"base_url": server.base_url, "model": "e"}}
        found = asyncio.run(make_retriever(dict(options), "search")("capital of Germany", 1))
        assert found == ["Berlin\nBerlin is the capital of Germany."]
        assert [len(batch) for batch in inputs] == [2, 1]  # the corpus once, then the query
        again = asyncio.run(make_retriever(dict(options), "search")("Paris France", 1))
        assert again == ["Paris\nParis is the capital of France."] and [len(b) for b in inputs] == [2, 1, 1]


def test_retriever_options_are_checked(tmp_path):
    from toolorchestra.errors import ConfigError
    from toolorchestra.tools.retrieval import make_retriever

    with pytest.raises(ConfigError, match="retriever must be bm25, dense or web; got 'faiss'"):
        make_retriever({"retriever": "faiss", "corpus": str(_corpus(tmp_path))}, "search")
    with pytest.raises(ConfigError, match="needs options.corpus"):
        make_retriever({}, "search")
    with pytest.raises(ConfigError, match="embeddings needs base_url and model"):
        make_retriever({"retriever": "dense", "corpus": str(_corpus(tmp_path)), "embeddings": {"model": "e"}}, "s")


def test_the_last_turn_offers_only_the_answer_tool(tmp_path, fake_vllm, isolated_cache):
    out = _run_one_question(tmp_path, fake_vllm, {"id": "q1", "question": "What is the capital of France?",
                                                  "answer": "Paris", "answer_type": "exactMatch"}, "--max-turns", "1")
    (request,) = [body for body in fake_vllm.requests if body.get("tools")]
    assert [tool["function"]["name"] for tool in request["tools"]] == ["answer"]
    (trajectory,) = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert trajectory["stop_reason"] == "answer" and trajectory["correct"] is True
    assert trajectory["steps"][0]["error"].startswith("call 1 (search) skipped: unknown tool; offered: ['answer']")


@pytest.fixture
def fake_stuck_orchestrator():
    """FAKE vLLM (unit-test stand-in): the orchestrator calls `answer` on questions about France and writes no
    call at all on any other; the expert answers Paris."""

    def reply(body: dict[str, Any], prompt: str) -> str:
        if not body.get("tools"):
            return "<answer>Paris</answer>"
        if "France" in prompt:
            return '<tool_call>\n{"name": "answer", "arguments": {"model": "answer-1"}}\n</tool_call>'
        return "I am not sure which tool to use."

    with _fake_server(reply) as server:
        yield server


def test_a_question_whose_answer_tool_never_runs_is_counted_not_crashed(tmp_path, fake_stuck_orchestrator,
                                                                       isolated_cache):
    questions = tmp_path / "hle.jsonl"
    questions.write_text("\n".join(json.dumps(row) for row in [
        {"id": "q1", "question": "What is the capital of France?", "answer": "Paris", "answer_type": "exactMatch"},
        {"id": "q2", "question": "What is the capital of Italy?", "answer": "Rome", "answer_type": "exactMatch"},
    ]) + "\n")
    config = _catalog(tmp_path, fake_stuck_orchestrator.base_url, _corpus(tmp_path))
    out = tmp_path / "run"
    result = _cli("eval", "--env", f"hle:{questions}", "--config", str(config), "--out", str(out), "--no-progress",
                  "--max-turns", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["n"], metrics["correct"], metrics["errors"], metrics["no_answer"]) == (2, 1, 0, 1)
    assert metrics["stop_reasons"] == {"answer": 1, "max_turns": 1} and metrics["judge"]["llm_calls"] == 0
    stuck = next(json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()
                 if json.loads(line)["task_id"] == "q2")
    assert stuck["score_details"]["no_answer"] is True and stuck["correct"] is False
    italy = [body for body in fake_stuck_orchestrator.requests if "Italy" in body["messages"][-1]["content"]]
    assert len(italy) == 2  # two orchestrator turns, no tool and no judge call
