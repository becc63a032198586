"""`toolorchestra report`: tables, the Pareto and usage figures, and the HTML rendered by headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.bench.report import build_report, load_runs, pareto_front
from toolorchestra.errors import UserError

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
