"""Task success per family, valid-call rate and turns per episode of toolscale eval dirs, over the first N
tasks of each run (in domain, then family order), as Markdown; then task success per domain; then, over
the tasks with gold actions, how often the first tool call was the gold one (its tool; its tool and
arguments), which tells a wrong plan from a wrong final answer. That table loads the tasks from
TOOLSCALE_DATA (default ../shared/data).

    python scripts/toolscale_table.py 10 out/toolscale/untrained out/toolscale/sft out/toolscale/grpo
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from toolorchestra.errors import UserError


def episodes(run: Path, limit: int) -> list[dict]:
    order = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    order.sort(key=_task_rank)
    return order[:limit]


def _task_rank(trajectory: dict) -> tuple[int, str]:
    # Tasks were evaluated in the split's domain order with one per family; ids carry domain and family.
    domain, family, number = trajectory["task_id"].rsplit("-", 2)
    families = ("lookup", "single_write", "multi_write", "refusal", "error_first", "action_write", "action_refusal")
    domains = ("bank", "basketball", "ecommerce", "medicine", "movie", "railway", "restaurant", "school", "travel",
               "weather")
    return (domains.index(domain) * 10 + (families.index(family) if family in families else 9), number)


def summary(trajectories: list[dict]) -> dict[str, str]:
    by_family: dict[str, list[bool]] = defaultdict(list)
    policy_turns = calls = malformed = 0
    for trajectory in trajectories:
        by_family[trajectory["task_id"].rsplit("-", 2)[1]].append(bool(trajectory["correct"]))
        called_turns = {step["turn"] for step in trajectory["steps"] if step["kind"] != "orchestrator"}
        for step in trajectory["steps"]:
            if step["kind"] == "orchestrator":
                policy_turns += 1
                # a valid turn makes at least one tool call and writes no malformed one
                malformed += bool(step.get("error")) or step["turn"] not in called_turns
            else:
                calls += 1
    solved = sum(bool(t["correct"]) for t in trajectories)
    row = {"success": f"{solved}/{len(trajectories)}"}
    row.update({family: f"{sum(oks)}/{len(oks)}" for family, oks in sorted(by_family.items())})
    row["turns/episode"] = f"{policy_turns / max(len(trajectories), 1):.1f}"
    row["valid-call turns"] = f"{1 - malformed / max(policy_turns, 1):.2f}"
    row["tool calls"] = str(calls)
    row["answered"] = f"{sum(t.get('final_answer') is not None for t in trajectories)}/{len(trajectories)}"
    return row


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    limit = int(argv[0])
    runs = {Path(run).name: episodes(Path(run), limit) for run in argv[1:]}
    print_table({name: summary(trajectories) for name, trajectories in runs.items()})
    print()
    print_table({name: per_domain(trajectories) for name, trajectories in runs.items()})
    print()
    try:
        gold = gold_first_actions(Path(os.environ.get("TOOLSCALE_DATA", "../shared/data")))
    except UserError as error:
        print(f"no first-call table: {error} (set TOOLSCALE_DATA to the folder holding toolscale/)", file=sys.stderr)
        return 1
    print_table({name: first_calls(trajectories, gold) for name, trajectories in runs.items()})
    return 0


def print_table(rows: dict[str, dict[str, str]]) -> None:
    columns = list(dict.fromkeys(key for row in rows.values() for key in row))
    print("| run | " + " | ".join(columns) + " |")
    print("|" + " --- |" * (len(columns) + 1))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row.get(column, "") for column in columns) + " |")


def per_domain(trajectories: list[dict]) -> dict[str, str]:
    solved: dict[str, list[bool]] = defaultdict(list)
    for trajectory in trajectories:
        solved[trajectory["task_id"].rsplit("-", 2)[0]].append(bool(trajectory["correct"]))
    return {domain: f"{sum(oks)}/{len(oks)}" for domain, oks in solved.items()}


def gold_first_actions(data_dir: Path) -> dict[str, dict]:
    """Task id -> its first gold action, for every test task that has one (a refusal's are the lookups before it)."""
    from toolorchestra.envs.toolscale.environment import ToolScaleEnv

    return {task.id: task.meta["gold_actions"][0] for task in ToolScaleEnv(data_dir).tasks("test")
            if task.meta.get("gold_actions")}


def first_calls(trajectories: list[dict], gold: dict[str, dict]) -> dict[str, str]:
    tool = exact = total = 0
    for trajectory in trajectories:
        wanted = gold.get(trajectory["task_id"])
        if wanted is None:
            continue
        total += 1
        first = next((step for step in trajectory["steps"] if step["kind"] != "orchestrator"), None)
        if first is not None and first["name"] == wanted["name"]:
            tool += 1
            exact += first["arguments"] == wanted["arguments"]
    return {"tasks with gold actions": str(total), "first call's tool = gold": f"{tool}/{total}",
            "first call = gold (tool and arguments)": f"{exact}/{total}"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
