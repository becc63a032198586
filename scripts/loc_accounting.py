"""Where the lines of src/toolorchestra came from since issue 25 was filed (453e928, 20,459 lines).

Issue 25 asks that the refactor remove more lines than it adds. Other issues landed on the same tree since
(26 hardening, 27 pool reading, 28 live HLE/FRAMES, 29 fast local inference), and the refactor itself asked
for `ruff format`, which rewraps lines without changing code. This script splits the growth three ways, from
git alone:

- format: the one commit that ran `ruff format` over src/ (and, as a check, what the formatter alone does to
  the 453e928 tree, formatted here in a temporary copy with today's pyproject.toml);
- refactor: the commits that carried out issue 25's items, and the later merges that cut lines for its LOC
  line (listed below by hash, with what each did; a merge counts as its diff against its first parent);
- other: everything else since 453e928 (features and fixes of other issues, and merge resolutions).

Lines are `wc -l` over src/toolorchestra/**/*.py, as the issue counted them.

    python scripts/loc_accounting.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILED_AT = "453e928"
FORMAT_COMMIT = "f9c2589"  # ruff format and lint over src/; make test runs them first
# Issue 25's own commits (item of the issue in brackets).
REFACTOR_COMMITS = {
    "79b722e": "predictors and per-subtask means move from scripts/ into bench/predictors.py [5]",
    "cdf13c3": "ruff lint clean on allowlisted modules [8]",
    "9f25d83": "toolscale actions <-> tools/tasks cycle broken [3]",
    "cd44438": "one episode engine, agent/engine.py [1]",
    "a663ae3": "no backends <-> train/envs cycles; backends registered by type [3]",
    "03c4826": "mypy clean on allowlisted modules [8]",
    "ae8d2c6": "eval executors as siblings over bench/rundir.py [3]",
    "be9a113": "lazy public API in toolorchestra/__init__.py [8]",
    "3797740": "recipe interface, train/recipes/ [2]",
    "7436636": "cli/main.py runs as python -m [8]",
    "448cc9e": "recipe.json beside each checkpoint [2]",
    "78e23b9": "ruff --fix on untouched modules [8]",
    "bccca70": "mypy fixes [8]",
    "b251134": "registry reads the ToolScale domain list from one place [1]",
    "5a8d6e9": "one draw_messages for every training episode's opening [1]",
    # 2026-11-27: behaviour-preserving cuts, one merge per area (a merge counts against its first parent)
    "36b3175": "backends/tools/serve: shared plumbing, forwarding wrappers and unused stats gone [LOC]",
    "b9b12c3": "train/integrations: shared padding, KV-cache and label scoring; tau2 verdict table [LOC]",
    "a520d46": "envs: one Drafter, every write tool through write_spec, replay helpers shared [LOC]",
    "29f4fe6": "bench/cli/agent/catalog/reward: forwarders gone, one table helper, one pool set-up [LOC]",
    "1066107": "OrchestratorPolicy settings as a typed functools.partial [LOC]",
    "cefc159": "backends/tools/train: shared snippet/answered/pick helpers, one cache_dir [LOC]",
    "ba2d183": "memory.py: return_freed_memory as a top-level leaf [LOC]",
    "e65842e": "toolscale: writes_on, Drafter.write, one TEXT schema, movie helpers [LOC]",
    "22bf2ab": "toolscale actions imported by name again, so the cycle test sees them [LOC]",
    "bcdb93b": "bench/cli: one ScriptedPolicy, shared report frontier, one --config model lookup [LOC]",
    "25efda3": "toolscale writes_on typed by a Protocol, so mypy checks write tools again [LOC]",
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def count_lines(root: Path) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in (root / "src" / "toolorchestra").rglob("*.py"))


def net_lines(commit: str) -> int:
    """Lines added minus removed under src/ (.py files) by one commit against its first parent."""
    net = 0
    for row in git("diff", "--numstat", f"{commit}^", commit, "--", "src/toolorchestra").splitlines():
        added, removed, path = row.split("\t", 2)
        if path.endswith(".py") and added != "-":
            net += int(added) - int(removed)
    return net


def formatted_baseline() -> int:
    """The 453e928 tree's line count after today's `ruff format` (same pyproject.toml settings)."""
    ruff = Path(sys.executable).parent / "ruff"
    with tempfile.TemporaryDirectory() as scratch:
        archive = subprocess.run(["git", "archive", FILED_AT, "src"], cwd=REPO, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
        (Path(scratch) / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
        subprocess.run([str(ruff), "format", "-q", "src"], cwd=scratch, check=True)
        return count_lines(Path(scratch))


def main() -> None:
    filed = sum(len(git("show", f"{FILED_AT}:{path}").splitlines()) for path in python_files_at(FILED_AT))
    now = count_lines(REPO)
    refactor = {commit: net_lines(commit) for commit in REFACTOR_COMMITS}
    formatting = net_lines(FORMAT_COMMIT)
    other = now - filed - formatting - sum(refactor.values())
    print(f"src/toolorchestra at {FILED_AT}: {filed} lines; now (working tree): {now} lines ({now - filed:+d})")
    print(f"  format commit {FORMAT_COMMIT}: {formatting:+d}")
    print(f"    (the formatter alone on the {FILED_AT} tree: {filed} -> {formatted_baseline()})")
    print(f"  refactor commits (issue 25), {len(refactor)}: {sum(refactor.values()):+d}")
    for commit, lines in refactor.items():
        print(f"    {commit} {lines:+5d}  {REFACTOR_COMMITS[commit]}")
    print(f"  other issues' commits and merges: {other:+d}")


def python_files_at(commit: str) -> list[str]:
    return [p for p in git("ls-tree", "-r", "--name-only", commit, "src/toolorchestra").split() if p.endswith(".py")]


if __name__ == "__main__":
    main()
