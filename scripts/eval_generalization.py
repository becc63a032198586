"""Every generalization condition of an orchestrator on replay:routerbench, as one command, with a report.

    .venv/bin/python scripts/eval_generalization.py --orchestrator smollm2-135m-orchestrator --limit 945 \
        --out out/generalization/NAME
    .venv/bin/python scripts/eval_generalization.py --policy reader --limit 945 --out out/generalization/NAME

Conditions (each an `toolorchestra eval` run into OUT/<condition>/<policy>, resumable):
- catalog: the world's prices;
- renamed: every label a random name (`--rename-labels 1`), profiles unchanged; the report gives the share of
  tasks whose model is the same as under catalog;
- gpt4-x0.05, yi34b-x20: one model 20x cheaper, one 20x dearer (`--price-scale`);
- permuted: every model charged what another model costs on average (a fixed derangement of the 11 mean train
  costs, as `--price-scale` factors, so each question keeps its own relative cost);
- held-out: gpt-4 and Yi-34B named as never offered in training (`--hold-out-models`; evaluation offers them with
  their profiles). It means something for an orchestrator trained with the same `sampler.hold_out_models`, which
  this script does not train; the report gives the point, the share answered by a held-out model, and the catalog
  baselines that dominate it.
With `--env replay:routerbench-dev`, the same on RouterBench's dev world: half of the train split is its train
split (baselines fitted, profiles measured) and the other half its test split, so that versions of a policy can
be compared, baselines and all, without the test split. With `--validation`, every run is on the train questions
outside the reader's 50-per-subset calibration sample (where its question types come from) instead of the test
split. The baselines are fitted on the whole train split, so there they are evaluated on questions they were
fitted on; and the reader's default profiles now cover the whole train split too, so pass `--profiles` with
50-per-subset profiles (`toolorchestra profile`) for a reader that has not seen those questions.
Under each price condition every non-oracle baseline runs at the same prices (single models, random, cheapest,
per-subtask, cascade, the router sweep) and the report says which of them dominate the orchestrator's point
(a' >= a and c' <= c). Writes OUT/report-orchestrator-NAME.md (tables) and OUT/generalization-orchestrator-NAME.png
(accuracy vs dollars per condition); several orchestrators evaluated into the same OUT share its baseline runs.
An orchestrator runs as the shipped figures were made: `--tools answer --max-turns 1 --max-tokens 40`, greedy;
another policy (--policy, e.g. reader) with the env's default tools and turn cap.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "toolorchestra")
ENV = "replay:routerbench"
HELD_OUT = ("gpt-4-1106-preview", "zero-one-ai/Yi-34B-Chat")
CANDIDATES = ("orchestrator-", "reader")  # run dirs of the policies under test, not baselines
BASELINES = ["random", "cheapest", "per-subtask", "cascade", "router"]
ORCHESTRATOR_FLAGS = ["--tools", "answer", "--max-turns", "1", "--max-tokens", "40", "--concurrency", "8"]


def permuted_factors() -> list[str]:
    """--price-scale items that give every model another model's mean train cost (a seeded derangement)."""
    from toolorchestra.envs.registry import make_env

    env = make_env(ENV)
    train = env.tasks("train")
    models = env.models()
    mean = {model: sum(env.call_cost(task, model) for task in train) / len(train) for model in models}
    order = list(models)
    rng = random.Random(0)
    while any(a == b for a, b in zip(order, models, strict=True)):
        rng.shuffle(order)
    return [f"{model}={mean[other] / mean[model]:.6g}" for model, other in zip(models, order, strict=True)]


def conditions() -> dict[str, list[str]]:
    permuted = [arg for item in permuted_factors() for arg in ("--price-scale", item)]
    return {
        "catalog": [],
        "renamed": ["--rename-labels", "1"],
        "gpt4-x0.05": ["--price-scale", "gpt-4=0.05"],
        "yi34b-x20": ["--price-scale", "yi-34b=20"],
        "permuted": permuted,
        "held-out": ["--hold-out-models", ",".join(HELD_OUT)],
    }


def single_policies() -> list[str]:
    from toolorchestra.envs.registry import make_env

    return [f"single:{model}" for model in make_env(ENV).models()]


def validation_ids(out: Path) -> Path:
    """A file of the train task ids outside the calibration sample (`--validation`), written once into OUT."""
    from toolorchestra.bench.policies import CALIBRATION_PER_TYPE
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.profiles import calibration_sample

    path = out / "validation-ids.txt"
    if not path.is_file():
        train = make_env(ENV).tasks("train")
        calibration = {task.id for task in calibration_sample(train, CALIBRATION_PER_TYPE)}
        out.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{task.id}\n" for task in train if task.id not in calibration))
    return path


TASKS: list[str] = []  # the eval flags that pick the tasks (main sets them)


def run_eval(policy: str, out: Path, extra: list[str], limit: int, prefer: str, profiles: Path | None = None) -> None:
    if (out / "metrics.json").is_file():
        return
    command = [CLI, "eval", "--env", ENV, *TASKS, "--policy", policy, "--out", str(out), "--no-progress", *extra]
    if policy.startswith("orchestrator:"):
        command += ["--prefer", prefer, *ORCHESTRATOR_FLAGS]
    elif policy.startswith("reader"):
        command += ["--prefer", prefer]
    if profiles is not None and not policy.startswith(("single:", *BASELINES)):
        command += ["--profiles", str(profiles)]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    if done.returncode != 0:  # eval said why on stderr, above: no traceback of this script on top of it
        raise SystemExit(f"eval_generalization: the run of {policy} into {out} failed (exit {done.returncode})")


def points(folder: Path) -> dict[str, tuple[float, float]]:
    """baseline dir name -> (accuracy, total dollars), a router sweep's points named router:T; orchestrator runs
    (orchestrator-NAME dirs, one per orchestrator evaluated into the same OUT) are not baselines."""
    found = {}
    for metrics_path in sorted(folder.rglob("metrics.json")):
        if metrics_path.parent.name.startswith(CANDIDATES):
            continue
        metrics = json.loads(metrics_path.read_text())
        for point in metrics.get("sweep") or [metrics]:  # a router sweep: one point per threshold
            name = point["policy"] if "sweep" in metrics else metrics_path.parent.relative_to(folder).as_posix()
            found[name] = (point["accuracy"], point["cost_usd"])
    return found


def decisions(run: Path) -> dict[str, str]:
    with (run / "decisions.csv").open() as handle:
        return {row["task_id"]: row["model"] for row in csv.DictReader(handle)}


def main() -> int:
    global ENV
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    chosen_policy = parser.add_mutually_exclusive_group(required=True)
    chosen_policy.add_argument("--orchestrator", help="a shipped adapter name or model dir")
    chosen_policy.add_argument("--policy", help="another policy under test, e.g. reader (agent/reader.py)")
    parser.add_argument("--limit", type=int, help="the first N test tasks (default: all; 945 on routerbench)")
    parser.add_argument("--prefer", default="accuracy")
    parser.add_argument("--profiles", type=Path, help="the profiles the policy under test is shown (a file of "
                        "`toolorchestra profile`; default: eval's, for the reader the whole train split)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--conditions", default="catalog,renamed,gpt4-x0.05,yi34b-x20,permuted,held-out",
                        help="comma-separated subset of the conditions to run")
    parser.add_argument("--validation", action="store_true",
                        help="run on the train questions outside the calibration sample instead of test")
    parser.add_argument("--env", default=ENV, choices=[ENV, f"{ENV}-dev", f"{ENV}-dev1", f"{ENV}-dev2"],
                        help=f"{ENV}-dev: the train split cut in two (its own train and test), to choose without "
                        "test; -dev1 and -dev2 cut it with other seeds")
    args = parser.parse_args()
    ENV = args.env
    chosen = args.conditions.split(",")
    unknown = sorted(set(chosen) - set(conditions()))
    if unknown:
        parser.error(f"--conditions: unknown {', '.join(unknown)}; expected some of {', '.join(conditions())}")
    if args.validation:
        TASKS[:] = ["--split", "train", "--task-ids", f"@{validation_ids(args.out)}"]
    else:
        TASKS[:] = ["--split", "test", *(["--limit", str(args.limit)] if args.limit else [])]
    where = "validation questions (train, outside the calibration sample)" if args.validation else (
        f"first {args.limit} {ENV} test tasks" if args.limit else f"{ENV} test tasks")
    if args.orchestrator:
        orchestrator = f"orchestrator:{args.orchestrator}"
        mine_dir = "orchestrator-" + Path(args.orchestrator).name  # several orchestrators share OUT and its baselines
    else:
        orchestrator = args.policy
        mine_dir = args.policy.replace(":", "-").replace("/", "-")
    if args.profiles is not None:
        mine_dir += f"-profiles-{args.profiles.stem}"
    lines = [f"# Generalization of {orchestrator} on the {where} (--prefer {args.prefer})", "",
             "| condition | orchestrator accuracy | total $ | dominated by |",
             "| --- | --- | --- | --- |"]
    panels = {}
    for name, extra in conditions().items():
        if name not in chosen:
            continue
        folder = args.out / name
        run_eval(orchestrator, folder / mine_dir, extra, args.limit, args.prefer, args.profiles)
        if name in ("renamed", "held-out"):
            continue  # the catalog prices and models: the catalog condition's baselines stand
        for policy in [*single_policies(), *BASELINES]:
            run_eval(policy, folder / policy.replace(":", "-").replace("/", "-"), extra, args.limit, args.prefer)
        found = points(folder)
        record = json.loads((folder / mine_dir / "metrics.json").read_text())
        mine = (record["accuracy"], record["cost_usd"])
        dominating = sorted(policy for policy, (acc, cost) in found.items() if acc >= mine[0] and cost <= mine[1])
        lines.append(f"| {name} | {mine[0]:.4f} | {mine[1]:.4f} | {', '.join(dominating) or 'none (nondominated)'} |")
        panels[name] = (mine, found)
    if "catalog" in chosen and "renamed" in chosen:
        catalog, renamed = decisions(args.out / "catalog" / mine_dir), decisions(args.out / "renamed" / mine_dir)
        same = sum(catalog[task] == renamed.get(task) for task in catalog) / len(catalog)
        renamed_metrics = json.loads((args.out / "renamed" / mine_dir / "metrics.json").read_text())
        lines += ["", f"Renamed labels (`--rename-labels 1`): {same:.1%} of {len(catalog)} decisions name the same "
                  f"model as under the catalog labels; accuracy {renamed_metrics['accuracy']:.4f}, "
                  f"${renamed_metrics['cost_usd']:.4f}."]
    if "catalog" in chosen and "held-out" in chosen:
        held = json.loads((args.out / "held-out" / mine_dir / "metrics.json").read_text())
        point = (held["accuracy"], held["cost_usd"])
        dominating = sorted(policy for policy, (acc, cost) in points(args.out / "catalog").items()
                            if acc >= point[0] and cost <= point[1])
        share = held.get("hold_out", {}).get("answered", 0) / held["n"]
        lines += ["", f"Held-out models ({', '.join(HELD_OUT)}, `--hold-out-models`): accuracy {point[0]:.4f}, "
                  f"${point[1]:.4f}, {share:.1%} of the tasks answered by a held-out model; dominated by "
                  f"{', '.join(dominating) or 'none of the catalog baselines'}."]
    lines += ["", f"![accuracy vs dollars](generalization-{mine_dir}.png)"]
    (args.out / f"report-{mine_dir}.md").write_text("\n".join(lines) + "\n")
    plot(panels, args.out / f"generalization-{mine_dir}.png", orchestrator)
    print("\n".join(lines))
    return 0


def plot(panels: dict[str, tuple[tuple[float, float], dict[str, tuple[float, float]]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for axis, (name, (mine, found)) in zip(axes[0], panels.items(), strict=True):
        axis.scatter([c for _, c in found.values()], [a for a, _ in found.values()], s=14, color="grey",
                     label="baselines")
        axis.scatter([mine[1]], [mine[0]], s=60, color="crimson", marker="*", label="orchestrator")
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter(NullFormatter())  # minor tick labels overlap on a narrow dollar range
        axis.set_title(name)
        axis.set_xlabel("total $ (log)")
        axis.set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
