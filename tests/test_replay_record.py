"""`toolorchestra replay record`: a pool's live endpoints answer a question file, and what they answered becomes a
replay world that `replay check`, `profile` and `run --policy reader` read.

The endpoints are real HTTP servers on 127.0.0.1 (test_openai_backend's `ScriptedServer`, a test-only fake of an
OpenAI-compatible endpoint) that answer by the question's content: one model can do sums, the other knows years.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from test_openai_backend import Recorded, Reply, ScriptedServer, chat_body

from toolorchestra.backends.pool import ModelPool
from toolorchestra.bench.policies import live_reader
from toolorchestra.catalog import load_catalog
from toolorchestra.envs.base import Task
from toolorchestra.tools.factory import build_tools

BIN = Path(sys.executable).parent
YEARS = {"the hundred years war": 1453, "the thirty years war": 1648, "the war of the roses": 1487, "the cold war": 1991}
SUM = re.compile(r"Compute (\d+) \+ (\d+)")
EVENT = re.compile(r"did (.+?) end\?")


def solve_sums(question: str) -> str:
    found = SUM.search(question)
    return f"The sum is {int(found.group(1)) + int(found.group(2))}." if found else "I don't know"


def know_years(question: str) -> str:
    found = EVENT.search(question)
    return f"It ended in {YEARS[found.group(1)]}." if found else "Perhaps 12."


class SolverServer:
    """A fake OpenAI-compatible endpoint (test only; test_openai_backend's ScriptedServer): replies
    `solve(user message)` with 200 prompt and 20 completion tokens; `failing` makes every request a 500.
    `asked` lists the questions it got."""

    def __init__(self, solve) -> None:
        self.solve, self.failing = solve, False
        self.server = ScriptedServer(self.reply).start()
        self.url, self.stop = self.server.url, self.server.stop

    @property
    def asked(self) -> list[str]:
        return [self.question(request) for request in self.server.requests]

    @staticmethod
    def question(request: Recorded) -> str:
        return [m["content"] for m in request.body["messages"] if m["role"] == "user"][-1]

    def reply(self, request: Recorded) -> Reply:
        if self.failing:
            return Reply(status=500, body={"error": "down"})
        return Reply(body=chat_body(self.solve(self.question(request)), usage=(200, 20)))


@pytest.fixture
def endpoints() -> Iterator[dict[str, SolverServer]]:
    started = {"mathy": SolverServer(solve_sums), "histo": SolverServer(know_years)}
    yield started
    for server in started.values():
        server.stop()


def write_questions(path: Path, count: int = 16) -> Path:
    rows = []
    for i in range(count):
        if i % 2 == 0:
            rows.append({"id": i, "problem": f"Compute {i} + {3 * i} and write the sum as a number.",
                         "answer": str(4 * i), "subset": "algebra", "split": "train" if i < 12 else "test"})
        else:
            event = list(YEARS)[i % len(YEARS)]
            rows.append({"id": i, "problem": f"In which year did {event} end? Name the year only.",
                         "answer": str(YEARS[event]), "subset": "history", "split": "train" if i < 12 else "test"})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_pool(path: Path, endpoints: dict[str, SolverServer], answer_labels: dict[str, str] | None = None) -> Path:
    """Both endpoints behind the answer tool (labels that say nothing) and the expert tool; mathy costs $1 per
    1M tokens, histo $2."""
    models = [{"name": "smollm2-135m", "backend": {"type": "local", "path": "smollm2-135m"}}]
    for name, server in endpoints.items():
        price = 1.0 if name == "mathy" else 2.0
        models.append({"name": name, "backend": {"type": "openai", "base_url": server.url, "model": name,
                                                 "max_retries": 0},
                       "price": {"input_per_m": price, "output_per_m": price}})
    labels = answer_labels if answer_labels is not None else {"one": "mathy", "two": "histo"}
    path.write_text(yaml.safe_dump({
        "orchestrator": "smollm2-135m",
        "models": models,
        "tools": [{"name": "expert", "type": "llm", "models": {"one": "mathy", "two": "histo"}},
                  {"name": "answer", "type": "answer", "models": labels}],
    }))
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "toolorchestra"), *args], capture_output=True, text=True, timeout=300)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_record_then_profile_then_the_reader_routes_by_what_was_recorded(tmp_path, endpoints):
    questions = write_questions(tmp_path / "questions.jsonl")
    pool = write_pool(tmp_path / "pool.yaml", endpoints)
    world = tmp_path / "world"
    result = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world))
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(endpoints["mathy"].asked) == len(endpoints["histo"].asked) == 16
    mathy, histo = lines(world / "models" / "mathy.jsonl"), lines(world / "models" / "histo.jsonl")
    # graded by the replay format's rule (normalized match against the gold), priced at the catalog's price
    assert {row["id"]: row["correct"] for row in mathy} == {str(i): i % 2 == 0 for i in range(16)}
    assert {row["id"]: row["correct"] for row in histo} == {str(i): i % 2 == 1 for i in range(16)}
    assert all(row["cost_usd"] == pytest.approx(220 / 1e6) for row in mathy)
    assert all(row["cost_usd"] == pytest.approx(440 / 1e6) for row in histo)
    assert {row["id"]: row["response"] for row in mathy}["2"] == "The sum is 8." and {row["label"] for row in histo} == {"two"}
    assert cli("replay", "check", str(world)).returncode == 0

    # A killed run: one answer lost and the last line cut short. The rerun asks only for those two.
    kept = (world / "models" / "mathy.jsonl").read_text().splitlines(keepends=True)
    (world / "models" / "mathy.jsonl").write_text("".join(kept[:-2]) + kept[-1][:15])
    result = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world))
    assert result.returncode == 0, result.stderr[-2000:]
    assert (len(endpoints["mathy"].asked), len(endpoints["histo"].asked)) == (18, 16)
    assert sorted(row["id"] for row in lines(world / "models" / "mathy.jsonl")) == sorted(str(i) for i in range(16))

    # The recorded world is profiled like any other, and the reader routes live questions by those profiles.
    profiles = tmp_path / "profiles.yaml"
    result = cli("profile", "--env", f"replay:{world}", "--out", str(profiles))
    assert result.returncode == 0, result.stderr[-2000:]
    measured = yaml.safe_load(profiles.read_text())
    assert measured["mathy"]["accuracy"] == {"algebra": 1.0, "history": 0.0}
    assert measured["histo"]["accuracy"] == {"algebra": 0.0, "history": 1.0}
    # The profiles name the world they were measured on, so the reader needs no --calibration to place a question.
    assert measured["mathy"]["measured_on"] == f"replay:{world.resolve()}"
    # (In process, as `run --policy reader` builds it, so that the reader model loads once.)
    catalog, reader = live_reader(load_catalog(pool), "reader", "accuracy", None, profiles)
    assert reader is not None and reader.calibration is not None

    async def answered_by(question: str) -> str | None:
        models = ModelPool(catalog.models)
        try:
            tools = build_tools(catalog.tools, models)
            reader.check_pool(tools)
            return (await reader.run(Task(id=question, split="cli", prompt=question), tools)).answered_by
        finally:
            await models.aclose()

    assert asyncio.run(answered_by("Compute 40 + 2 and write the sum as a number.")) == "mathy"
    assert asyncio.run(answered_by("In which year did the cold war end? Name the year only.")) == "histo"
    # A world that has moved since is one line that says what to pass.
    profiles.write_text(profiles.read_text().replace(str(world.resolve()), str(tmp_path / "moved")))
    result = cli("run", "Compute 1 + 2.", "--config", str(pool), "--policy", "reader", "--profiles", str(profiles))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "measured on replay:" in result.stderr and "--calibration" in result.stderr


def test_record_refuses_what_it_cannot_do_with_one_line_and_writes_nothing_for_failed_calls(tmp_path, endpoints):
    questions = write_questions(tmp_path / "questions.jsonl", count=4)
    pool = write_pool(tmp_path / "pool.yaml", endpoints)
    world = tmp_path / "world"

    def refused(*args: str) -> str:
        result = cli("replay", "record", *args)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
        return result.stderr

    assert "--models: ['nobody']" in refused(str(questions), "--config", str(pool), "--out", str(world),
                                            "--models", "nobody")
    assert "--tool search" in refused(str(questions), "--config", str(pool), "--out", str(world), "--tool", "search")
    assert "missing.jsonl" in refused(str(tmp_path / "missing.jsonl"), "--config", str(pool), "--out", str(world))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "problem": "q"}\n{"id": 2}\n')
    assert "bad.jsonl:2" in refused(str(bad), "--config", str(pool), "--out", str(world))
    bad.write_text('{"id": 1, "problem": "q", "answer": "a"}\n{"id": 2, "problem": "r"}\n')
    assert "without an 'answer': 1 of 2 (the first: id '2')" in refused(str(bad), "--config", str(pool),
                                                                         "--out", str(world))
    slashed = write_pool(tmp_path / "slashed.yaml", endpoints)
    data = yaml.safe_load(slashed.read_text())
    data["models"][1]["name"] = "org/mathy"
    data["tools"][0]["models"]["one"] = data["tools"][1]["models"]["one"] = "org/mathy"
    slashed.write_text(yaml.safe_dump(data))
    assert "cannot hold '/'" in refused(str(questions), "--config", str(slashed), "--out", str(world))
    # An --out that cannot be a folder (under a file): one line naming it, as for any path a command writes.
    assert "Not a directory" in refused(str(questions), "--config", str(pool), "--out", f"{questions}/world")
    assert endpoints["mathy"].asked == endpoints["histo"].asked == []

    # --models picks one; a question that changed since it was recorded is refused.
    result = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world), "--models", "mathy")
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (world / "models" / "histo.jsonl").exists() and len(endpoints["mathy"].asked) == 4
    changed = tmp_path / "changed.jsonl"
    changed.write_text(questions.read_text().replace('"answer": "8"', '"answer": "9"'))
    assert "question '2': its answer differs" in refused(str(changed), "--config", str(pool), "--out", str(world))

    # Another recorder writing the same --out (here: this process holding its lock) is refused, not raced.
    import fcntl

    with open(world / ".record.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert "another `replay record` is writing it" in refused(str(questions), "--config", str(pool),
                                                                  "--out", str(world))

    # An endpoint that is down: the other's answers are kept, nothing is written for the failed calls, exit 1.
    endpoints["histo"].failing = True
    stderr = refused(str(questions), "--config", str(pool), "--out", str(world))
    assert "4 calls failed" in stderr and "histo" in stderr and "rerunning" in stderr
    stderr = refused(str(questions), "--config", str(pool), "--out", str(tmp_path / "w2"), "--models", "histo")
    assert "every call failed, so nothing was written" in stderr and "check the endpoints" in stderr
    assert not (world / "models" / "histo.jsonl").exists()


def test_a_judge_model_grades_what_the_rule_does_not_match_and_a_failed_judge_writes_nothing(tmp_path, endpoints):
    questions = write_questions(tmp_path / "questions.jsonl", count=4)
    lenient = SolverServer(lambda prompt: "<correct>True</correct>")
    try:
        pool = write_pool(tmp_path / "pool.yaml", endpoints)
        data = yaml.safe_load(pool.read_text())
        data["models"].append({"name": "grader", "backend": {"type": "openai", "base_url": lenient.url,
                                                              "model": "grader", "max_retries": 0},
                               "price": {"input_per_m": 10.0, "output_per_m": 10.0}})
        pool.write_text(yaml.safe_dump(data))
        world = tmp_path / "world"
        result = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world),
                     "--models", "one", "--judge", "grader")
        assert result.returncode == 0, result.stderr[-2000:]
        # mathy's two sums match their gold; its two "I don't know" replies go to the judge, which passes them
        assert [row["correct"] for row in lines(world / "models" / "mathy.jsonl")] == [True] * 4
        assert len(lenient.asked) == 2 and "the LLM judge graded 2 replies for $0.004400" in result.stdout
        lenient.failing = True
        result = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world),
                     "--models", "histo", "--judge", "grader")
        assert result.returncode != 0 and "judge grader failed" in result.stderr
        # histo's two years match; the two it got wrong were not graded, so not written
        assert sorted(row["id"] for row in lines(world / "models" / "histo.jsonl")) == ["1", "3"]
        bad = cli("replay", "record", str(questions), "--config", str(pool), "--out", str(world), "--judge", "nobody")
        assert bad.returncode != 0 and "--judge nobody: no such model" in bad.stderr
    finally:
        lenient.stop()
