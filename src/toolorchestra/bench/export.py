"""`toolorchestra export-results`: copy eval runs' decisions and metrics into a results tree.

Layout: `<results>/<world>/<policy>/{decisions.csv, metrics.json}`, the policy name with ':' and '/'
written as '-' (e.g. `results/routerbench/orchestrator-smollm2-135m/`, `results/routerbench/cascade/`).
`--out` names the world dir itself when its last part is the world (`--out results/routerbench`);
otherwise the world's dir is made under it (`--out results` -> `results/routerbench/...`).

- One run of a policy: its decisions.csv and metrics.json are copied unchanged.
- Several runs of one policy under different preferences (orchestrator runs with different --prefer):
  one decisions.csv with the rows of every preference (in the order the runs were given), and a
  metrics.json `{"policy", "env", "split", "kind": "by_preference", "by_preference": {PREF: metrics}}`
  holding each run's metrics.json unchanged under its preference.
- A router sweep: each threshold is its own policy (`router-0.3/`), its metrics.json the sweep entry
  with the run's header (env, split, seed, ...).
An eval dir written before decisions.csv existed gets it rebuilt from its trajectories first
(`decisions.decisions_from_dir`). Two runs of the same policy and preference, or of different splits,
are refused. A policy's dir is rewritten whole on every export: pass all its preferences at once.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.bench.decisions import (
    COLUMNS,
    DECISIONS,
    decisions_file,
    decisions_from_dir,
    preference_name,
    read_decisions,
    safe_name,
    write_decisions,
)
from toolorchestra.bench.metrics_file import read_metrics
from toolorchestra.errors import UserError

METRICS = "metrics.json"


@dataclass
class Unit:
    """One policy under one preference, from one eval dir."""

    policy: str
    preference: str
    env: str
    split: str
    metrics: dict[str, Any]
    decisions: Path
    source: Path

    @property
    def world(self) -> str:
        from toolorchestra.envs.registry import world_of

        return world_of(self.env)


def load_units(eval_dir: Path) -> list[Unit]:
    """The policies an eval dir holds (a sweep: one per threshold), with their decisions files."""
    metrics_path = eval_dir / METRICS
    metrics = read_metrics(metrics_path)
    if "by_preference" in metrics:
        raise UserError(f"{eval_dir}: already an exported results dir (by_preference); export eval dirs")
    sweep = metrics.get("kind") == "sweep"
    if sweep:
        header = {key: value for key, value in metrics.items() if key not in ("sweep", "kind")}
        entries = [
            {**header, **entry, "policy": entry["policy"], "spec": metrics.get("spec")} for entry in metrics["sweep"]
        ]
    else:  # one policy's metrics (read_metrics allows no other shape)
        entries = [metrics]
    paths = [eval_dir / decisions_file(str(entry["policy"]), sweep) for entry in entries]
    if not all(path.exists() for path in paths):
        decisions_from_dir(eval_dir)
    return [
        Unit(
            policy=str(entry["policy"]),
            preference=preference_name(str(entry["policy"]), metrics.get("prefer")),
            env=str(metrics.get("env", "?")),
            split=str(metrics.get("split", "?")),
            metrics=entry,
            decisions=path,
            source=eval_dir,
        )
        for entry, path in zip(entries, paths, strict=True)
    ]


def export_results(eval_dirs: Sequence[Path], out: Path) -> dict[Path, list[Unit]]:
    """Write every policy of `eval_dirs` under `out`; returns each written dir with its units."""
    from toolorchestra.bench.report import find_metric_files

    try:
        metric_files = find_metric_files(eval_dirs)
    except UserError as exc:
        raise UserError(str(exc).replace("report:", "export-results:", 1)) from None
    groups: dict[Path, list[Unit]] = {}
    for metrics_path in metric_files:
        for unit in load_units(metrics_path.parent):
            target = (out if out.name == unit.world else out / unit.world) / safe_name(unit.policy)
            group = groups.setdefault(target, [])
            for other in group:
                if other.policy != unit.policy:
                    raise UserError(
                        f"policies {other.policy!r} ({other.source}) and {unit.policy!r} ({unit.source}) "
                        f"would share {target}"
                    )
                if other.split != unit.split:
                    raise UserError(
                        f"{unit.policy}: runs of split {other.split} ({other.source}) and {unit.split} "
                        f"({unit.source}); export one split at a time"
                    )
                if other.preference == unit.preference:
                    raise UserError(
                        f"{unit.policy}: two runs with preference {unit.preference!r} ({other.source} and "
                        f"{unit.source}); export one of them"
                    )
            group.append(unit)
    for target, units in groups.items():
        _write_policy(target, units)
    return groups


def _write_policy(target: Path, units: list[Unit]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    rows = []
    for unit in units:
        unit_rows = read_decisions(unit.decisions)
        wrong = sorted({row["preference"] for row in unit_rows} - {unit.preference})
        if wrong:
            raise UserError(
                f"{unit.decisions}: preference {wrong[0]!r} in its rows, but the run's is {unit.preference!r}"
            )
        if len(unit_rows) != unit.metrics.get("n"):
            raise UserError(
                f"{unit.decisions}: {len(unit_rows)} rows, metrics.json counts {unit.metrics.get('n')} "
                "tasks; rerun the same `toolorchestra eval` into the dir to rewrite it"
            )
        rows += unit_rows
    if len(units) == 1 and units[0].decisions.name == DECISIONS:
        shutil.copyfile(units[0].decisions, target / DECISIONS)
        shutil.copyfile(units[0].source / METRICS, target / METRICS)
        return
    write_decisions(target / DECISIONS, ({column: row[column] for column in COLUMNS} for row in rows))
    if len(units) == 1:
        metrics: dict[str, Any] = units[0].metrics
    else:
        first = units[0]
        metrics = {
            "policy": first.policy,
            "env": first.env,
            "split": first.split,
            "kind": "by_preference",
            "by_preference": {unit.preference: unit.metrics for unit in units},
        }
    (target / METRICS).write_text(json.dumps(metrics, indent=2) + "\n")
