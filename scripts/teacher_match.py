"""How often an orchestrator's decisions are the ones its prompt determines: the share of a run's tasks whose
answering model is the one `counterfactual.targets: profiles` ranks first (agent/reader.choose from
each row's price and 50-per-type train profile, as an orchestrator's prompt shows them, with the question's
own task type). A model that reads its rows makes these decisions; one that learned a prior over rows or names
does not.

    .venv/bin/python scripts/teacher_match.py RUN_DIR [RUN_DIR ...]     # eval run dirs on replay:routerbench

Reads each run's run.json (env, split, price_scale, prefer) and decisions.csv.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter
from pathlib import Path


def teacher_models(run: dict) -> dict[str, str]:
    """task id -> the model the profile targets rank first, under the run's prices and preference."""
    from toolorchestra.agent.preference import Preference
    from toolorchestra.agent.reader import choose, offers
    from toolorchestra.bench.policies import PROFILE_PER_TYPE
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.base import ReplayEnv
    from toolorchestra.envs.replay.profiles import measure_profiles
    from toolorchestra.envs.replay.tokens import count_tokens
    from toolorchestra.envs.replay.world import apply_price_options

    env = make_env(run["env"])
    if not isinstance(env, ReplayEnv):
        raise SystemExit(f"teacher_match: {run['env']} is not a replay world")
    apply_price_options(env, run.get("price_scale") or None, None)
    env.show_profiles(measure_profiles(env, "train", PROFILE_PER_TYPE))
    weights = Preference.parse(run.get("prefer") or "accuracy").weights()
    chosen = {}
    for task in env.tasks(run.get("split", "test")):
        pool = offers(env.tools_for(task))
        best = choose(pool, {str(task.subtask): 1.0}, count_tokens(task.prompt), weights)
        chosen[task.id] = {env.label(model): model for model in env.models()}[best.label]
    return chosen


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: teacher_match.py RUN_DIR [RUN_DIR ...]")
    for run_dir in map(Path, sys.argv[1:]):
        missing = [name for name in ("run.json", "decisions.csv") if not (run_dir / name).is_file()]
        if missing:
            raise SystemExit(f"teacher_match: {run_dir} has no {' or '.join(missing)}: expected an eval run dir")
        run = json.loads((run_dir / "run.json").read_text())
        teacher = teacher_models(run)
        with (run_dir / "decisions.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        same = sum(row["model"] == teacher[row["task_id"]] for row in rows)
        wanted = Counter(teacher[row["task_id"]].split("/")[-1] for row in rows)
        print(f"{run_dir}: {same}/{len(rows)} = {same / len(rows):.3f} of decisions are the profile targets' first "
              f"label; the targets want {dict(wanted.most_common(4))}")


if __name__ == "__main__":
    main()
