"""decisions.csv from real evals, `toolorchestra export-results`, and scripts/check_decisions.py on raw data."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolorchestra.bench.decisions import COLUMNS, read_decisions
from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.bench.export import export_results
from toolorchestra.errors import UserError

sys.path.insert(0, str(Path(__file__).parent))
from _scripted_orchestrator import POLICY, scripted_orchestrator_runs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data").resolve()
TOOLORCHESTRA = Path(sys.executable).parent / "toolorchestra"
CHECKER = REPO / "scripts" / "check_decisions.py"
GPT4 = "gpt-4-1106-preview"


@pytest.fixture(scope="module")
def evals(tmp_path_factory) -> Path:
    """Real baseline evals (--limit 50) into <root>/<policy>, and a router sweep (--limit 20)."""
    if not DATA.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the shared data beside the repo at {DATA}")
        pytest.skip(f"shared data not found at {DATA}")
    root = tmp_path_factory.mktemp("evals")
    for policy, limit in (("cascade", 50), (f"single:{GPT4}", 50), ("router", 20)):
        run_eval(EvalRequest(env="replay:routerbench", policy=policy, out=root / policy.replace(":", "_"),
                             limit=limit, data_dir=DATA, progress=False))
    return root


def _check(path: Path) -> subprocess.CompletedProcess:
    # the checker runs with the venv's python but must not need toolorchestra: run it with -I from /
    return subprocess.run([sys.executable, "-I", str(CHECKER), str(path), "--data-dir", str(DATA)],
                          capture_output=True, text=True, timeout=300, cwd="/")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_eval_writes_decisions_that_sum_to_its_metrics(evals):
    single = evals / f"single_{GPT4}"
    with open(single / "decisions.csv", newline="") as handle:
        assert handle.readline().strip() == ",".join(COLUMNS)
    rows = read_decisions(single / "decisions.csv")
    metrics = json.loads((single / "metrics.json").read_text())
    assert len(rows) == metrics["n"] == 50
    assert {(row["preference"], row["label"], row["model"]) for row in rows} == {("none", "gpt-4", GPT4)}
    assert sum(int(row["correct"]) for row in rows) == metrics["correct"]
    assert sum(float(row["cost_usd"]) for row in rows) == pytest.approx(metrics["cost_usd"], rel=1e-12)
    assert sum(float(row["latency_s"]) for row in rows) / 50 == pytest.approx(metrics["latency_s"]["mean"])
    cascade = read_decisions(evals / "cascade" / "decisions.csv")
    # a cascade passes the pair's agreed answer on as text (no model, no label) or lets a model answer
    assert any(row["model"] == "" and row["label"] == "" for row in cascade)
    assert any(row["model"] and row["label"] for row in cascade)
    sweep = sorted(path.name for path in (evals / "router").glob("decisions*.csv"))
    assert len(sweep) == 13 and "decisions-router-0.3.csv" in sweep and "decisions.csv" not in sweep


def test_checker_passes_real_eval_dirs_and_fails_on_a_tampered_row(evals, tmp_path):
    result = _check(evals)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK: 15 decisions x preference" in result.stdout
    assert "cascade/decisions.csv" in result.stdout and "50/50" in result.stdout  # every cascade row recomputed

    tampered = tmp_path / "single"
    tampered.mkdir()
    for name in ("run.json", "metrics.json", "trajectories.jsonl", "decisions.csv"):
        (tampered / name).write_bytes((evals / f"single_{GPT4}" / name).read_bytes())
    rows = _rows(tampered / "decisions.csv")
    rows[3]["correct"] = "0" if rows[3]["correct"] == "1" else "1"
    with open(tampered / "decisions.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    result = _check(tampered)
    assert result.returncode == 1
    assert f"{rows[3]['task_id']}: correct={rows[3]['correct']} but the raw score of {GPT4}" in result.stdout
    assert "correct" in result.stdout and "in metrics.json" in result.stdout  # the totals no longer match either

    cascade = tmp_path / "cascade"
    cascade.mkdir()
    for name in ("run.json", "metrics.json", "trajectories.jsonl", "decisions.csv"):
        (cascade / name).write_bytes((evals / "cascade" / name).read_bytes())
    text = (cascade / "decisions.csv").read_text().splitlines()
    cells = text[7].split(",")
    cells[5] = repr(float(cells[5]) + 0.001)
    text[7] = ",".join(cells)
    (cascade / "decisions.csv").write_text("\n".join(text) + "\n")
    result = _check(cascade)
    assert result.returncode == 1 and f"{cells[0]}: cost_usd" in result.stdout


def test_export_results_layout_merges_preferences_and_checks(evals, tmp_path):
    orchestrator = scripted_orchestrator_runs(DATA, tmp_path / "orchestrator")  # SYNTHETIC orchestrator runs
    out = tmp_path / "results" / "routerbench"
    result = subprocess.run([str(TOOLORCHESTRA), "export-results", str(evals / "cascade"),
                             str(evals / f"single_{GPT4}"), str(orchestrator["accuracy"]), str(orchestrator["cost"]),
                             "--out", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in out.iterdir()) == ["cascade", "orchestrator-scripted", f"single-{GPT4}"]
    for name in ("cascade", f"single-{GPT4}"):  # one run of a policy: copied as is
        source = evals / name.replace("single-", "single_")
        assert (out / name / "decisions.csv").read_bytes() == (source / "decisions.csv").read_bytes()
        assert (out / name / "metrics.json").read_bytes() == (source / "metrics.json").read_bytes()
    merged = read_decisions(out / "orchestrator-scripted" / "decisions.csv")
    assert [row["preference"] for row in merged] == ["accuracy"] * 40 + ["cost"] * 40
    assert {row["model"] for row in merged[:40]} == {GPT4} and {row["model"] for row in merged[40:]} == {""}
    metrics = json.loads((out / "orchestrator-scripted" / "metrics.json").read_text())
    assert metrics["policy"] == POLICY and sorted(metrics["by_preference"]) == ["accuracy", "cost"]
    for prefer, folder in orchestrator.items():
        assert metrics["by_preference"][prefer] == json.loads((folder / "metrics.json").read_text())
    assert metrics["by_preference"]["cost"]["cost_usd"] < metrics["by_preference"]["accuracy"]["cost_usd"]

    checked = _check(tmp_path / "results")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for prefer in ("accuracy", "cost"):
        assert re.search(rf"orchestrator-scripted/decisions.csv +{prefer} +40 .* ok", checked.stdout), checked.stdout

    # a row moved to another answering model no longer matches the raw data
    path = out / "orchestrator-scripted" / "decisions.csv"
    text = path.read_text().replace(f",gpt-4,{GPT4},", ",gpt-4,claude-v2,", 1)
    path.write_text(text)
    tampered = _check(out)
    assert tampered.returncode == 1 and "MISMATCH" in tampered.stdout
    assert "label 'gpt-4' names claude-v2, in most rows gpt-4-1106-preview" in tampered.stdout, tampered.stdout


def test_export_sweep_rebuilds_missing_decisions_and_refuses_duplicates(evals, tmp_path):
    sweep = tmp_path / "router"
    sweep.mkdir()
    for name in ("run.json", "metrics.json", "trajectories.jsonl"):  # as written before decisions.csv existed
        (sweep / name).write_bytes((evals / "router" / name).read_bytes())
    written = export_results([sweep], tmp_path / "results")
    assert len(written) == 13
    point = tmp_path / "results" / "routerbench" / "router-0.3"
    assert point in written and json.loads((point / "metrics.json").read_text())["policy"] == "router:0.3"
    rebuilt = read_decisions(point / "decisions.csv")
    original = read_decisions(evals / "router" / "decisions-router-0.3.csv")
    assert sorted(map(str, rebuilt)) == sorted(map(str, original))  # same rows; order: as first saved
    assert _check(tmp_path / "results").returncode == 0
    with pytest.raises(UserError, match="two runs with preference 'none'"):
        export_results([evals / "cascade", evals / "cascade"], tmp_path / "again")
    with pytest.raises(UserError, match="metrics.json"):
        export_results([tmp_path / "nothing-here"], tmp_path / "again")


def test_checker_on_frames_grades_from_the_raw_model_files(tmp_path):
    if not DATA.exists():
        pytest.skip(f"shared data not found at {DATA}")
    for policy in ("single:claude-sonnet4_frames_budget4096", "cascade"):
        run_eval(EvalRequest(env="replay:frames", policy=policy, out=tmp_path / policy.split(":")[0], limit=30,
                             data_dir=DATA, progress=False))
    result = _check(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"single/decisions.csv +none +30 .* n/a .* 30/0 +ok", result.stdout), result.stdout
    path = tmp_path / "single" / "decisions.csv"
    rows = _rows(path)
    wrong = next(row for row in rows if row["correct"] == "0")
    path.write_text(path.read_text().replace(f",{wrong['model']},0,", f",{wrong['model']},1,", 1))  # its first 0
    result = _check(tmp_path / "single")
    assert result.returncode == 1 and f"{wrong['task_id']}: correct=1 but" in result.stdout
    assert "raw grading is 'B'" in result.stdout or "raw grading is 'C'" in result.stdout


def test_checker_applies_the_runs_price_scale(tmp_path):
    """A run with --price-scale (named by label) is checked against raw costs times the factor; a checker that
    ignored run.json's factors would call every gpt-4 row's cost wrong."""
    if not DATA.exists():
        pytest.skip(f"shared data not found at {DATA}")
    out = tmp_path / "scaled"
    run_eval(EvalRequest(env="replay:routerbench", policy=f"single:{GPT4}", out=out, limit=20, data_dir=DATA,
                         progress=False, price_scale={"gpt-4": 0.05}))
    result = _check(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20/20" in result.stdout  # every row's cost recomputed from the raw cells
    run = json.loads((out / "run.json").read_text())
    run["price_scale"] = {"gpt-4": 0.5}
    (out / "run.json").write_text(json.dumps(run))
    result = _check(out)
    assert result.returncode == 1 and "cost_usd" in result.stdout


def test_checker_recomputes_a_reader_run_that_consults_and_adopts(tmp_path):
    """The reader under the accuracy preference consults cheaper models and adopts their answer where they commit
    to the same one (with whole-train profiles its cost preference answers at once on RouterBench): the adopted
    answer call is no second model call, and the checker must recompute every cost from the raw cells."""
    if not DATA.exists():
        pytest.skip(f"shared data not found at {DATA}")
    out = tmp_path / "reader"
    run_eval(EvalRequest(env="replay:routerbench", policy="reader", prefer="accuracy", out=out, limit=24,
                         data_dir=DATA, progress=False))
    episodes = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert any(step.get("meta", {}).get("adopted") for episode in episodes for step in episode["steps"])
    result = _check(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "24/24" in result.stdout


@pytest.mark.parametrize("prefer", ["accuracy", "cost"])
def test_the_reader_reproduces_its_committed_routerbench_decisions(tmp_path, prefer):
    """The committed reader runs with profiles measured on the whole train split, the default since the dev worlds
    chose it (docs/results.md, "Consult-two plans" and "The reader's settings chosen on dev worlds"): their first 12
    test decisions, consults and escalations included, come out the same from today's code and its defaults."""
    if not DATA.exists():
        pytest.skip(f"shared data not found at {DATA}")
    folder = "routerbench-catalog" if prefer == "accuracy" else "routerbench-catalog-cost"
    with (REPO / "results" / "generalization" / "reader" / folder / "reader-profiles-rb-profiles-full" / "decisions.csv").open() as handle:
        committed = list(csv.DictReader(handle))[:12]
    out = tmp_path / prefer
    run_eval(EvalRequest(env="replay:routerbench", policy="reader", prefer=prefer, out=out, limit=12, data_dir=DATA,
                         progress=False))
    with (out / "decisions.csv").open() as handle:
        rerun = list(csv.DictReader(handle))
    keep = ("task_id", "model", "correct", "cost_usd")
    assert [{k: row[k] for k in keep} for row in rerun] == [{k: row[k] for k in keep} for row in committed]


def test_checker_reads_a_dev_world_run_from_the_raw_train_rows(tmp_path):
    """A run on replay:routerbench-dev (its test half is raw train rows) is checked row by row, and a tampered
    cost is caught."""
    if not DATA.exists():
        pytest.skip(f"shared data not found at {DATA}")
    out = tmp_path / "dev"
    run_eval(EvalRequest(env="replay:routerbench-dev", policy=f"single:{GPT4}", out=out, limit=20, data_dir=DATA,
                         progress=False))
    result = _check(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "20/20" in result.stdout
    path = out / "decisions.csv"
    row = _rows(path)[0]
    path.write_text(path.read_text().replace(row["cost_usd"], str(float(row["cost_usd"]) * 3), 1))
    result = _check(out)
    assert result.returncode == 1 and "cost_usd" in result.stdout
