"""`toolorchestra report`: compare eval runs in Markdown and HTML, with a Pareto plot and a usage chart.

Input: eval output dirs (each with metrics.json), or dirs that contain such dirs. Output dir:
- report.md: comparison table, per-subtask accuracy, router sweep table, the two figures by file name;
- report.html: the same, self-contained (figures embedded as PNG data URIs);
- pareto.png: accuracy vs dollars per task (log scale), one panel per env/split; every run a point,
  a sweep a curve, the oracle a star, the non-dominated frontier dashed (a free run, e.g. a local
  orchestrator that answered itself, is drawn left of the cheapest paid run and marked $0);
- usage.png: calls per task by model and by tool for each run.
matplotlib (Agg) is imported only when the figures are drawn.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from toolorchestra.errors import UserError

ZERO_COST_SHIFT = 4.0  # free runs are drawn this many times left of the cheapest paid run (log axis)


@dataclass
class Run:
    """One policy's metrics (a sweep contributes one Run per point, sharing `sweep`)."""

    policy: str
    env: str
    split: str
    metrics: dict[str, Any]
    source: Path
    sweep: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        return f"{self.env} / {self.split}"

    @property
    def kind(self) -> str:
        if self.sweep:
            return "sweep"
        head = self.policy.split(":", 1)[0]
        return head if head in ("single", "oracle", "orchestrator") else "baseline"

    @property
    def accuracy(self) -> float:
        return float(self.metrics["accuracy"])

    @property
    def cost_per_task(self) -> float:
        return float(self.metrics["cost_per_task_usd"])


def find_metric_files(paths: Sequence[Path]) -> list[Path]:
    """metrics.json of each dir, or of each dir one level below a dir that has none."""
    found: list[Path] = []
    for path in paths:
        if path.is_file() and path.name == "metrics.json":
            found.append(path)
        elif (path / "metrics.json").is_file():
            found.append(path / "metrics.json")
        elif path.is_dir():
            found.extend(sorted(child / "metrics.json" for child in path.iterdir() if (child / "metrics.json").is_file()))
        else:
            raise UserError(f"report: {path} is not a directory with metrics.json (run `toolorchestra eval` first)")
    if not found:
        raise UserError(f"report: no metrics.json found in {', '.join(str(p) for p in paths)}")
    return found


def load_runs(paths: Sequence[Path]) -> list[Run]:
    runs: list[Run] = []
    for metrics_path in find_metric_files(paths):
        try:
            metrics = json.loads(metrics_path.read_text())
        except json.JSONDecodeError as exc:
            raise UserError(f"{metrics_path}: not valid JSON: {exc}") from None
        env, split = str(metrics.get("env", "?")), str(metrics.get("split", "?"))
        if metrics.get("kind") == "sweep":
            for entry in metrics["sweep"]:
                runs.append(Run(entry["policy"], env, split, entry, metrics_path.parent, sweep=str(metrics.get("spec"))))
        elif "accuracy" in metrics:
            runs.append(Run(str(metrics["policy"]), env, split, metrics, metrics_path.parent))
        else:
            raise UserError(f"{metrics_path}: expected eval metrics (accuracy, cost_usd, ...) or a sweep")
    return runs


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both cost (lower) and accuracy (higher), by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -1.0
    for index in order:
        if points[index][1] > best:
            front.append(index)
            best = points[index][1]
    return front


def build_report(paths: Sequence[Path], out: Path) -> dict[str, Path]:
    runs = load_runs(paths)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"pareto": out / "pareto.png", "usage": out / "usage.png"}
    plot_pareto(runs, figures["pareto"])
    plot_usage(runs, figures["usage"])
    on_front = _frontier_members(runs)
    (out / "report.md").write_text(render_markdown(runs, on_front, figures), encoding="utf-8")
    (out / "report.html").write_text(render_html(runs, on_front, figures), encoding="utf-8")
    return {"markdown": out / "report.md", "html": out / "report.html", **figures}


def _groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    return groups


def _frontier_members(runs: Sequence[Run]) -> set[int]:
    """ids of the runs on their group's accuracy-vs-cost frontier (the oracle excluded)."""
    members: set[int] = set()
    for group in _groups(runs).values():
        candidates = [run for run in group if run.kind != "oracle"]
        points = [(run.cost_per_task, run.accuracy) for run in candidates]
        members.update(id(candidates[i]) for i in pareto_front(points))
    return members


def _zero_cost_x(group: Sequence[Run]) -> float:
    """Where a free run is drawn on the log axis: left of the cheapest paid run."""
    paid = [run.cost_per_task for run in group if run.cost_per_task > 0]
    return (min(paid) if paid else 1e-6) / ZERO_COST_SHIFT


# --- figures -----------------------------------------------------------------------------------
_STYLE = {
    "baseline": {"marker": "s", "s": 60},
    "orchestrator": {"marker": "D", "s": 80, "color": "tab:red"},
    "oracle": {"marker": "*", "s": 260, "color": "gold", "edgecolors": "black", "linewidths": 0.8},
    "single": {"marker": "o", "s": 36, "color": "0.55"},
}


def plot_pareto(runs: Sequence[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(runs)
    figure, axes = plt.subplots(1, len(groups), figsize=(9.5 * len(groups), 6.5), squeeze=False)
    for axis, (name, group) in zip(axes[0], groups.items()):
        _draw_group(axis, group)
        axis.set_title(f"Accuracy vs cost: {name}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _draw_group(axis: Any, group: Sequence[Run]) -> None:
    baseline_colors = iter(["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:cyan", "tab:olive", "tab:pink"])
    zero = _zero_cost_x(group)

    def cost_x(run: Run) -> float:
        return run.cost_per_task if run.cost_per_task > 0 else zero

    for run in group:
        x = cost_x(run)
        if run.cost_per_task <= 0:
            axis.annotate("$0", (x, run.accuracy), fontsize=8, xytext=(-14, -12), textcoords="offset points")
        if run.kind == "sweep":
            continue
        style = dict(_STYLE[run.kind])
        if run.kind == "baseline":
            style["color"] = next(baseline_colors, "tab:gray")
        label = {"single": None, "oracle": "oracle (upper bound)"}.get(run.kind, f"{run.policy} (n={run.metrics['n']})")
        axis.scatter([x], [run.accuracy], label=label, zorder=3, **style)
        if run.kind == "single":
            axis.annotate(_short(run.policy.split(":", 1)[1]), (x, run.accuracy), fontsize=7, xytext=(4, 3),
                          textcoords="offset points", color="0.3")
    sweeps: dict[str, list[Run]] = {}
    for run in group:
        if run.kind == "sweep":
            sweeps.setdefault(f"{run.sweep}@{run.source}", []).append(run)
    for key, points in sweeps.items():
        points.sort(key=lambda run: run.cost_per_task)
        axis.plot([cost_x(p) for p in points], [p.accuracy for p in points], "-^",
                  color="tab:orange", markersize=5, label=f"{points[0].sweep} sweep (n={points[0].metrics['n']})",
                  zorder=2)
    candidates = [run for run in group if run.kind != "oracle"]
    front = [candidates[i] for i in pareto_front([(r.cost_per_task, r.accuracy) for r in candidates])]
    if len(front) > 1:
        axis.step([cost_x(r) for r in front], [r.accuracy for r in front], where="post",
                  linestyle="--", color="0.4", linewidth=1, label="Pareto frontier", zorder=1)
    axis.scatter([], [], label="single models", **_STYLE["single"])
    axis.set_xscale("log")
    axis.set_xlabel("dollars per task (log scale)")
    axis.set_ylabel("accuracy")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")


def _short(model: str) -> str:
    return model.rsplit("/", 1)[-1].replace("-chat", "").replace("-instruct", "")[:28]


def plot_usage(runs: Sequence[Run], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [run for run in runs if run.kind != "sweep"] or list(runs)
    names = [f"{run.policy} [{run.env.split(':')[-1]}]" for run in shown]
    models = sorted({model for run in shown for model in run.metrics.get("calls_per_model", {})})
    tools = sorted({tool for run in shown for tool in run.metrics.get("calls_per_tool", {})})
    height = max(3.0, 0.38 * len(shown) + 1.6)
    figure, (by_model, by_tool) = plt.subplots(1, 2, figsize=(15, height), gridspec_kw={"width_ratios": [3, 1]})
    colors = plt.get_cmap("tab20")
    _stacked(by_model, names, shown, models, "calls_per_model", [colors(i % 20) for i in range(len(models))])
    by_model.set_title("model calls per task")
    _stacked(by_tool, names, shown, tools, "calls_per_tool", [colors((2 * i + 1) % 20) for i in range(len(tools))])
    by_tool.set_title("tool calls per task")
    by_tool.set_yticklabels([])
    for axis, count in ((by_model, len(models)), (by_tool, len(tools))):
        if count:
            axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _stacked(axis: Any, names: list[str], runs: Sequence[Run], keys: list[str], field_name: str,
             colors: list[Any]) -> None:
    left = [0.0] * len(runs)
    positions = list(range(len(runs)))
    for key, color in zip(keys, colors):
        widths = [run.metrics.get(field_name, {}).get(key, 0) / max(run.metrics["n"], 1) for run in runs]
        axis.barh(positions, widths, left=left, color=color, label=_short(key))
        left = [a + b for a, b in zip(left, widths)]
    axis.set_yticks(positions)
    axis.set_yticklabels(names, fontsize=8)
    axis.invert_yaxis()


# --- tables ------------------------------------------------------------------------------------
COLUMNS = ("policy", "env / split", "n", "accuracy", "cost $", "$ / task", "latency mean s", "p50 s", "p95 s",
           "calls / task", "frontier")


def _row(run: Run, on_front: set[int]) -> list[str]:
    latency = run.metrics.get("latency_s", {})
    return [run.policy, run.group, str(run.metrics["n"]), f"{run.accuracy:.4f}", f"{run.metrics['cost_usd']:.4f}",
            f"{run.cost_per_task:.6f}", f"{latency.get('mean', 0):.2f}", f"{latency.get('p50', 0):.2f}",
            f"{latency.get('p95', 0):.2f}", f"{run.metrics.get('tool_calls_per_task', 0):.2f}",
            "yes" if id(run) in on_front else ""]


def _ordered(runs: Sequence[Run]) -> list[Run]:
    return sorted(runs, key=lambda run: (run.group, run.cost_per_task, -run.accuracy))


def _subtask_table(runs: Sequence[Run]) -> tuple[list[str], list[list[str]]]:
    shown = [run for run in _ordered(runs) if run.kind != "sweep"]
    subtasks = sorted({name for run in shown for name in run.metrics.get("per_subtask", {})})
    rows = []
    for run in shown:
        cells = []
        for name in subtasks:
            entry = run.metrics.get("per_subtask", {}).get(name)
            cells.append(f"{entry['accuracy']:.3f} ({entry['n']})" if entry else "")
        rows.append([run.policy, run.group, *cells])
    return ["policy", "env / split", *subtasks], rows


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(runs: Sequence[Run], on_front: set[int], figures: dict[str, Path]) -> str:
    main = [run for run in _ordered(runs) if run.kind != "sweep"]
    sweep = [run for run in _ordered(runs) if run.kind == "sweep"]
    parts = ["# ToolOrchestra evaluation report", "",
             "Accuracy and dollars of every run; `frontier` marks runs no other run (oracle excluded) beats "
             "on both accuracy and cost per task.", "", "## Comparison", "",
             _markdown_table(COLUMNS, [_row(run, on_front) for run in main]), ""]
    if sweep:
        parts += ["## Sweeps", "", _markdown_table(COLUMNS, [_row(run, on_front) for run in sweep]), ""]
    header, rows = _subtask_table(runs)
    parts += ["## Accuracy per subtask (n)", "", _markdown_table(header, rows), "",
              "## Accuracy vs cost", "", f"![accuracy vs cost]({figures['pareto'].name})", "",
              "## Tool and model usage", "", f"![usage]({figures['usage'].name})", ""]
    return "\n".join(parts)


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], table_id: str) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(runs: Sequence[Run], on_front: set[int], figures: dict[str, Path]) -> str:
    main = [run for run in _ordered(runs) if run.kind != "sweep"]
    sweep = [run for run in _ordered(runs) if run.kind == "sweep"]
    header, rows = _subtask_table(runs)
    sections = [
        "<h1>ToolOrchestra evaluation report</h1>",
        "<p>Accuracy and dollars of every run; <em>frontier</em> marks runs no other run (oracle excluded) "
        "beats on both accuracy and cost per task.</p>",
        "<h2>Comparison</h2>", _html_table(COLUMNS, [_row(run, on_front) for run in main], "comparison"),
    ]
    if sweep:
        sections += ["<h2>Sweeps</h2>", _html_table(COLUMNS, [_row(run, on_front) for run in sweep], "sweeps")]
    sections += [
        "<h2>Accuracy per subtask (n)</h2>", _html_table(header, rows, "subtasks"),
        "<h2>Accuracy vs cost</h2>",
        f'<img id="pareto" alt="accuracy vs cost" src="{_data_uri(figures["pareto"])}">',
        "<h2>Tool and model usage</h2>",
        f'<img id="usage" alt="tool and model usage" src="{_data_uri(figures["usage"])}">',
    ]
    style = ("body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;margin:1em 0}"
             "th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}"
             "td:first-child,td:nth-child(2),th{text-align:left}th{background:#eee}img{max-width:100%}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ToolOrchestra evaluation report</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n")
