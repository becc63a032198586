"""`toolorchestra report`: compare eval runs in Markdown and HTML, with a Pareto plot and a usage chart.

Input: eval output dirs (each with metrics.json), or dirs that contain such dirs. Output dir:
- report.md: comparison table, per-subtask accuracy, router sweep table, the two figures by file name;
- report.html: the same, self-contained (figures embedded as PNG data URIs);
- pareto.png: accuracy vs dollars per task (log scale), one panel per env/split; every run a point,
  a sweep a curve, the oracle a star, the non-dominated frontier dashed (a free run, e.g. a local
  orchestrator that answered itself, is drawn left of the cheapest paid run and marked $0);
- usage.png: calls per task by model and by tool for each run;
- preferences.png (only when runs of one orchestrator differ only in --prefer): per preference,
  accuracy and dollars per task as grouped bars, and who wrote the final answer (answered_by model,
  the orchestrator itself, or no answer) as a stacked bar; report.md/html then have a "Preference
  adherence" section with, per preference, accuracy, cost, mean latency, that answer distribution,
  whether the run is best on its preference's own target, and accuracy/cost per subtask.
Runs of an orchestrator (or of the reader policy) with a preference are named `POLICY [PREFERENCE]` in tables
and plots.
Input may also be exported results dirs (`toolorchestra export-results`): a metrics.json with
`by_preference` gives one run per preference.
matplotlib (Agg) is imported only when the figures are drawn.
"""

from __future__ import annotations

import base64
import html
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolorchestra.bench.metrics_file import read_metrics
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
    def preference(self) -> str | None:
        """The run's --prefer (None: a baseline, or an orchestrator under its default preference)."""
        value = self.extra.get("preference") or self.metrics.get("prefer")
        return str(value) if value else None

    @property
    def preference_label(self) -> str:
        return self.preference or ("default" if self.kind == "orchestrator" else "none")

    @property
    def display(self) -> str:
        """The name shown in tables and plots: the policy, with its preference for an orchestrator."""
        return f"{self.policy} [{self.preference}]" if self.kind == "orchestrator" and self.preference else self.policy

    @property
    def kind(self) -> str:
        if self.sweep:
            return "sweep"
        head = self.policy.split(":", 1)[0]
        if head == "reader":  # decides under the user's preference, as an orchestrator does (agent/reader.py)
            return "orchestrator"
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
            found.extend(
                sorted(child / "metrics.json" for child in path.iterdir() if (child / "metrics.json").is_file())
            )
        else:
            raise UserError(f"report: {path} is not a directory with metrics.json (run `toolorchestra eval` first)")
    if not found:
        raise UserError(f"report: no metrics.json found in {', '.join(str(p) for p in paths)}")
    return found


def load_runs(paths: Sequence[Path]) -> list[Run]:
    runs: list[Run] = []
    for metrics_path in find_metric_files(paths):
        metrics = read_metrics(metrics_path)
        env, split = str(metrics.get("env", "?")), str(metrics.get("split", "?"))
        if metrics.get("kind") == "sweep":
            for entry in metrics["sweep"]:
                runs.append(
                    Run(entry["policy"], env, split, entry, metrics_path.parent, sweep=str(metrics.get("spec")))
                )
        elif isinstance(metrics.get("by_preference"), dict):  # an exported results dir
            for preference, entry in metrics["by_preference"].items():
                runs.append(
                    Run(
                        str(entry.get("policy", metrics.get("policy"))),
                        str(entry.get("env", env)),
                        str(entry.get("split", split)),
                        entry,
                        metrics_path.parent,
                        extra={"preference": None if preference == "default" else preference},
                    )
                )
        else:  # one policy's metrics (read_metrics allows no other shape)
            runs.append(Run(str(metrics["policy"]), env, split, metrics, metrics_path.parent))
    for run in runs:  # router points exported one per dir (results/<world>/router-T/) are drawn as one sweep
        if run.sweep is None and run.policy.startswith("router:"):
            run.sweep, run.extra["sweep_key"] = "router", str(run.source.parent)
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
    stale = out / "preferences.png"
    if preference_groups(runs):
        figures["preferences"] = stale
        plot_preferences(preference_groups(runs), figures["preferences"])
    elif stale.exists():
        stale.unlink()  # from an earlier report into the same dir
    on_front = {id(run) for group in _groups(runs).values() for run in _front(group)}
    (out / "report.md").write_text(render_markdown(runs, on_front, figures), encoding="utf-8")
    (out / "report.html").write_text(render_html(runs, on_front, figures), encoding="utf-8")
    return {"markdown": out / "report.md", "html": out / "report.html", **figures}


def _groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    return groups


def _front(group: Sequence[Run]) -> list[Run]:
    """The runs of one group on its accuracy-vs-cost frontier (the oracle excluded), by cost."""
    candidates = [run for run in group if run.kind != "oracle"]
    return [candidates[i] for i in pareto_front([(run.cost_per_task, run.accuracy) for run in candidates])]


# --- figures -----------------------------------------------------------------------------------
_ORCHESTRATOR_COLORS = ("tab:red", "darkmagenta", "darkred", "deeppink", "maroon", "crimson", "indigo")
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
    for axis, (name, group) in zip(axes[0], groups.items(), strict=True):
        _draw_group(axis, group)
        axis.set_title(f"Accuracy vs cost: {name}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _draw_group(axis: Any, group: Sequence[Run]) -> None:
    baseline_colors = iter(["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:cyan", "tab:olive", "tab:pink"])
    orchestrator_colors: dict[str, str] = {}  # one color per orchestrator run (policy and preference)
    paid = [run.cost_per_task for run in group if run.cost_per_task > 0]
    zero = (min(paid) if paid else 1e-6) / ZERO_COST_SHIFT  # a free run is drawn left of the cheapest paid run

    def cost_x(run: Run) -> float:
        return run.cost_per_task if run.cost_per_task > 0 else zero

    def note(run: Run, text: str, **options: Any) -> None:
        axis.annotate(text, (cost_x(run), run.accuracy), textcoords="offset points", **options)

    sweeps: dict[str, list[Run]] = {}
    for run in group:
        if run.cost_per_task <= 0:
            note(run, "$0", fontsize=8, xytext=(-14, -12))
        if run.kind == "sweep":
            sweeps.setdefault(f"{run.sweep}@{run.extra.get('sweep_key', run.source)}", []).append(run)
            continue
        style = dict(_STYLE[run.kind])
        if run.kind == "baseline":
            style["color"] = next(baseline_colors, "tab:gray")
        if run.kind == "orchestrator":
            style["color"] = orchestrator_colors.setdefault(
                run.display, _ORCHESTRATOR_COLORS[len(orchestrator_colors) % len(_ORCHESTRATOR_COLORS)]
            )
        label = {"single": None, "oracle": "oracle (upper bound)"}.get(
            run.kind, f"{run.display} (n={run.metrics['n']})"
        )
        axis.scatter([cost_x(run)], [run.accuracy], label=label, zorder=3, **style)
        if run.kind == "orchestrator" and run.preference:
            note(run, f"prefer {run.preference}", fontsize=8, xytext=(6, -11), color=style["color"])
        if run.kind == "single":
            note(run, _short(run.policy.split(":", 1)[1]), fontsize=7, xytext=(4, 3), color="0.3")
    for points in sweeps.values():
        points.sort(key=lambda run: run.cost_per_task)
        axis.plot(
            [cost_x(p) for p in points],
            [p.accuracy for p in points],
            "-^",
            color="tab:orange",
            markersize=5,
            label=f"{points[0].sweep} sweep (n={points[0].metrics['n']})",
            zorder=2,
        )
    front = _front(group)
    if len(front) > 1:
        axis.step(
            [cost_x(r) for r in front],
            [r.accuracy for r in front],
            where="post",
            linestyle="--",
            color="0.4",
            linewidth=1,
            label="Pareto frontier",
            zorder=1,
        )
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
    names = [f"{run.display} [{run.env.split(':')[-1]}]" for run in shown]
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


def _stacked(
    axis: Any, names: list[str], runs: Sequence[Run], keys: list[str], field_name: str, colors: list[Any]
) -> None:
    left = [0.0] * len(runs)
    positions = list(range(len(runs)))
    for key, color in zip(keys, colors, strict=True):
        widths = [run.metrics.get(field_name, {}).get(key, 0) / max(run.metrics["n"], 1) for run in runs]
        axis.barh(positions, widths, left=left, color=color, label=_short(key))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axis.set_yticks(positions, names, fontsize=8)
    axis.invert_yaxis()


# --- preference adherence -----------------------------------------------------------------------
_SETTINGS = ("seed", "config", "max_turns", "max_tokens", "tools", "limit", "judge")  # must match, --prefer may not
_PREFERENCE_ORDER = {"default": 0, "accuracy": 1, "cost": 2, "latency": 3}  # then any other, by name
SELF = "orchestrator itself"
NO_ANSWER = "no answer"


@dataclass
class PreferenceGroup:
    """Runs of one orchestrator policy on one env/split that differ only in --prefer."""

    policy: str
    group: str
    runs: list[Run]

    @property
    def title(self) -> str:
        return f"{self.policy} on {self.group}"


def preference_groups(runs: Sequence[Run]) -> list[PreferenceGroup]:
    """Every orchestrator policy with runs under two or more preferences and otherwise equal settings
    (a second run of the same preference is left out)."""
    keyed: dict[tuple[str, str, str], list[Run]] = {}
    for run in runs:
        if run.kind != "orchestrator":
            continue
        settings = json.dumps([run.metrics.get(name) for name in _SETTINGS], default=str)
        members = keyed.setdefault((run.policy, run.group, settings), [])
        if all(member.preference_label != run.preference_label for member in members):
            members.append(run)
    groups = []
    for (policy, group, _), members in keyed.items():
        if len(members) >= 2:
            members.sort(key=lambda run: (_PREFERENCE_ORDER.get(run.preference_label, 4), run.preference_label))
            groups.append(PreferenceGroup(policy, group, members))
    return groups


def answer_distribution(run: Run) -> dict[str, int]:
    """Who wrote the final answer: each answering model (answered_by), the orchestrator itself, nobody."""
    answered = {str(model): int(count) for model, count in run.metrics.get("answered_by", {}).items()}
    finished = int(run.metrics.get("stop_reasons", {}).get("answer", sum(answered.values())))
    distribution = dict(sorted(answered.items(), key=lambda item: (-item[1], item[0])))
    itself = max(finished - sum(answered.values()), 0)
    if itself:
        distribution[SELF] = itself
    missing = max(int(run.metrics["n"]) - sum(distribution.values()), 0)
    if missing:
        distribution[NO_ANSWER] = missing
    return distribution


def _target(preference: str) -> tuple[str, Callable[[Run], float], bool] | None:
    """What a named preference asks the orchestrator to make best: (description, value, higher is better)."""
    if preference == "accuracy":
        return "highest accuracy", lambda run: run.accuracy, True
    if preference == "cost":
        return "lowest $ / task", lambda run: run.cost_per_task, False
    if preference == "latency":
        return "lowest mean latency", lambda run: float(run.metrics.get("latency_s", {}).get("mean", 0.0)), False
    if preference.startswith("tool:") and "=" not in preference and "," not in preference:
        name = preference[5:]
        return (
            f"most {name} calls / task",
            lambda run: float(run.metrics.get("calls_per_tool", {}).get(name, 0)) / max(run.metrics["n"], 1),
            True,
        )
    return None


def _adherence(run: Run, group: PreferenceGroup) -> str:
    target = _target(run.preference_label)
    if target is None:
        return ""
    description, value, higher = target
    values = [value(other) for other in group.runs]
    best = max(values) if higher else min(values)
    return (
        f"yes ({description})"
        if value(run) == best
        else f"no ({description}: "
        + ", ".join(other.preference_label for other, v in zip(group.runs, values, strict=True) if v == best)
        + ")"
    )


PREFERENCE_COLUMNS = (
    "preference",
    "n",
    "accuracy",
    "cost $",
    "$ / task",
    "latency mean s",
    "best on its target",
    "final answer by (share of tasks)",
)


def _preference_rows(group: PreferenceGroup) -> list[list[str]]:
    rows = []
    for run in group.runs:
        count = max(int(run.metrics["n"]), 1)
        shares = ", ".join(f"{_short(name)} {n} ({n / count:.0%})" for name, n in answer_distribution(run).items())
        rows.append(
            [
                run.preference_label,
                str(run.metrics["n"]),
                f"{run.accuracy:.4f}",
                f"{run.metrics['cost_usd']:.4f}",
                f"{run.cost_per_task:.6f}",
                f"{run.metrics.get('latency_s', {}).get('mean', 0):.2f}",
                _adherence(run, group),
                shares,
            ]
        )
    return rows


def _preference_subtask_table(group: PreferenceGroup) -> tuple[list[str], list[list[str]]]:
    subtasks = sorted({name for run in group.runs for name in run.metrics.get("per_subtask", {})})
    header = ["preference"] + [f"{name} {what}" for name in subtasks for what in ("accuracy (n)", "cost $")]
    rows = []
    for run in group.runs:
        cells = [run.preference_label]
        for name in subtasks:
            entry = run.metrics.get("per_subtask", {}).get(name)
            cells += [f"{entry['accuracy']:.3f} ({entry['n']})", f"{entry['cost_usd']:.4f}"] if entry else ["", ""]
        rows.append(cells)
    return header, rows


def plot_preferences(groups: Sequence[PreferenceGroup], path: Path) -> None:
    """Per group: accuracy and $ / task per preference (grouped bars, two axes), and who gave the
    final answer per preference (stacked shares)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(
        len(groups), 2, figsize=(16, 4.8 * len(groups)), squeeze=False, gridspec_kw={"width_ratios": [1.1, 1]}
    )
    palette = plt.get_cmap("tab20")
    for (bars, stack), group in zip(axes, groups, strict=True):
        labels = [run.preference_label for run in group.runs]
        x = np.arange(len(labels))
        width = 0.38
        accuracy = bars.bar(
            x - width / 2, [run.accuracy for run in group.runs], width, color="tab:blue", label="accuracy (left axis)"
        )
        bars.bar_label(accuracy, fmt="%.3f", fontsize=8)
        bars.set_ylim(0, 1.1)
        bars.set_ylabel("accuracy")
        dollars = bars.twinx()
        cost = dollars.bar(
            x + width / 2,
            [run.cost_per_task for run in group.runs],
            width,
            color="tab:orange",
            label="$ / task (right axis)",
        )
        dollars.bar_label(cost, labels=[f"{run.cost_per_task:.2g}" for run in group.runs], fontsize=8)
        dollars.set_ylim(0, max([run.cost_per_task for run in group.runs] + [1e-9]) * 1.2)
        dollars.set_ylabel("dollars per task")
        bars.set_xticks(x, [f"prefer {label}" for label in labels])
        bars.legend(handles=[accuracy, cost], fontsize=8, loc="upper left")
        bars.set_title(f"{group.title}: accuracy and cost per preference", fontsize=10)
        distributions = [answer_distribution(run) for run in group.runs]
        totals: Counter[str] = Counter()
        for distribution in distributions:
            totals.update(distribution)
        names = [name for name in sorted(totals, key=lambda n: (-totals[n], n)) if name not in (SELF, NO_ANSWER)]
        names += [name for name in (SELF, NO_ANSWER) if name in totals]
        bottom = np.zeros(len(labels))
        for index, name in enumerate(names):
            shares = np.array(
                [
                    d.get(name, 0) / max(int(run.metrics["n"]), 1)
                    for d, run in zip(distributions, group.runs, strict=True)
                ]
            )
            color = {SELF: "0.3", NO_ANSWER: "0.85"}.get(name, palette(index % 20))
            stack.bar(x, shares, 0.6, bottom=bottom, color=color, label=_short(name), edgecolor="white", linewidth=0.5)
            bottom += shares
        stack.set_xticks(x, [f"prefer {label}" for label in labels])
        stack.set_ylim(0, 1)
        stack.set_ylabel("share of tasks")
        stack.set_title("who gave the final answer (answered_by)", fontsize=10)
        stack.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _preference_markdown(groups: Sequence[PreferenceGroup], figure: Path) -> list[str]:
    parts = [
        "## Preference adherence",
        "",
        "Runs of one orchestrator that differ only in `--prefer`. *best on its target*: whether the run is the "
        "best of its group on what its preference asks for (accuracy: highest accuracy; cost: lowest $ / task; "
        "latency: lowest mean latency; tool:NAME: most NAME calls per task). *final answer by*: the model that "
        "wrote the final answer (answered_by), the orchestrator itself, or no answer.",
        "",
    ]
    for group in groups:
        header, rows = _preference_subtask_table(group)
        parts += [
            f"### {group.title}",
            "",
            _markdown_table(PREFERENCE_COLUMNS, _preference_rows(group)),
            "",
            "Per subtask:",
            "",
            _markdown_table(header, rows),
            "",
        ]
    parts += [f"![preference adherence]({figure.name})", ""]
    return parts


def _preference_html(groups: Sequence[PreferenceGroup], figure: Path) -> list[str]:
    sections = [
        "<h2>Preference adherence</h2>",
        "<p>Runs of one orchestrator that differ only in <code>--prefer</code>. <em>best on its target</em>: "
        "whether the run is the best of its group on what its preference asks for. <em>final answer by</em>: "
        "the model that wrote the final answer (answered_by), the orchestrator itself, or no answer.</p>",
    ]
    for index, group in enumerate(groups):
        header, rows = _preference_subtask_table(group)
        sections += [
            f"<h3>{html.escape(group.title)}</h3>",
            _html_table(PREFERENCE_COLUMNS, _preference_rows(group), f"preferences-{index}"),
            "<p>Per subtask:</p>",
            _html_table(header, rows, f"preference-subtasks-{index}"),
        ]
    sections.append(f'<img id="preferences" alt="preference adherence" src="{_data_uri(figure)}">')
    return sections


# --- tables ------------------------------------------------------------------------------------
COLUMNS = (
    "policy",
    "env / split",
    "n",
    "accuracy",
    "cost $",
    "$ / task",
    "latency mean s",
    "p50 s",
    "p95 s",
    "calls / task",
    "frontier",
)


def _row(run: Run, on_front: set[int]) -> list[str]:
    latency = run.metrics.get("latency_s", {})
    return [
        run.display,
        run.group,
        str(run.metrics["n"]),
        f"{run.accuracy:.4f}",
        f"{run.metrics['cost_usd']:.4f}",
        f"{run.cost_per_task:.6f}",
        f"{latency.get('mean', 0):.2f}",
        f"{latency.get('p50', 0):.2f}",
        f"{latency.get('p95', 0):.2f}",
        f"{run.metrics.get('tool_calls_per_task', 0):.2f}",
        "yes" if id(run) in on_front else "",
    ]


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
        rows.append([run.display, run.group, *cells])
    return ["policy", "env / split", *subtasks], rows


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(runs: Sequence[Run], on_front: set[int], figures: dict[str, Path]) -> str:
    main = [run for run in _ordered(runs) if run.kind != "sweep"]
    sweep = [run for run in _ordered(runs) if run.kind == "sweep"]
    parts = [
        "# ToolOrchestra evaluation report",
        "",
        "Accuracy and dollars of every run; `frontier` marks runs no other run (oracle excluded) beats "
        "on both accuracy and cost per task.",
        "",
        "## Comparison",
        "",
        _markdown_table(COLUMNS, [_row(run, on_front) for run in main]),
        "",
    ]
    if sweep:
        parts += ["## Sweeps", "", _markdown_table(COLUMNS, [_row(run, on_front) for run in sweep]), ""]
    header, rows = _subtask_table(runs)
    parts += [
        "## Accuracy per subtask (n)",
        "",
        _markdown_table(header, rows),
        "",
        "## Accuracy vs cost",
        "",
        f"![accuracy vs cost]({figures['pareto'].name})",
        "",
        "## Tool and model usage",
        "",
        f"![usage]({figures['usage'].name})",
        "",
    ]
    if "preferences" in figures:
        parts += _preference_markdown(preference_groups(runs), figures["preferences"])
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
        "<h2>Comparison</h2>",
        _html_table(COLUMNS, [_row(run, on_front) for run in main], "comparison"),
    ]
    if sweep:
        sections += ["<h2>Sweeps</h2>", _html_table(COLUMNS, [_row(run, on_front) for run in sweep], "sweeps")]
    sections += [
        "<h2>Accuracy per subtask (n)</h2>",
        _html_table(header, rows, "subtasks"),
        "<h2>Accuracy vs cost</h2>",
        f'<img id="pareto" alt="accuracy vs cost" src="{_data_uri(figures["pareto"])}">',
        "<h2>Tool and model usage</h2>",
        f'<img id="usage" alt="tool and model usage" src="{_data_uri(figures["usage"])}">',
    ]
    if "preferences" in figures:
        sections += _preference_html(preference_groups(runs), figures["preferences"])
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;margin:1em 0}"
        "th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}"
        "td:first-child,td:nth-child(2),th{text-align:left}th{background:#eee}img{max-width:100%}"
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>ToolOrchestra evaluation report</title>'
        f"<style>{style}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )
