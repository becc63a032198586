"""`toolorchestra report`: tables, the Pareto and usage figures, and the HTML rendered by headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.bench.export import export_results
from toolorchestra.bench.report import _draw_group, build_report, load_runs, pareto_front, preference_groups
from toolorchestra.errors import UserError

sys.path.insert(0, str(Path(__file__).parent))
from _scripted_orchestrator import POLICY, scripted_orchestrator_runs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = (REPO / ".." / "shared" / "data").resolve()
TOOLORCHESTRA = Path(sys.executable).parent / "toolorchestra"
POLICIES = ("single:gpt-4-1106-preview", "single:mistralai/mixtral-8x7b-chat", "cheapest", "cascade", "oracle", "router")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    if not DATA.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the shared data beside the repo at {DATA}")
        pytest.skip(f"shared data not found at {DATA}")
    root = tmp_path_factory.mktemp("runs")
    for policy in POLICIES:
        run_eval(EvalRequest(env="replay:routerbench", policy=policy, out=root / policy.replace(":", "_").replace("/", "_"),
                             limit=150, data_dir=DATA, progress=False))
    return root


def test_pareto_front():
    points = [(1.0, 0.5), (2.0, 0.4), (2.0, 0.7), (0.5, 0.2), (3.0, 0.7), (4.0, 0.9)]
    assert pareto_front(points) == [3, 0, 2, 5]


def test_report_tables_and_figures(runs, tmp_path):
    written = build_report([runs], tmp_path / "report")
    loaded = load_runs([runs])
    assert len([run for run in loaded if run.kind == "sweep"]) == 13
    markdown = written["markdown"].read_text()
    for policy in POLICIES[:-1]:
        assert f"| {policy} | replay:routerbench / test | 150 |" in markdown
    assert "| router:0.3 |" in markdown and "![accuracy vs cost](pareto.png)" in markdown
    assert "arc-challenge" in markdown and "winogrande" in markdown
    for figure in ("pareto", "usage"):
        assert written[figure].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written[figure].stat().st_size > 20_000
    html = written["html"].read_text()
    assert html.count("data:image/png;base64,") == 2 and '<table id="comparison">' in html
    assert "Preference adherence" not in markdown and "preferences" not in written  # no orchestrator runs


@pytest.fixture(scope="module")
def preference_runs(runs, tmp_path_factory) -> dict[str, Path]:
    """SYNTHETIC orchestrator runs: a scripted orchestrator (tests/_scripted_orchestrator.py) evaluated with
    --prefer accuracy (answer(model=gpt-4)) and --prefer cost (mistral-7b's reply passed on)."""
    return scripted_orchestrator_runs(DATA, tmp_path_factory.mktemp("preferences"), limit=40)


def _metrics(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def test_preference_adherence_section_synthetic_scripted_orchestrator(runs, preference_runs, tmp_path):
    written = build_report([runs, *preference_runs.values()], tmp_path / "report")
    markdown = written["markdown"].read_text()
    accuracy, cost = _metrics(preference_runs["accuracy"]), _metrics(preference_runs["cost"])
    assert f"| {POLICY} [accuracy] | replay:routerbench / test | 40 |" in markdown
    assert f"| {POLICY} [cost] | replay:routerbench / test | 40 |" in markdown
    section = markdown.split("## Preference adherence", 1)[1]
    assert f"### {POLICY} on replay:routerbench / test" in section
    assert (f"| accuracy | 40 | {accuracy['accuracy']:.4f} | {accuracy['cost_usd']:.4f} | "
            f"{accuracy['cost_per_task_usd']:.6f} | {accuracy['latency_s']['mean']:.2f} | yes (highest accuracy) | "
            "gpt-4-1106-preview 40 (100%) |") in section
    assert (f"| cost | 40 | {cost['accuracy']:.4f} | {cost['cost_usd']:.4f} | {cost['cost_per_task_usd']:.6f} | "
            f"{cost['latency_s']['mean']:.2f} | yes (lowest $ / task) | orchestrator itself 40 (100%) |") in section
    per_subtask = section.split("Per subtask:", 1)[1].split("![", 1)[0].strip().splitlines()
    assert per_subtask[0] == ("| preference | arc-challenge accuracy (n) | arc-challenge cost $ | mbpp accuracy (n) | "
                              "mbpp cost $ | winogrande accuracy (n) | winogrande cost $ |")
    for line, metrics in zip(per_subtask[2:], (accuracy, cost), strict=True):
        cells = [f"{entry['accuracy']:.3f} ({entry['n']}) | {entry['cost_usd']:.4f}"
                 for _, entry in sorted(metrics["per_subtask"].items())]
        assert line == f"| {metrics['prefer']} | " + " | ".join(cells) + " |"
    assert "![preference adherence](preferences.png)" in section
    figure = written["preferences"]
    assert figure.name == "preferences.png" and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figure.stat().st_size > 20_000
    html = written["html"].read_text()
    assert html.count("data:image/png;base64,") == 3 and '<img id="preferences"' in html
    assert '<table id="preferences-0">' in html and '<table id="preference-subtasks-0">' in html
    # a report without the orchestrator runs in the same dir drops the stale figure
    again = build_report([runs], tmp_path / "report")
    assert "preferences" not in again and not (tmp_path / "report" / "preferences.png").exists()


def test_pareto_tells_preferences_apart_synthetic_scripted_orchestrator(runs, preference_runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loaded = load_runs([runs, *preference_runs.values()])
    figure, axis = plt.subplots()
    _draw_group(axis, loaded)
    labels = [text.get_text() for text in axis.get_legend().get_texts()]
    assert f"{POLICY} [accuracy] (n=40)" in labels and f"{POLICY} [cost] (n=40)" in labels
    colors = {collection.get_label(): tuple(collection.get_facecolor()[0]) for collection in axis.collections}
    assert colors[f"{POLICY} [accuracy] (n=40)"] != colors[f"{POLICY} [cost] (n=40)"]
    assert {"prefer accuracy", "prefer cost"} <= {text.get_text() for text in axis.texts}
    plt.close(figure)


def test_report_reads_exported_results_synthetic_scripted_orchestrator(runs, preference_runs, tmp_path):
    export_results([runs / "cascade", *preference_runs.values()], tmp_path / "results")
    exported = load_runs([tmp_path / "results" / "routerbench"])
    groups = preference_groups(exported)
    assert len(groups) == 1 and [run.preference_label for run in groups[0].runs] == ["accuracy", "cost"]
    direct = preference_groups(load_runs(list(preference_runs.values())))
    assert [run.metrics for run in groups[0].runs] == [run.metrics for run in direct[0].runs]
    markdown = build_report([tmp_path / "results" / "routerbench"], tmp_path / "report")["markdown"].read_text()
    assert "## Preference adherence" in markdown and "| cascade | replay:routerbench / test | 150 |" in markdown


def test_exported_router_points_are_read_as_one_sweep_of_their_results_dir(runs, tmp_path):
    """An exported results dir holds one dir per router threshold (results/<world>/router-T/): the report draws
    them as one sweep (one line, one legend entry) instead of 13 baselines, and keeps every other policy's kind."""
    export_results([runs / "router", runs / "cascade", runs / "single_gpt-4-1106-preview"], tmp_path / "results")
    loaded = load_runs([tmp_path / "results" / "routerbench"])
    routers = [run for run in loaded if run.policy.startswith("router:")]
    assert len(routers) == 13 and {run.kind for run in routers} == {"sweep"}
    assert len({(run.sweep, run.extra["sweep_key"]) for run in routers}) == 1
    assert {run.kind for run in loaded if run.policy == "cascade"} == {"baseline"}
    assert {run.kind for run in loaded if run.policy.startswith("single:")} == {"single"}


def test_report_cli_and_missing_input(runs, tmp_path):
    result = subprocess.run([str(TOOLORCHESTRA), "report", str(runs / "oracle"), str(runs / "cascade"),
                             "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "| oracle |" in (tmp_path / "two" / "report.md").read_text()
    missing = subprocess.run([str(TOOLORCHESTRA), "report", str(tmp_path / "nothing"), "--out", str(tmp_path / "r")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "metrics.json" in missing.stderr and "Traceback" not in missing.stderr
    with pytest.raises(UserError, match="no metrics.json"):
        load_runs([tmp_path / "two"])


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium (scripts/ensure_chromium.sh installs it)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); the HTML rendering check needs it")
    return found


def test_html_renders_table_and_images_in_headless_chromium(runs, tmp_path):
    chromium = _chromium()
    written = build_report([runs], tmp_path / "report")
    # The probe writes what the browser actually rendered into the DOM once everything has loaded.
    probe = ("<script>window.addEventListener('load', () => {"
             "const images = [...document.images].map(i => i.complete ? i.naturalWidth + 'x' + i.naturalHeight : 'x');"
             "document.body.setAttribute('data-images', images.join(','));"
             "document.body.setAttribute('data-rows', document.querySelectorAll('#comparison tbody tr').length);"
             "});</script></body>")
    page = tmp_path / "probe.html"
    page.write_text(written["html"].read_text().replace("</body>", probe))
    result = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    images = re.search(r'data-images="([^"]*)"', dom)
    rows = re.search(r'data-rows="(\d+)"', dom)
    assert images and rows, dom[:500]
    sizes = [tuple(int(v) for v in size.split("x")) for size in images.group(1).split(",")]
    assert len(sizes) == 2 and all(width > 500 and height > 200 for width, height in sizes)
    assert int(rows.group(1)) == len(POLICIES) - 1
    assert "single:gpt-4-1106-preview" in dom


def test_reader_runs_are_named_and_grouped_by_their_preference():
    from toolorchestra.bench.report import Run

    made = [Run(policy="reader", env="replay:routerbench", split="test", metrics={"prefer": prefer, "n": 10},
                source=Path(prefer)) for prefer in ("accuracy", "cost")]
    assert [run.kind for run in made] == ["orchestrator", "orchestrator"]
    assert [run.display for run in made] == ["reader [accuracy]", "reader [cost]"]
    assert [run.preference_label for run in preference_groups(made)[0].runs] == ["accuracy", "cost"]
