"""What an escalation orchestrator did on replay:frames, read from its trajectories: per preference, the first
consultation, and after each consultation whether the answer attempted the question (FRAMES' judge grade and
the world's answer key, as in training) and whether the orchestrator adopted it, escalated, or ended otherwise.

Run: .venv/bin/python scripts/escalation_paths.py out/frames-escalation/accuracy out/frames-escalation/cost
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from toolorchestra.envs.registry import make_env
from toolorchestra.train.escalation import attempted


def calls(trajectory: dict[str, Any]) -> list[tuple[str, str]]:
    """(tool, model label) of every tool call the orchestrator made, in order."""
    found = []
    for message in trajectory["messages"]:
        for call in message.get("tool_calls") or []:
            arguments = json.loads(call["function"]["arguments"] or "{}")
            found.append((call["function"]["name"], str(arguments.get("model"))))
    return found


def describe(run: Path) -> None:
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines() if line.strip()]
    env = make_env(rows[0]["env"])
    tasks = {task.id: task for task in env.tasks(rows[0]["split"])}
    model_of = {env.label(model): model for model in env.models()}  # labels in the calls -> recorded models
    first, outcomes, paths = Counter(), Counter(), Counter()
    for row in rows:
        made = calls(row)
        consulted = [model for tool, model in made if tool == "expert"]
        first[consulted[0] if consulted else "(none)"] += 1
        for position, (tool, model) in enumerate(made):
            if tool != "expert":
                continue
            said = "attempted" if attempted(env, tasks[row["task_id"]], model_of.get(model, model)) else "declined"
            following = made[position + 1:position + 2]  # the call after this consultation
            if not following:
                outcomes[said, "ended"] += 1
            elif following[0] == ("answer", model):
                outcomes[said, "adopted"] += 1
            else:
                outcomes[said, "escalated"] += 1
        paths[" > ".join(f"{tool}({model})" for tool, model in made)] += 1
    print(f"{run}: {len(rows)} trajectories, accuracy {sum(bool(r['correct']) for r in rows) / len(rows):.4f}")
    print("  first consultation:", ", ".join(f"{model} {count}" for model, count in first.most_common()))
    for said in ("attempted", "declined"):
        total = sum(count for (kind, _), count in outcomes.items() if kind == said)
        print(f"  after an answer that {said} ({total}):",
              ", ".join(f"{what} {outcomes[said, what]}" for what in ("adopted", "escalated", "ended")))
    print("  most frequent paths:")
    for path, count in paths.most_common(5):
        print(f"    {count:4d}  {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="eval output dirs holding trajectories.jsonl")
    for run in parser.parse_args().runs:
        describe(run)


if __name__ == "__main__":
    main()
