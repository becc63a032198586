"""How far the reader's dollar estimate of a call is from what the call costs (agent/reader.expected_cost).

    .venv/bin/python scripts/reader_cost_error.py replay:routerbench [--split test]

Profiles are measured on the whole train split (the reader's default). For every question of --split and every
label of the answer tool, the estimate on the question's own task type is compared with the world's charge for
that call. Printed: the summed absolute error over the summed charges, for the profiles as measured (per task
type) and with their per-type figures removed (one price per label for every type, as before they existed).
"""

from __future__ import annotations

import argparse

from toolorchestra.agent.reader import Offer, expected_cost, offers
from toolorchestra.envs.registry import make_env
from toolorchestra.envs.replay.base import ReplayEnv
from toolorchestra.envs.replay.profiles import measure_profiles
from toolorchestra.envs.replay.tokens import count_tokens

PER_TYPE_FIELDS = ("output_tokens_by_type", "relative_cost_by_type")


def without_per_type_figures(offer: Offer) -> Offer:
    assert offer.profile is not None
    profile = offer.profile.model_copy(update=dict.fromkeys(PER_TYPE_FIELDS))
    return Offer(offer.tool, offer.label, offer.price, offer.latency_s, profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env")
    parser.add_argument("--split", default="test")
    args = parser.parse_args()
    env = make_env(args.env)
    if not isinstance(env, ReplayEnv):
        raise SystemExit(f"{args.env}: expected a replay world")
    env.show_profiles(measure_profiles(env, "train", None))
    tasks = env.tasks(args.split)
    tool = next(tool for tool in env.tools_for(tasks[0]) if tool.name == "answer")
    model_of = {row["label"]: row["model"] for row in tool.price_rows() if row.get("label")}
    pool = offers(env.tools_for(tasks[0]))
    errors = {"per task type": 0.0, "one figure per label": 0.0}
    charged = 0.0
    for task in tasks:
        question_tokens, posterior = count_tokens(task.prompt), {str(task.subtask): 1.0}
        for offer in pool:
            actual = env.call_cost(task, model_of[offer.label])
            charged += actual
            errors["per task type"] += abs(expected_cost(offer, posterior, question_tokens) - actual)
            flat = without_per_type_figures(offer)
            errors["one figure per label"] += abs(expected_cost(flat, posterior, question_tokens) - actual)
    print(f"{args.env} {args.split}: {len(tasks)} questions x {len(pool)} labels, ${charged:.4f} charged in all")
    for name, error in errors.items():
        print(f"  {name:22s} |estimate - charge| summed / charges summed: {error / charged:.3f}")


if __name__ == "__main__":
    main()
