"""The replay format (docs/replay.md): a world written here, every validation error, `replay check`,
`replay import-routerbench`, the evaluation-time price options, held-out models, and replay:frames unchanged."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.bench.report import build_report
from toolorchestra.envs.registry import make_env, replay_dir
from toolorchestra.envs.replay.format import FormatError
from toolorchestra.envs.replay.importers import import_routerbench
from toolorchestra.envs.replay.world import DirectoryWorldEnv, apply_price_options, parse_price_scale, world_summary
from toolorchestra.errors import ConfigError, UserError

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data").resolve()
SUBSETS = ("algebra", "history")
POLICIES = ("single:alpha", "random", "cheapest", "per-subtask", "cascade", "router:0.1", "oracle")


# --- a world written in the format ---------------------------------------------------------------
def write_jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


def write_world(root: Path, count: int = 80) -> Path:
    """`count` questions (ids 0..count-1, parity split, two subsets), three models:
    alpha: `correct` + recorded cost and latency; beta: `grading` + token counts priced by the prefix "bet";
    gamma: `correct` + tokens priced by its own entry, and no answer to question 7 (left out)."""
    questions = [{"id": i, "problem": f"What is {i} plus {i} in {SUBSETS[i % 2 // 1]} {i % 7} terms?",
                  "answer": str(2 * i), "subset": SUBSETS[(i // 2) % 2], "extra": "ignored"} for i in range(count)]
    alpha = [{"id": i, "response": str(2 * i) if i % 3 else "no idea", "correct": bool(i % 3),
              "cost_usd": 0.01, "latency_s": 2.0} for i in range(count)]
    beta = [{"id": str(i), "response": f"Answer: {2 * i if i % 2 else i}", "grading": "A" if i % 2 else "B",
             "prompt_tokens": 100, "completion_tokens": 20, "reasoning_tokens": 30} for i in range(count)]
    gamma = [{"id": i, "response": str(2 * i), "correct": True, "prompt_tokens": 10, "completion_tokens": 10}
             for i in range(count) if i != 7]
    write_jsonl(root / "questions.jsonl", questions)
    write_jsonl(root / "models" / "alpha.jsonl", alpha)
    write_jsonl(root / "models" / "beta-large.jsonl", beta)
    write_jsonl(root / "models" / "gamma.jsonl", gamma)
    (root / "prices.yaml").write_text(
        "as_of: test\nmodels:\n"
        "  bet: {input_per_m: 1.0, output_per_m: 2.0, overhead_s: 1.0, output_tokens_per_s: 10}\n"
        "  gamma: {input_per_m: 100.0, output_per_m: 100.0}\n"
        "  g: {input_per_m: 9.0, output_per_m: 9.0}\n")
    return root


@pytest.fixture
def world(tmp_path) -> Path:
    return write_world(tmp_path / "world")


def test_world_loads_splits_drops_and_prices(world):
    env = make_env(f"replay:{world}")
    assert isinstance(env, DirectoryWorldEnv) and env.name == f"replay:{world}"
    assert env.models() == ["alpha", "beta-large", "gamma"]
    train, test = env.tasks("train"), env.tasks("test")
    assert all(int(t.id) % 2 == 0 for t in train) and all(int(t.id) % 2 == 1 for t in test)
    assert (len(train), len(test), env.data.dropped) == (40, 39, {"train": 0, "test": 1})  # id 7 left out
    task = test[0]
    assert task.gold == str(2 * int(task.id)) and task.subtask in SUBSETS
    assert env.call_cost(task, "alpha") == 0.01 and env.call_latency(task, "alpha") == 2.0
    # beta: prompt tokens at $1/M, completion + reasoning tokens at $2/M; latency 1 s + 50 tokens at 10/s
    assert env.call_cost(task, "beta-large") == pytest.approx(100 * 1e-6 + 50 * 2e-6)
    assert env.call_latency(task, "beta-large") == pytest.approx(6.0)
    assert env.call_cost(task, "gamma") == pytest.approx(20 * 100e-6)  # the exact entry beats the prefix "g"
    assert env.record(task.id, "beta-large").correct == (env.record(task.id, "beta-large").grade == "A")
    assert env.pool.spec("alpha").price.per_call == pytest.approx(0.01)  # recorded only: mean cost per call


def test_split_field_and_string_ids(tmp_path):
    root = write_world(tmp_path / "w", count=4)
    write_jsonl(root / "questions.jsonl", [{"id": "a", "problem": "p", "split": "train"},
                                           {"id": 1, "problem": "q", "split": "test"}])
    write_jsonl(root / "models" / "alpha.jsonl", [{"id": "a", "response": "x", "correct": True, "cost_usd": 0},
                                                  {"id": "1", "response": "y", "correct": False, "cost_usd": 0}])
    for name in ("beta-large", "gamma"):
        (root / "models" / f"{name}.jsonl").unlink()
    env = DirectoryWorldEnv(root)
    assert [t.id for t in env.tasks("train")] == ["a"] and [t.id for t in env.tasks("test")] == ["1"]


def test_free_text_judging(world):
    env = DirectoryWorldEnv(world)
    from toolorchestra.agent.trajectory import Trajectory

    task = env.tasks("test")[0]
    assert env.score(task, Trajectory(task_id=task.id, final_answer=f"Answer: {task.gold}")).correct
    assert not env.score(task, Trajectory(task_id=task.id, final_answer="Answer: 123456")).correct
    assert env.answer_key(task, "I don't know") is None


@pytest.mark.parametrize("policy", POLICIES)
def test_every_baseline_runs_on_a_written_world(world, tmp_path, policy):
    metrics = run_eval(EvalRequest(env=f"replay:{world}", policy=policy, out=tmp_path / "run", progress=False))
    assert metrics["n"] == 39 and metrics["errors"] == 0 and 0 <= metrics["accuracy"] <= 1


def test_report_over_a_written_world(world, tmp_path):
    outs = []
    for policy in ("single:alpha", "oracle", "cheapest"):
        outs.append(tmp_path / policy.replace(":", "_"))
        run_eval(EvalRequest(env=f"replay:{world}", policy=policy, out=outs[-1], progress=False))
    written = build_report(outs, tmp_path / "report")
    assert "oracle" in written["markdown"].read_text()


# --- validation: every error names its file, line and field ---------------------------------------
def _break(root: Path, case: str) -> tuple[str, int | None, str | None]:
    """Break the world as `case` says; return the file, line and field the error must name."""
    models = root / "models"
    if case == "malformed json":
        text = (models / "alpha.jsonl").read_text().splitlines()
        text[1] = text[1][:-1]
        (models / "alpha.jsonl").write_text("\n".join(text) + "\n")
        return "models/alpha.jsonl", 2, None
    if case == "not an object":
        write_jsonl(root / "questions.jsonl", ['[1, 2]'])
        return "questions.jsonl", 1, None
    if case == "missing field":
        rows = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
        del rows[4]["problem"]
        write_jsonl(root / "questions.jsonl", rows)
        return "questions.jsonl", 5, "problem"
    if case == "ill-typed field":
        rows = [json.loads(line) for line in (models / "alpha.jsonl").read_text().splitlines()]
        rows[2]["correct"] = "yes"
        write_jsonl(models / "alpha.jsonl", rows)
        return "models/alpha.jsonl", 3, "correct"
    if case == "negative tokens":
        rows = [json.loads(line) for line in (models / "beta-large.jsonl").read_text().splitlines()]
        rows[5]["completion_tokens"] = -3
        write_jsonl(models / "beta-large.jsonl", rows)
        return "models/beta-large.jsonl", 6, "completion_tokens"
    if case == "bad grading":
        rows = [json.loads(line) for line in (models / "beta-large.jsonl").read_text().splitlines()]
        rows[0]["grading"] = "D"
        write_jsonl(models / "beta-large.jsonl", rows)
        return "models/beta-large.jsonl", 1, "grading"
    if case == "duplicate question id":
        rows = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
        rows[2]["id"] = rows[0]["id"]
        write_jsonl(root / "questions.jsonl", rows)
        return "questions.jsonl", 3, "id"
    if case == "duplicate answer id":
        rows = [json.loads(line) for line in (models / "gamma.jsonl").read_text().splitlines()]
        rows[3]["id"] = rows[1]["id"]
        write_jsonl(models / "gamma.jsonl", rows)
        return "models/gamma.jsonl", 4, "id"
    if case == "unknown id":
        rows = [json.loads(line) for line in (models / "gamma.jsonl").read_text().splitlines()]
        rows[9]["id"] = 999
        write_jsonl(models / "gamma.jsonl", rows)
        return "models/gamma.jsonl", 10, "id"
    if case == "mixed grade fields":
        rows = [json.loads(line) for line in (models / "alpha.jsonl").read_text().splitlines()]
        del rows[6]["correct"]
        rows[6]["grading"] = "A"
        write_jsonl(models / "alpha.jsonl", rows)
        return "models/alpha.jsonl", 7, "grading"
    if case == "both grade fields":
        rows = [json.loads(line) for line in (models / "alpha.jsonl").read_text().splitlines()]
        rows[0]["grading"] = "A"
        write_jsonl(models / "alpha.jsonl", rows)
        return "models/alpha.jsonl", 1, "grading"
    if case == "no grade":
        rows = [json.loads(line) for line in (models / "gamma.jsonl").read_text().splitlines()]
        del rows[0]["correct"]
        write_jsonl(models / "gamma.jsonl", rows)
        return "models/gamma.jsonl", 1, "correct"
    if case == "missing models folder":
        for path in models.iterdir():
            path.unlink()
        models.rmdir()
        return "models", None, None
    if case == "missing prices":
        (root / "prices.yaml").write_text("models:\n  gamma: {input_per_m: 1, output_per_m: 1}\n")
        return "models/beta-large.jsonl", 1, "cost_usd"
    if case == "id parity needs an integer":
        rows = [json.loads(line) for line in (root / "questions.jsonl").read_text().splitlines()]
        rows[1]["id"] = "q1"
        write_jsonl(root / "questions.jsonl", rows)
        return "questions.jsonl", 2, "split"
    if case == "bad price sheet":
        (root / "prices.yaml").write_text("models:\n  bet: {input_per_m: cheap, output_per_m: 1}\n")
        return "prices.yaml", None, "models.bet.input_per_m"
    raise AssertionError(case)


CASES = ("malformed json", "not an object", "missing field", "ill-typed field", "negative tokens", "bad grading",
         "duplicate question id", "duplicate answer id", "unknown id", "mixed grade fields", "both grade fields",
         "no grade", "missing models folder", "missing prices", "id parity needs an integer", "bad price sheet")


@pytest.mark.parametrize("case", CASES)
def test_each_validation_error_names_file_line_and_field(world, case):
    file, line, field = _break(world, case)
    with pytest.raises(FormatError) as caught:
        DirectoryWorldEnv(world)
    error = caught.value
    assert error.path == str(world / file), str(error)
    assert (error.line, error.field) == (line, field), str(error)
    location = f"{world / file}" + (f":{line}:" if line else ":")
    assert str(error).startswith(location) and (field is None or f"field '{field}'" in str(error))
    if case == "missing prices":
        assert "'beta-large'" in str(error)


def test_missing_directory_and_questions(tmp_path):
    with pytest.raises(FormatError, match="directory not found"):
        DirectoryWorldEnv(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="questions.jsonl: file not found"):
        DirectoryWorldEnv(tmp_path / "empty")


def test_edits_are_seen_despite_the_cache(world):
    assert len(DirectoryWorldEnv(world).tasks("test")) == 39
    (world / "models" / "gamma.jsonl").write_text("")  # gamma answered nothing: every question left out
    env = DirectoryWorldEnv(world)
    assert env.tasks("test") == [] and env.data.dropped == {"train": 40, "test": 40}


# --- the CLI: replay check ---------------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    code = "from toolorchestra.cli.main import main; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)


def test_replay_check_prints_each_model(world):
    result = cli("replay", "check", str(world))
    assert result.returncode == 0, result.stderr
    assert "80 questions, 3 models" in result.stdout and "left out" in result.stdout
    for text in ("alpha", "beta-large", "gamma", "79/80", "80/80", "recorded", "prices (prefix bet)"):
        assert text in result.stdout


def test_replay_check_on_a_broken_directory_is_one_clear_line(world):
    _break(world, "mixed grade fields")
    result = cli("replay", "check", str(world))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{world / 'models' / 'alpha.jsonl'}:7: field 'grading'" in lines[0]


def test_unknown_env_mentions_replay_dir():
    with pytest.raises(UserError, match="replay:DIR"):
        make_env("replay:nope")
    assert replay_dir("replay:frames") is None and replay_dir("replay:./x") == Path("./x")


# --- import-routerbench ---------------------------------------------------------------------------------
def write_routerbench_csv(path: Path, rows: list[dict[str, str]]) -> None:
    models = ("org/model-a", "model-b")
    columns = ["", "sample_id", "prompt", "eval_name", *models, *(f"{m}|model_response" for m in models),
               *(f"{m}|total_cost" for m in models), "oracle_model_to_route_to"]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({column: row.get(column, "") for column in columns})


def _rb_row(key: int, sample: str, prompt: str, a: tuple[str, str, str], b: tuple[str, str, str]) -> dict[str, str]:
    return {"": str(key), "sample_id": sample, "prompt": repr([prompt]), "eval_name": sample.split(".")[0],
            "org/model-a": a[0], "org/model-a|model_response": repr([a[1]]), "org/model-a|total_cost": a[2],
            "model-b": b[0], "model-b|model_response": repr([b[1]]), "model-b|total_cost": b[2]}


def test_import_routerbench_round_trip(tmp_path):
    choice = 'Which is red?\nA) sky\nB) blood\nPrint only a single choice from "A" or "B" without explanation.'
    write_routerbench_csv(tmp_path / "quiz_train.csv", [
        _rb_row(1, "quiz.1", choice, ("1.0", "B", "0.002"), ("0.0", "A", "0.0001")),
        _rb_row(2, "quiz.2", "Name a prime.", ("1.0", "7", "0.003"), ("1.0", "5", "0.0002")),
    ])
    write_routerbench_csv(tmp_path / "quiz_test.csv", [
        _rb_row(3, "quiz.3", choice, ("0.0", "A", "0.002"), ("1.0", "B", "0.0001")),
        _rb_row(4, "quiz.4", "Name an even prime.", ("1.0", "2", "0.003"), ("", "2", "")),  # empty cells
    ])
    out = tmp_path / "imported"
    result = cli("replay", "import-routerbench", str(tmp_path / "quiz_train.csv"), str(tmp_path / "quiz_test.csv"),
                 "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "2 train and 2 test questions, 2 models, 1 empty" in result.stdout
    assert sorted(path.name for path in (out / "models").iterdir()) == ["model-a.jsonl", "model-b.jsonl"]
    env = make_env(f"replay:{out}")
    assert [len(env.tasks(split)) for split in ("train", "test")] == [2, 1] and env.data.dropped["test"] == 1
    task = env.task("quiz.3#3")
    assert task.split == "test" and task.subtask == "quiz" and task.gold == "B" and task.prompt == choice
    record = env.record("quiz.3#3", "model-b")
    assert (record.response, record.correct, record.cost_usd) == ("B", True, 0.0001)
    assert env.call_cost(task, "model-a") == 0.002 and env.task("quiz.2#2").gold is None
    again = cli("replay", "import-routerbench", str(tmp_path / "quiz_test.csv"), "--out", str(out))
    assert again.returncode == 2 and "not an empty directory" in again.stderr


def test_import_of_the_shared_routerbench_csvs_matches_replay_routerbench(tmp_path):
    if not DATA.exists():
        pytest.skip("shared data not found")
    summary = import_routerbench(sorted((DATA / "routerbench").glob("*.csv")), tmp_path / "rb")
    assert summary.questions == {"train": 2225, "test": 953}
    imported, original = make_env(f"replay:{tmp_path / 'rb'}"), make_env("replay:routerbench", DATA)
    assert [len(imported.tasks(s)) for s in ("train", "test")] == [2205, 945]
    assert imported.data.dropped == original.data.dropped
    for task in original.tasks("test")[:50]:
        for model in original.models():
            mine = imported.record(task.id, model.rsplit("/", 1)[-1])
            theirs = original.record(task.id, model)
            assert (mine.response, mine.correct, mine.cost_usd) == (theirs.response, theirs.correct, theirs.cost_usd)
        assert imported.task(task.id).gold == task.gold


# --- evaluation-time prices and held-out models ----------------------------------------------------
def test_price_scale_and_price_sheet(world, tmp_path):
    env = DirectoryWorldEnv(world)
    task = env.tasks("test")[0]
    before = {model: env.call_cost(task, model) for model in env.models()}
    apply_price_options(env, parse_price_scale(["alpha=3", "beta-large=0.5"]), None)
    assert env.call_cost(task, "alpha") == pytest.approx(3 * before["alpha"])  # recorded cost scaled
    assert env.call_cost(task, "beta-large") == pytest.approx(0.5 * before["beta-large"])
    assert env.call_cost(task, "gamma") == before["gamma"]
    assert env.pool.spec("alpha").price.per_call == pytest.approx(0.03)
    sheet = tmp_path / "new.yaml"
    sheet.write_text("models:\n  alpha: {input_per_m: 0, output_per_m: 1000, overhead_s: 0, output_tokens_per_s: 1}\n")
    fresh = DirectoryWorldEnv(world)
    apply_price_options(fresh, None, sheet)
    tokens = fresh.output_tokens(task, "alpha")
    assert fresh.call_cost(task, "alpha") == pytest.approx(tokens * 1000e-6)  # priced on tokens now
    assert fresh.call_latency(task, "alpha") == 2.0  # a recorded latency still wins
    for bad in (["alpha"], ["alpha=0"], ["alpha=x"]):
        with pytest.raises(UserError, match="--price-scale"):
            parse_price_scale(bad)
    with pytest.raises(UserError, match="no model or label 'delta'"):
        apply_price_options(DirectoryWorldEnv(world), {"delta": 2.0}, None)


def test_eval_price_scale_changes_cost_not_accuracy(world, tmp_path):
    base = run_eval(EvalRequest(env=f"replay:{world}", policy="single:alpha", out=tmp_path / "a", progress=False))
    scaled = run_eval(EvalRequest(env=f"replay:{world}", policy="single:alpha", out=tmp_path / "b", progress=False,
                                  price_scale={"alpha": 2.0}, hold_out_models=["alpha"]))
    assert scaled["accuracy"] == base["accuracy"] and scaled["cost_usd"] == pytest.approx(2 * base["cost_usd"])
    assert scaled["price_scale"] == {"alpha": 2.0} and scaled["hold_out"] == {"models": ["alpha"], "calls": 39,
                                                                                "answered": 39}
    with pytest.raises(UserError, match="holds a different run"):
        run_eval(EvalRequest(env=f"replay:{world}", policy="single:alpha", out=tmp_path / "b", progress=False))


def test_sampler_never_offers_held_out_models(world):
    from toolorchestra.train.config import SamplerConfig
    from toolorchestra.train.sampler import TaskSampler
    from toolorchestra.tools.llm import LLMTool

    env = DirectoryWorldEnv(world)
    config = SamplerConfig(min_labels=1, max_labels=3, hold_out_models=["gamma"])
    sampler = TaskSampler(env, env.tasks("train"), config, seed=0)
    offered = {model for draw in sampler.next_batch(60) for tool in draw.tools if isinstance(tool, LLMTool)
               for model in tool.labels.values()}
    assert offered == {"alpha", "beta-large"}
    assert {model for tool in env.tools_for(env.tasks("test")[0]) if isinstance(tool, LLMTool)
            for model in tool.labels.values()} == {"alpha", "beta-large", "gamma"}  # evaluation keeps it
    with pytest.raises(ConfigError, match="no model 'delta'"):
        TaskSampler(env, env.tasks("train"), SamplerConfig(hold_out_models=["delta"]), seed=0)
    with pytest.raises(ConfigError, match="every model"):
        TaskSampler(env, env.tasks("train"), SamplerConfig(hold_out_models=["alpha", "beta-large", "gamma"]), seed=0)


# --- replay:frames: the same figures through the generic loader -----------------------------------
FRAMES_BASELINES = ("single-claude-sonnet4_frames_budget4096", "single-gpt-5-mini_frames_low_effort", "cascade",
                    "router-0.1", "per-subtask", "random")
HEADER = {"env", "split", "policy", "seed", "limit", "spec", "kind", "threshold"}


@pytest.fixture(scope="module")
def frames():
    if not DATA.exists():
        pytest.skip("shared data not found")
    return make_env("replay:frames", DATA)


@pytest.mark.parametrize("name", FRAMES_BASELINES)
def test_frames_baselines_are_unchanged(frames, tmp_path, name):
    from toolorchestra.bench.eval import evaluate
    from toolorchestra.bench.policies import parse_policy

    saved = json.loads((REPO / "results" / "frames" / name / "metrics.json").read_text())
    policies = parse_policy(saved["policy"], frames, seed=saved["seed"])
    fresh = asyncio.run(evaluate(frames, policies, frames.tasks(saved["split"]), tmp_path, progress=False))
    assert {k: v for k, v in fresh.items() if k not in HEADER} == {k: v for k, v in saved.items() if k not in HEADER}
    if name == "single-claude-sonnet4_frames_budget4096":
        assert (fresh["correct"], fresh["n"], round(fresh["accuracy"], 4)) == (224, 412, 0.5437)


def test_frames_is_the_generic_loader(frames):
    from toolorchestra.envs.replay.world import LogWorldEnv

    assert isinstance(frames, LogWorldEnv) and frames.data.dropped == {"train": 2, "test": 0}
    summary = {row.model: row for row in world_summary(frames)}
    assert summary["claude-sonnet4_frames_budget4096"].cost_source == "prices (prefix claude-sonnet4_)"
    assert summary["claude-sonnet4_frames_budget4096"].answered == 824
