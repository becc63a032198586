#!/usr/bin/env python3
"""Check decisions.csv files against the RAW third-party data, independently of toolorchestra's code.

    python scripts/check_decisions.py RESULTS_DIR [--data-dir ../shared/data]

RESULTS_DIR: an exported results tree (results/, results/routerbench/, one policy dir) or eval dirs
(`toolorchestra eval --out`). Every dir below it with a metrics.json is checked: its decisions.csv
(exported: rows of each preference; metrics.json a single run or `by_preference`), or for a router
sweep eval dir decisions-<policy>.csv per threshold.

Only the standard library reads the data (csv, json); nothing of toolorchestra is imported.

Per row:
- RouterBench: the task id `<sample_id>#<row key>` (row key: the CSV's unnamed first column) must be a
  row of `routerbench/<subset>_<split>.csv` with no empty score or cost cell; when `model` is set,
  `correct` must equal that model's raw 0/1 score (>= 0.5), and `cost_usd` must equal, recomputed from
  the raw `<model>|total_cost` cells:
  * with the eval dir's trajectories.jsonl beside it: the sum over every model call of the episode
    (tool steps with a model and no error; an answer step that adopted a consulted answer is no call) plus
    the recorded cost of the orchestrator's own turns;
  * without: for a one-call policy (single, random, cheapest, per-subtask, router, oracle) the raw cost
    of `model`; for others (cascade, reader, orchestrator) `cost_usd` must be at least that (other calls
    are not in decisions.csv) and is counted as not recomputed.
  A run with `price_scale` in its run.json (`eval --price-scale`, a model or its label) has that model's raw
  costs multiplied by its factor. A label must always name the same model; single:MODEL must be answered by MODEL.
- FRAMES: the task id is a question id of the split (odd ids test, even train); when `model` is set,
  `correct` must equal the raw grading of `frames/models/<model>.jsonl` (A = correct). Cost is priced
  from tokens by the env and is reported as recorded, not recomputed.
- A row whose `model` is empty (the policy answered itself): with trajectories.jsonl beside it, a final
  answer that is word for word the raw response of a model the episode called (a cascade passing an
  expert's reply on) must have that response's raw grade; otherwise its `correct` is not recomputed.
- A dev world (`replay:routerbench-dev`, `replay:frames-dev`): both of its splits are rows of the world's raw
  train split, checked as such.
Per preference: n, correct, accuracy, total cost, mean latency and per-subtask n/correct/cost (subtask
from the raw data) of the CSV must equal metrics.json's.

Prints a table per decisions file and preference: accuracy and cost from the CSV, recomputed from the
raw data (rows not recomputable taken from the CSV; n/a when none was), from metrics.json, and how many
rows had correct/cost recomputed. Exits 1 on any mismatch (listed below the table), 2 on bad input.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

COLUMNS = ["task_id", "preference", "label", "model", "correct", "cost_usd", "latency_s"]
ROUTERBENCH_SUBSETS = ("arc_challenge", "mbpp", "winogrande")
ONE_CALL = {"single", "random", "cheapest", "per-subtask", "router", "oracle"}
MAX_MESSAGES = 12  # per checked file


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


# --- raw data ----------------------------------------------------------------------------------
class RouterBenchRaw:
    world = "routerbench"

    def __init__(self, data_dir: Path, split: str) -> None:
        csv.field_size_limit(sys.maxsize)
        self.rows: dict[str, dict] = {}
        self.models: set[str] = set()
        for subset in ROUTERBENCH_SUBSETS:
            path = data_dir / "routerbench" / f"{subset}_{split}.csv"
            if not path.exists():
                raise SystemExit(usage_error(f"{path}: not found (--data-dir must hold routerbench/)"))
            with open(path, newline="", encoding="utf-8") as handle:
                reader = csv.DictReader(handle)
                columns = reader.fieldnames or []
                models = [c for c in columns if f"{c}|model_response" in columns and f"{c}|total_cost" in columns]
                self.models.update(models)
                for index, row in enumerate(reader):
                    key = (row.get("") or "").strip() or f"{subset}-{split}-{index}"
                    self.rows[f"{row['sample_id']}#{key}"] = {
                        "subtask": row.get("eval_name") or row["sample_id"].split(".")[0],
                        "score": {m: _number(row.get(m)) for m in models},
                        "cost": {m: _number(row.get(f"{m}|total_cost")) for m in models},
                        "response": {m: row.get(f"{m}|model_response") or "" for m in models},
                    }

    def subtask(self, task_id: str) -> str | None:
        return self.rows[task_id]["subtask"] if task_id in self.rows else None


class FramesRaw:
    world = "frames"

    def __init__(self, data_dir: Path, split: str) -> None:
        folder = data_dir / "frames"
        if not (folder / "questions.jsonl").exists():
            raise SystemExit(usage_error(f"{folder / 'questions.jsonl'}: not found (--data-dir must hold frames/)"))
        self.subtasks: dict[str, str | None] = {}
        for question in _jsonl(folder / "questions.jsonl"):
            number = int(question["id"])
            if (number % 2 == 1) == (split == "test"):
                types = [p.strip() for p in str(question.get("reasoning_type", "")).split("|") if p.strip()]
                self.subtasks[str(number)] = types[0] if types else None
        self.grading: dict[str, dict[str, str | None]] = {}
        self.response: dict[str, dict[str, str]] = {}
        for path in sorted((folder / "models").glob("*.jsonl")):
            rows = _jsonl(path)
            self.grading[path.stem] = {str(int(row["id"])): row.get("grading") for row in rows}
            self.response[path.stem] = {str(int(row["id"])): str(row.get("response") or "") for row in rows}

    def subtask(self, task_id: str) -> str | None:
        return self.subtasks.get(task_id)


def _number(cell: str | None) -> float | None:
    if cell is None or not cell.strip():
        return None
    return float(cell)


def _unwrap(cell: str) -> str:
    """A response cell is a Python list literal of strings, e.g. "['B\\n']"; other cells as they are."""
    try:
        value = ast.literal_eval(cell)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return cell
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        return "\n".join(value)
    return cell


def _same_text(a: str, b: str) -> bool:
    return a.split() == b.split()


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def usage_error(message: str) -> str:
    return f"check_decisions: {message}"


# --- what to check ------------------------------------------------------------------------------
def preference_of(policy: str, prefer: str | None) -> str:
    """The preference cell of a run (docs: --prefer, else default for an orchestrator, none for a baseline)."""
    if prefer:
        return str(prefer)
    return "default" if policy.startswith("orchestrator:") else "none"


def safe(policy: str) -> str:
    return policy.replace(":", "-").replace("/", "-")


def targets(metrics_path: Path) -> list[dict]:
    """(decisions file, policy, env, split, {preference: metrics entry}, price factors) of one metrics.json."""
    folder = metrics_path.parent
    run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else {}
    factors = {str(model): float(factor) for model, factor in (run.get("price_scale") or {}).items()}
    return [{**target, "price_scale": factors} for target in _targets(metrics_path)]


def _targets(metrics_path: Path) -> list[dict]:
    metrics = json.loads(metrics_path.read_text())
    folder = metrics_path.parent
    if "by_preference" in metrics:
        entries = metrics["by_preference"]
        return [{"path": folder / "decisions.csv", "policy": str(metrics["policy"]), "env": metrics.get("env"),
                 "split": metrics.get("split"), "expected": entries}]
    if metrics.get("kind") == "sweep":
        return [{"path": folder / f"decisions-{safe(entry['policy'])}.csv", "policy": entry["policy"],
                 "env": metrics.get("env"), "split": metrics.get("split"),
                 "expected": {preference_of(entry["policy"], metrics.get("prefer")): entry}}
                for entry in metrics["sweep"]]
    policy = str(metrics["policy"])
    return [{"path": folder / "decisions.csv", "policy": policy, "env": metrics.get("env"),
             "split": metrics.get("split"), "expected": {preference_of(policy, metrics.get("prefer")): metrics}}]


def episode_calls(folder: Path, policy: str) -> dict[str, dict] | None:
    """task id -> the first saved trajectory of `policy` (its steps and final answer), when
    trajectories.jsonl is there."""
    path = folder / "trajectories.jsonl"
    if not path.exists():
        return None
    episodes: dict[str, dict] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill
            if record.get("policy") == policy:
                episodes.setdefault(record["task_id"], record)
    return episodes


# --- the check -----------------------------------------------------------------------------------
class Checker:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._raw: dict[tuple[str, str], object] = {}
        self.factors: dict[str, float] = {}

    def raw(self, env: str, split: str):
        world = str(env).split(":", 1)[-1]
        world = {"frames-typed": "frames"}.get(world, world)  # the same records, the type shown to the orchestrator
        dev = re.fullmatch(r"(routerbench|frames)-dev\d*", world)
        if dev:  # a dev world (any seed): both its splits are halves of the train split
            world, split = dev.group(1), "train"
        key = (world, split)
        if key not in self._raw:
            if world == "routerbench":
                self._raw[key] = RouterBenchRaw(self.data_dir, split)
            elif world == "frames":
                self._raw[key] = FramesRaw(self.data_dir, split)
            else:
                self._raw[key] = None
        return self._raw[key]

    def check(self, target: dict) -> tuple[list[dict], list[str]]:
        """Table rows (one per preference, with a status) and the problems found."""
        path: Path = target["path"]
        policy: str = target["policy"]
        problems: list[str] = []
        if not path.exists():
            return [], [f"{path}: missing"]
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames != COLUMNS:
                return [], [f"{path}: columns {reader.fieldnames}, expected {COLUMNS}"]
            rows = list(reader)
        raw = self.raw(target["env"], target["split"])
        if raw is None:
            problems.append(f"{path}: env {target['env']!r} has no raw-data check (only routerbench and frames)")
        calls = episode_calls(path.parent, policy) if raw is not None else None
        kind, _, argument = policy.partition(":")
        by_preference: dict[str, list[dict]] = defaultdict(list)
        seen: set[tuple[str, str]] = set()
        votes: dict[str, Counter] = defaultdict(Counter)
        for row in rows:
            if row.get("label") and row.get("model"):
                votes[row["label"]][row["model"]] += 1
        label_model = {label: counter.most_common(1)[0][0] for label, counter in votes.items()}
        # --price-scale names a model or its label: each model's raw costs times its factor
        self.factors = {label_model.get(name, name): factor for name, factor in target.get("price_scale", {}).items()}
        flagged: set[str] = set()
        for number, row in enumerate(rows, 2):
            before = len(problems)
            self._row(raw, row, number, path, kind, argument, calls, seen, label_model, by_preference, problems)
            if len(problems) > before:
                flagged.add(row["preference"])
        expected = target["expected"]
        for preference in sorted(set(by_preference) - set(expected)):
            problems.append(f"{path.name}: preference {preference!r} has rows but no metrics in metrics.json")
            flagged.add("*")
        table = []
        for preference, entry in expected.items():
            before = len(problems)
            row = self._totals(path, policy, preference, by_preference.get(preference, []), entry, problems)
            row["status"] = "MISMATCH" if len(problems) > before or preference in flagged or "*" in flagged else "ok"
            table.append(row)
        return table, problems

    def _row(self, raw, row: dict, number: int, path: Path, kind: str, argument: str, calls: dict | None,
             seen: set, label_model: dict, by_preference: dict, problems: list[str]) -> None:
        where = f"{path.name}:{number} {row['task_id']}"
        key = (row["task_id"], row["preference"])
        if key in seen:
            problems.append(f"{where}: duplicate row for preference {row['preference']!r}")
        seen.add(key)
        try:
            correct = {"1": True, "0": False}[row["correct"]]
            cost, latency = float(row["cost_usd"]), float(row["latency_s"])
        except (KeyError, ValueError):
            problems.append(f"{where}: correct must be 0/1 and cost_usd, latency_s numbers: {row}")
            return
        model, label = row["model"], row["label"]
        if label and model and label_model[label] != model:
            problems.append(f"{where}: label {label!r} names {model}, in most rows {label_model[label]}")
        if kind == "single" and model != argument:
            problems.append(f"{where}: single:{argument} answered by {model or 'nobody'}")
        checked = {"row": row, "correct": correct, "cost": cost, "latency": latency,
                   "raw_correct": None, "raw_cost": None, "subtask": raw.subtask(row["task_id"]) if raw else None}
        if isinstance(raw, RouterBenchRaw):
            self._routerbench_row(raw, checked, kind, calls, where, problems)
        elif isinstance(raw, FramesRaw):
            self._frames_row(raw, checked, calls, where, problems)
        by_preference[row["preference"]].append(checked)

    def _routerbench_row(self, raw: RouterBenchRaw, checked: dict, kind: str, calls: dict | None, where: str,
                         problems: list[str]) -> None:
        task_id, model = checked["row"]["task_id"], checked["row"]["model"]
        record = raw.rows.get(task_id)
        if record is None:
            problems.append(f"{where}: no such row in the raw routerbench CSVs of this split")
            return
        if any(value is None for value in (*record["score"].values(), *record["cost"].values())):
            problems.append(f"{where}: its raw row has empty score/cost cells (such rows are left out)")
            return
        if model:
            if model not in raw.models:
                problems.append(f"{where}: model {model!r} is not a RouterBench model")
                return
            checked["raw_correct"] = record["score"][model] >= 0.5
            if checked["raw_correct"] != checked["correct"]:
                problems.append(f"{where}: correct={int(checked['correct'])} but the raw score of {model} is "
                                f"{record['score'][model]:g}")
        if calls is not None:
            episode = calls.get(task_id)
            if episode is None:
                problems.append(f"{where}: not in trajectories.jsonl beside it")
                return
            steps = episode.get("steps") or []
            if not model and episode.get("final_answer") is not None:
                self._passed_on({m: (_unwrap(record["response"][m]), record["score"][m] >= 0.5)
                                 for m in record["response"]},
                                episode, checked, where, problems)
            total = 0.0
            for step in steps:
                if (step.get("meta") or {}).get("adopted"):
                    continue  # an answer call that adopted an answer already consulted: no second model call
                if step.get("kind") == "tool" and step.get("model") and not step.get("error"):
                    if step["model"] not in record["cost"]:
                        problems.append(f"{where}: a call of unknown model {step['model']!r}")
                        return
                    total += record["cost"][step["model"]] * self.factors.get(step["model"], 1.0)
                elif step.get("kind") != "tool":
                    total += float(step.get("cost_usd") or 0.0)  # the orchestrator's own turns: as recorded
            checked["raw_cost"] = total
        elif kind in ONE_CALL:
            if not model:
                problems.append(f"{where}: {kind} answers with one model call, but no model is named")
                return
            checked["raw_cost"] = record["cost"][model] * self.factors.get(model, 1.0)
        elif model and checked["cost"] < record["cost"][model] * self.factors.get(model, 1.0) - 1e-9:
            problems.append(f"{where}: cost_usd {checked['cost']!r} is below the raw cost "
                            f"{record['cost'][model] * self.factors.get(model, 1.0)!r} of its answer call ({model})")
        if checked["raw_cost"] is not None and not close(checked["raw_cost"], checked["cost"]):
            problems.append(f"{where}: cost_usd {checked['cost']!r}, raw {checked['raw_cost']!r}")

    def _passed_on(self, answers: dict[str, tuple[str, bool]], episode: dict, checked: dict, where: str,
                   problems: list[str]) -> None:
        """A final answer given as text that is, word for word, the raw response of a model the episode
        called (a cascade passing an expert's reply on): its grade is that model's raw grade.
        `answers`: model -> (raw response, raw grade) of the task."""
        called = {step["model"] for step in episode.get("steps") or []
                  if step.get("kind") == "tool" and step.get("model")}
        scores = {answers[m][1] for m in called & set(answers) if _same_text(answers[m][0], episode["final_answer"])}
        if len(scores) == 1:
            checked["raw_correct"] = scores.pop()
            if checked["raw_correct"] != checked["correct"]:
                problems.append(f"{where}: correct={int(checked['correct'])} but the answer passed on is a raw "
                                f"response graded {int(checked['raw_correct'])}")

    def _frames_row(self, raw: FramesRaw, checked: dict, calls: dict | None, where: str,
                    problems: list[str]) -> None:
        task_id, model = checked["row"]["task_id"], checked["row"]["model"]
        if task_id not in raw.subtasks:
            problems.append(f"{where}: not a FRAMES question of this split")
            return
        if model:
            grading = raw.grading.get(model, {})
            if task_id not in grading:
                problems.append(f"{where}: no raw answer of {model!r} (frames/models/{model}.jsonl)")
                return
            checked["raw_correct"] = grading[task_id] == "A"
            if checked["raw_correct"] != checked["correct"]:
                problems.append(f"{where}: correct={int(checked['correct'])} but {model}'s raw grading is "
                                f"{grading[task_id]!r}")
        elif calls is not None and task_id in calls and calls[task_id].get("final_answer") is not None:
            answers = {m: (raw.response[m].get(task_id, ""), raw.grading[m].get(task_id) == "A") for m in raw.grading}
            self._passed_on(answers, calls[task_id], checked, where, problems)

    def _totals(self, path: Path, policy: str, preference: str, checked: list[dict], entry: dict,
                problems: list[str]) -> dict:
        n = len(checked)
        correct = sum(c["correct"] for c in checked)
        raw_correct = sum(c["raw_correct"] if c["raw_correct"] is not None else c["correct"] for c in checked)
        cost = sum(c["cost"] for c in checked)
        raw_cost = sum(c["raw_cost"] if c["raw_cost"] is not None else c["cost"] for c in checked)
        latency = sum(c["latency"] for c in checked) / n if n else 0.0
        where = f"{path.name} [{preference}]"
        metric_latency = float((entry.get("latency_s") or {}).get("mean", 0.0))
        pairs = (("n", n, entry.get("n")), ("correct", correct, entry.get("correct")),
                 ("accuracy", correct / n if n else 0.0, entry.get("accuracy")),
                 ("cost_usd", cost, entry.get("cost_usd")), ("latency mean", latency, metric_latency))
        for name, ours, theirs in pairs:
            if theirs is None or not close(float(ours), float(theirs)):
                problems.append(f"{where}: {name} {ours!r} from decisions.csv, {theirs!r} in metrics.json")
        if any(c["subtask"] is not None for c in checked) or entry.get("per_subtask"):
            groups: dict[str, list[dict]] = defaultdict(list)
            for c in checked:
                groups[str(c["subtask"] or "all")].append(c)
            reported = entry.get("per_subtask") or {}
            for name in sorted(set(groups) | set(reported)):
                members, theirs = groups.get(name, []), reported.get(name, {})
                ours = (len(members), sum(c["correct"] for c in members), sum(c["cost"] for c in members))
                in_metrics = (theirs.get("n"), theirs.get("correct"), theirs.get("cost_usd"))
                if in_metrics[:2] != ours[:2] or not close(ours[2], float(theirs.get("cost_usd", -1))):
                    problems.append(f"{where}: subtask {name} (n, correct, cost) {ours} from decisions.csv with raw "
                                    f"subtasks, metrics.json {in_metrics}")
        verified_correct = sum(c["raw_correct"] is not None for c in checked)
        verified_cost = sum(c["raw_cost"] is not None for c in checked)
        # "raw": recomputed rows from the raw data, the others as in the CSV; n/a when no row was recomputed
        return {"file": str(path), "policy": policy, "preference": preference, "n": n,
                "acc csv": correct / n if n else 0.0,
                "acc raw": raw_correct / n if n and verified_correct else None,
                "acc metrics": entry.get("accuracy"), "cost csv": cost,
                "cost raw": raw_cost if verified_cost else None, "cost metrics": entry.get("cost_usd"),
                "verified": f"{verified_correct}/{verified_cost}"}


def print_table(rows: list[dict], root: Path) -> None:
    header = ["decisions", "preference", "n", "acc csv", "acc raw", "acc metrics", "cost csv $", "cost raw $",
              "cost metrics $", "raw-checked correct/cost", "status"]
    lines = []
    for row in rows:
        def money(value):
            return "n/a" if value is None else f"{value:.6f}"

        def share(value):
            return "n/a" if value is None else f"{value:.4f}"
        lines.append([os.path.relpath(row["file"], root), row["preference"], str(row["n"]), share(row["acc csv"]),
                      share(row["acc raw"]), share(row["acc metrics"]),
                      money(row["cost csv"]), money(row["cost raw"]), money(row["cost metrics"]), row["verified"],
                      row["status"]])
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    for cells in [header, ["-" * w for w in widths], *lines]:
        print("  ".join(cell.ljust(width) for cell, width in zip(cells, widths)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", type=Path, help="results tree, policy dir, or eval dir(s) below it")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("TOOLORCHESTRA_DATA", "../shared/data")),
                        help="the shared data dir (default: $TOOLORCHESTRA_DATA or ../shared/data)")
    args = parser.parse_args(argv)
    if not args.results_dir.is_dir():
        print(usage_error(f"{args.results_dir}: not a directory"), file=sys.stderr)
        return 2
    if not args.data_dir.is_dir():
        print(usage_error(f"--data-dir {args.data_dir}: not a directory"), file=sys.stderr)
        return 2
    metrics_files = sorted(Path(folder) / "metrics.json" for folder, _, files in os.walk(args.results_dir)
                           if "metrics.json" in files)
    if not metrics_files:
        print(usage_error(f"{args.results_dir}: no metrics.json below it"), file=sys.stderr)
        return 2
    checker = Checker(args.data_dir)
    table, all_problems = [], []
    for metrics_path in metrics_files:
        try:
            found = targets(metrics_path)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            all_problems.append(f"{metrics_path}: unreadable metrics ({exc.__class__.__name__}: {exc})")
            continue
        for target in found:
            rows, problems = checker.check(target)
            if not rows and problems:
                table.append({"file": str(target["path"]), "policy": target["policy"], "preference": "?", "n": 0,
                              "acc csv": 0.0, "acc raw": 0.0, "acc metrics": None, "cost csv": None,
                              "cost raw": None, "cost metrics": None, "verified": "", "status": "MISMATCH"})
            table += rows
            all_problems += [f"{target['policy']}: {p}" for p in problems[:MAX_MESSAGES]]
            if len(problems) > MAX_MESSAGES:
                all_problems.append(f"{target['policy']}: ... and {len(problems) - MAX_MESSAGES} more")
    print_table(table, args.results_dir)
    if all_problems:
        print(f"\nMISMATCH ({len(all_problems)} problem lines):")
        for problem in all_problems:
            print(f"  {problem}")
        return 1
    print(f"\nOK: {len(table)} decisions x preference checked against the raw data and metrics.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
