"""`toolorchestra run --policy reader` over live endpoints: two OpenAI-compatible servers on 127.0.0.1, each
label with a price and a profile in the catalog. The reader must follow the numbers (a price change moves the
answer), pay what the server's usage says, and refuse what it cannot read with one clear line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_openai_backend import Reply, ScriptedServer, chat_body

BIN = Path(sys.executable).parent


def answering(answer: str) -> ScriptedServer:
    """An OpenAI-compatible endpoint on 127.0.0.1 that answers every request with `answer`, 1000 prompt and 100
    completion tokens, and records the requests."""
    return ScriptedServer([Reply(body=chat_body(answer, usage=(1000, 100)))]).start()


@pytest.fixture
def servers() -> Iterator[dict[str, ScriptedServer]]:
    started = {"strong": answering("Paris (strong)"), "weak": answering("Paris (weak)")}
    yield started
    for server in started.values():
        server.stop()


def catalog(tmp_path: Path, servers: dict[str, ScriptedServer], prices: dict[str, float],
            accuracy: dict[str, dict[str, float]] | None = None) -> Path:
    """A catalog whose answer tool offers the two servers under names that say nothing (ans-1, ans-2)."""
    accuracy = accuracy or {"strong": {"qa": 0.9}, "weak": {"qa": 0.5}}
    models = [{"name": "smollm2-135m", "backend": {"type": "local", "path": "smollm2-135m"}}]
    for name, server in servers.items():
        models.append({
            "name": name,
            "backend": {"type": "openai", "base_url": server.url, "model": name, "max_retries": 0},
            "price": {"input_per_m": prices[name], "output_per_m": prices[name]},
            "profile": {"n": 50, "accuracy": accuracy[name], "output_tokens": 100},
        })
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump({
        "orchestrator": "smollm2-135m",
        "models": models,
        "tools": [{"name": "answer", "type": "answer", "models": {"ans-1": "weak", "ans-2": "strong"}}],
    }))
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "toolorchestra"), "run", *args], capture_output=True, text=True, timeout=300)


def answered(result: subprocess.CompletedProcess[str]) -> tuple[str, float]:
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads(result.stdout)
    [step] = [step for step in record["steps"] if step["kind"] == "tool"]
    assert step["name"] == "answer" and record["stop_reason"] == "answer"
    return step["model"], record["cost_usd"]


def test_the_reader_answers_with_the_label_its_price_and_profile_favour(tmp_path, servers):
    # At these prices the strong model costs 1.1e-3 and the weak one 1.1e-5 per answer.
    dear = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    model, cost = answered(run("Capital of France?", "--config", str(dear), "--policy", "reader",
                               "--prefer", "accuracy", "--json"))
    assert model == "strong" and cost == pytest.approx(1100 / 1e6)  # the server's usage at the catalog's price
    model, cost = answered(run("Capital of France?", "--config", str(dear), "--policy", "reader",
                               "--prefer", "cost", "--json"))
    assert model == "weak" and cost == pytest.approx(11 / 1e6)
    assert (len(servers["strong"].requests), len(servers["weak"].requests)) == (1, 1)


def test_the_default_policy_reads_a_profiled_pool_and_leaves_the_rest_to_the_orchestrator(tmp_path, servers):
    """`--policy auto` (the default of `run` and `serve`): the reader when the answer labels all carry profiles,
    the catalog's orchestrator model otherwise, and the embedded pool is never read as a pool."""
    from toolorchestra.bench.policies import live_reader, reads_its_pool
    from toolorchestra.catalog import default_catalog, load_catalog

    path = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    model, _ = answered(run("Capital of France?", "--config", str(path), "--prefer", "cost", "--json"))
    assert model == "weak"
    result = run("Capital of France?", "--config", str(path), "--prefer", "accuracy")
    assert result.returncode == 0 and "policy: reader (auto)" in result.stdout and "Paris (strong)" in result.stdout
    result = run("q", "--config", str(path), "--max-budget", "0.01")
    assert result.returncode != 0 and "chosen by --policy auto" in result.stderr and "Traceback" not in result.stderr
    assert (len(servers["strong"].requests), len(servers["weak"].requests)) == (1, 1)

    profiled = load_catalog(path)
    assert reads_its_pool(profiled) and live_reader(profiled, "auto", None, None, None)[1] is not None
    one_unprofiled = profiled.model_copy(
        update={"models": [m.model_copy(update={"profile": None}) if m.name == "strong" else m
                           for m in profiled.models]})
    assert not reads_its_pool(one_unprofiled)
    assert live_reader(one_unprofiled, "auto", None, None, None) == (one_unprofiled, None)
    assert not reads_its_pool(default_catalog()) and live_reader(default_catalog(), "auto", None, None, None)[1] is None


def test_a_price_change_moves_the_answer_with_no_name_involved(tmp_path, servers):
    # The same pool with the strong model now the cheaper one: under "cost" the reader follows the price.
    cheap = catalog(tmp_path, servers, {"strong": 0.01, "weak": 1.0})
    model, _ = answered(run("Capital of France?", "--config", str(cheap), "--policy", "reader",
                            "--prefer", "cost", "--json"))
    assert model == "strong"
    # And a profile change does too: the weak model measured as the accurate one.
    swapped = catalog(tmp_path, servers, {"strong": 1.0, "weak": 1.0},
                      {"strong": {"qa": 0.5}, "weak": {"qa": 0.9}})
    model, _ = answered(run("Capital of France?", "--config", str(swapped), "--policy", "reader",
                            "--prefer", "accuracy", "--json"))
    assert model == "weak"


def test_what_the_reader_cannot_read_is_one_clear_line(tmp_path, servers):
    # No profile on a label.
    path = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    data = yaml.safe_load(path.read_text())
    del data["models"][1]["profile"]
    path.write_text(yaml.safe_dump(data))
    result = run("q", "--config", str(path), "--policy", "reader")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "no capability profile" in result.stderr and "ans-2" in result.stderr
    # Profiles of several task types and nothing to place the question among them.
    typed = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01},
                    {"strong": {"qa": 0.9, "math": 0.4}, "weak": {"qa": 0.5, "math": 0.6}})
    result = run("q", "--config", str(typed), "--policy", "reader")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "--calibration" in result.stderr
    # An unknown policy, and --calibration without the reader.
    result = run("q", "--config", str(typed), "--policy", "readr")
    assert result.returncode != 0 and "--policy 'readr'" in result.stderr and "Traceback" not in result.stderr
    result = run("q", "--config", str(typed), "--policy", "reader", "--calibration", "replay:nowhere")
    assert result.returncode != 0 and "--calibration 'replay:nowhere'" in result.stderr
    result = run("q", "--config", str(typed), "--policy", "orchestrator", "--calibration", "replay:routerbench")
    assert result.returncode != 0 and "--calibration" in result.stderr and "Traceback" not in result.stderr
    # A calibration world whose task types are not the profiles' would weigh the labels on types never measured.
    result = run("q", "--config", str(typed), "--calibration", "replay:routerbench")
    assert result.returncode != 0 and "['math', 'qa']" in result.stderr and "arc-challenge" in result.stderr
    assert result.returncode != 0 and "--calibration" in result.stderr and "Traceback" not in result.stderr
    result = run("q", "--config", str(typed), "--policy", "reader", "--max-budget", "0.001")
    assert result.returncode != 0 and "--max-budget" in result.stderr and "Traceback" not in result.stderr
    # A --save file that cannot be written fails before any call is paid for.
    readable = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    result = run("q", "--config", str(readable), "--policy", "reader", "--save", f"{readable}/trajectory.jsonl")
    assert result.returncode == 2 and "Traceback" not in result.stderr and str(readable) in result.stderr
    assert len(servers["strong"].requests) == len(servers["weak"].requests) == 0


def test_profiles_measured_on_your_logs_route_live_questions_by_type(tmp_path, servers):
    """The whole flow a user follows: profile the models on a replay world of their own logs, then run live
    endpoints of the same names with those profiles, the real SmolLM2 placing each question among the types."""
    from test_reader_policy import write_typed_world

    world = write_typed_world(tmp_path / "logs")
    profiles = tmp_path / "profiles.yaml"
    measured = subprocess.run([str(BIN / "toolorchestra"), "profile", "--env", f"replay:{world}", "--out",
                               str(profiles)], capture_output=True, text=True, timeout=300)
    assert measured.returncode == 0, measured.stderr[-2000:]
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump({
        "orchestrator": "smollm2-135m",
        "models": [{"name": "smollm2-135m", "backend": {"type": "local", "path": "smollm2-135m"}}] + [
            {"name": name, "backend": {"type": "openai", "base_url": servers[kind].url, "model": name,
                                       "max_retries": 0},
             "price": {"per_call": 0.001}}
            for name, kind in (("mathy", "strong"), ("histo", "weak"))],
        "tools": [{"name": "answer", "type": "answer", "models": {"one": "mathy", "two": "histo"}}],
    }))
    common = ["--config", str(path), "--policy", "reader", "--profiles", str(profiles), "--prefer", "accuracy",
              "--json"]
    nonce = uuid.uuid4().hex[:8]  # questions no earlier run has read
    asked = [f"Compute 7 + 21 and write the sum as a number. ({nonce})",
             f"In which year did the cold war end? Name the year only. ({nonce})"]
    # Two types, and no --calibration: the profiles name the world they were measured on, which places it.
    assert answered(run(asked[0], *common))[0] == "mathy"
    common += ["--calibration", f"replay:{world}"]
    assert answered(run(asked[1], *common))[0] == "histo"
    # The users' questions were read but not kept: only the calibration questions' vectors are on disk.
    from toolorchestra.backends.question_reader import QuestionReader

    kept = QuestionReader()._read_cache()
    assert kept and not {hashlib.sha1(question.encode()).hexdigest() for question in asked} & set(kept)
    bad = tmp_path / "bad.yaml"
    bad.write_text(profiles.read_text().replace("mathy:", "mathz:", 1))
    result = run("q", *[arg if arg != str(profiles) else str(bad) for arg in common])
    # a profile of another name leaves its label without one, and the error names the label
    assert result.returncode != 0 and "labels ['one']" in result.stderr and "Traceback" not in result.stderr
    bad.write_text("somebody-else:\n  n: 3\n  accuracy: {qa: 0.5}\n")
    result = run("q", *[arg if arg != str(profiles) else str(bad) for arg in common])
    assert result.returncode != 0 and "profiles no model of the catalog" in result.stderr


def test_serve_answers_as_the_reader_and_refuses_a_pool_it_cannot_read(tmp_path, servers):
    """`serve --policy reader` serves `orchestrator:reader` beside the catalog's orchestrator: a client's
    request is answered by the label the prices and profiles favour; a pool it cannot read stops it at start."""
    import openai

    path = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    # no --policy: the default (auto) serves the reader over a pool whose answer labels all carry profiles
    process = subprocess.Popen([str(BIN / "toolorchestra"), "serve", "--config", str(path), "--port", "0",
                                "--prefer", "cost"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stdout.readline()
        assert "orchestrator:reader" in banner, process.stderr.read() if process.poll() is not None else banner
        client = openai.OpenAI(base_url=banner.split(" at ")[1].split()[0], api_key="x", max_retries=0,
                               timeout=60)
        assert "orchestrator:reader" in [model.id for model in client.models.list()]
        response = client.chat.completions.create(
            model="orchestrator:reader", messages=[{"role": "user", "content": "Capital of France?"}])
        assert response.choices[0].message.content == "Paris (weak)"
        assert (len(servers["strong"].requests), len(servers["weak"].requests)) == (0, 1)
    finally:
        process.terminate()
        process.wait(timeout=20)
    data = yaml.safe_load(path.read_text())
    del data["models"][1]["profile"]
    path.write_text(yaml.safe_dump(data))
    result = subprocess.run([str(BIN / "toolorchestra"), "serve", "--config", str(path), "--port", "0",
                             "--policy", "reader"], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "Traceback" not in result.stderr and "no capability profile" in result.stderr


def test_an_endpoint_that_is_down_ends_the_episode_in_one_error_line(tmp_path, servers):
    path = catalog(tmp_path, servers, {"strong": 1.0, "weak": 0.01})
    servers["strong"].stop()
    result = run("Capital of France?", "--config", str(path), "--policy", "reader", "--prefer", "accuracy")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: the episode ended in an error: model strong failed")


def test_the_shipped_reader_pool_routes_by_routerbench_profiles(tmp_path, servers, shared_data):
    """configs/pools/reader-openai-compatible.yaml, its endpoints pointed at the test servers: a Python question
    goes to the model whose profile is best on mbpp under "accuracy", and to a cheap one under "cost". (In
    process, as `run --policy reader` builds it, so the reader model loads once.)"""
    import asyncio

    from toolorchestra.agent.preference import Preference
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.bench.policies import live_reader
    from toolorchestra.catalog import load_catalog
    from toolorchestra.envs.base import Task
    from toolorchestra.tools.factory import build_tools

    data = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs/pools/reader-openai-compatible.yaml")
                          .read_text())
    for model in data["models"][1:]:
        model["backend"].update(base_url=servers["strong"].url, max_retries=0)
        model["backend"].pop("api_key_env", None)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data))
    # No --calibration: the pool's profiles name the world they were measured on (measured_on).
    catalog, reader = live_reader(load_catalog(path), "reader", "accuracy", None, None)
    assert reader is not None and reader.calibration is not None and reader.calibration.name == "replay:routerbench"
    question = Task(id="q", split="cli",
                    prompt="Write a python function to find the sum of the squares of the first n odd natural numbers.")

    async def answered_by(prefer: str) -> str | None:
        reader.preference = Preference.parse(prefer)
        pool = ModelPool(catalog.models)
        try:
            tools = build_tools(catalog.tools, pool)
            reader.check_pool(tools)
            trajectory = await reader.run(question, tools)
        finally:
            await pool.aclose()
        assert trajectory.stop_reason == "answer" and trajectory.final_answer == "Paris (strong)"
        return trajectory.answered_by

    assert asyncio.run(answered_by("accuracy")) == "gpt-4-1106-preview"
    assert asyncio.run(answered_by("cost")) == "mistralai/mixtral-8x7b-chat"
    assert reader._posteriors == {}  # a live question's reading is not kept past its episode (a server's memory)
    assert len(servers["strong"].requests) == 2


def write_declining_world(root: Path, count: int = 80) -> Path:
    """A free-text replay world: `cheap` answers 7 in 10 questions right and says "I don't know" to the rest,
    `dear` answers every one right at 100 times the price. The best plan under "accuracy": consult cheap, adopt
    its answer when it gives one, and otherwise answer with dear."""
    from test_reader_policy import write_world

    questions: list[dict] = []
    rows: dict[str, list[dict]] = {"cheap": [], "dear": []}
    for i in range(count):
        questions.append({"id": i, "problem": f"What is the code word number {i}?", "answer": f"word{i}",
                          "subset": "qa"})
        knows = i % 10 < 7
        rows["cheap"].append({"id": i, "response": f"word{i}" if knows else "I don't know", "correct": knows,
                              "cost_usd": 0.0001, "latency_s": 1.0})
        rows["dear"].append({"id": i, "response": f"word{i}", "correct": True, "cost_usd": 0.01, "latency_s": 1.0})
    return write_world(root, questions, rows)


def test_over_live_endpoints_the_reader_consults_and_escalates_when_the_reply_commits_to_nothing(tmp_path):
    """With per-question outcomes in the profiles, an `expert` tool over the same labels and a free-text
    calibration world, a live run consults the cheap endpoint, adopts a reply that gives an answer (no second
    call), and escalates to the dear one when the reply says "I don't know"."""
    world = write_declining_world(tmp_path / "logs")
    profiles = tmp_path / "profiles.yaml"
    measured = subprocess.run([str(BIN / "toolorchestra"), "profile", "--env", f"replay:{world}", "--per-subset",
                               "1000", "--out", str(profiles)], capture_output=True, text=True, timeout=300)
    assert measured.returncode == 0, measured.stderr[-2000:]

    def pool(cheap_reply: str, expert: dict[str, str] | None = None) -> tuple[Path, dict[str, ScriptedServer]]:
        started = {"cheap": answering(cheap_reply), "dear": answering("word7")}
        path = tmp_path / "live.yaml"
        path.write_text(yaml.safe_dump({
            "orchestrator": "smollm2-135m",
            "models": [{"name": "smollm2-135m", "backend": {"type": "local", "path": "smollm2-135m"}}] + [
                {"name": name, "backend": {"type": "openai", "base_url": server.url, "model": name,
                                           "max_retries": 0},
                 "price": {"per_call": 0.0001 if name == "cheap" else 0.01}}
                for name, server in started.items()],
            "tools": [{"name": "expert", "type": "llm", "models": expert or {"one": "cheap", "two": "dear"}},
                      {"name": "answer", "type": "answer", "models": {"one": "cheap", "two": "dear"}}],
        }))
        return path, started

    def steps(path: Path) -> list[tuple[str, str]]:
        result = run("What is the code word number 7?", "--config", str(path), "--policy", "reader", "--profiles",
                     str(profiles), "--calibration", f"replay:{world}", "--prefer", "accuracy", "--json")
        assert result.returncode == 0, result.stderr[-2000:]
        record = json.loads(result.stdout)
        assert record["stop_reason"] == "answer"
        return [(step["name"], step["model"]) for step in record["steps"]]

    path, started = pool("word7")
    try:
        assert steps(path) == [("expert", "cheap"), ("answer", "cheap")]  # adopted: one call in all
        assert (len(started["cheap"].requests), len(started["dear"].requests)) == (1, 0)
    finally:
        for server in started.values():
            server.stop()
    path, started = pool("I don't know")
    try:
        assert steps(path) == [("expert", "cheap"), ("answer", "dear")]
        assert (len(started["cheap"].requests), len(started["dear"].requests)) == (1, 1)
    finally:
        for server in started.values():
            server.stop()
    # An expert tool whose labels name other models cannot be adopted from: the reader answers with one label.
    path, started = pool("word7", expert={"one": "dear", "two": "cheap"})
    try:
        assert steps(path) == [("answer", "dear")]
    finally:
        for server in started.values():
            server.stop()
