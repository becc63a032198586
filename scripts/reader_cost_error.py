"""How far the reader's estimates of a call's dollars and seconds are from what the call costs and takes
(agent/reader.expected_cost, expected_latency).

    .venv/bin/python scripts/reader_cost_error.py replay:routerbench [--split test]

Profiles are measured on the whole train split (the reader's default). For every question of --split and every
label of the answer tool, the estimate on the question's own task type is compared with the world's charge for
that call, and likewise its seconds. Printed: the summed absolute error over the summed charges (seconds), for
the profiles as measured (per task type) and with their per-type figures removed (one price and one latency per
label for every type, as before they existed).
"""

from __future__ import annotations

import argparse

from toolorchestra.agent.reader import Offer, expected_cost, expected_latency, offers
from toolorchestra.envs.registry import make_env
from toolorchestra.envs.replay.base import ReplayEnv
from toolorchestra.envs.replay.profiles import measure_profiles
from toolorchestra.envs.replay.tokens import count_tokens

PER_TYPE_FIELDS = ("output_tokens_by_type", "relative_cost_by_type", "latency_s_by_type")


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
    errors = {(kind, figures): 0.0 for kind in ("dollars", "seconds") for figures in ("per task type", "one per label")}
    totals = {"dollars": 0.0, "seconds": 0.0}
    for task in tasks:
        question_tokens, posterior = count_tokens(task.prompt), {str(task.subtask): 1.0}
        for offer in pool:
            model = model_of[offer.label]
            actual = {"dollars": env.call_cost(task, model), "seconds": env.call_latency(task, model)}
            for figures, shown in (("per task type", offer), ("one per label", without_per_type_figures(offer))):
                estimate = {
                    "dollars": expected_cost(shown, posterior, question_tokens),
                    "seconds": expected_latency(shown, posterior),
                }
                for kind in totals:
                    errors[kind, figures] += abs(estimate[kind] - actual[kind])
            for kind in totals:
                totals[kind] += actual[kind]
    print(f"{args.env} {args.split}: {len(tasks)} questions x {len(pool)} labels, ${totals['dollars']:.4f} charged "
          f"and {totals['seconds']:.0f} s taken in all")
    for (kind, figures), error in errors.items():
        print(f"  {kind:8s} {figures:14s} |estimate - actual| summed / actual summed: {error / totals[kind]:.3f}")


if __name__ == "__main__":
    main()
