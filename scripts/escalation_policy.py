#!/usr/bin/env python3
"""The escalation target policy of a replay world, per cost weight: what a perfectly trained orchestrator
would do (train/escalation.py) if it read every consulted model's answer right.

    .venv/bin/python scripts/escalation_policy.py [--env replay:frames] [--weights 0.1,0.3,1,3,10]
        [--max-consults 2] [--prior-strength 20] [--unrestricted] [--test [--test-limit N]]

For each cost weight w (utility = P(right) - w * dollars / dearest model's mean dollars): accuracy and total
dollars on the train split, each question decided by the model fitted on the other 4 of 5 folds (what the
recipe's weights are chosen on); with --test also on the test split by the model fitted on all of train
(what the trained orchestrator can at best reach; printed for the record, never for choosing), and the most
frequent paths (consulted models > the model answering). --unrestricted values later turns without the chain
rule (a model may be consulted after an answer that attempted), the variant the recipe rejected.
"""

from __future__ import annotations

import argparse

import numpy as np

from toolorchestra.envs.registry import make_env
from toolorchestra.train.escalation import fit_from_rows, outcome_rows, play


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="replay:frames")
    parser.add_argument("--weights", default="0.1,0.3,1,3,10")
    parser.add_argument("--max-consults", type=int, default=2)
    parser.add_argument("--prior-strength", type=float, default=20.0)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--unrestricted", action="store_true", help="no chain rule (adopt_attempted off)")
    parser.add_argument("--test", action="store_true", help="also the test split (for the record)")
    parser.add_argument("--test-limit", type=int, default=None, help="only the first N test questions")
    args = parser.parse_args()
    env = make_env(args.env)
    train = outcome_rows(env, env.tasks("train"))
    options = {"max_consults": args.max_consults, "prior_strength": args.prior_strength,
               "adopt_attempted": not args.unrestricted}
    folds = np.array_split(np.random.RandomState(0).permutation(len(train)), args.folds)
    fits = [fit_from_rows(env.models(), [train[i] for i in range(len(train)) if i not in set(fold)], **options)
            for fold in folds]
    full = fit_from_rows(env.models(), train, **options)
    test = outcome_rows(env, env.tasks("test")[:args.test_limit]) if args.test else []
    print(f"{args.env}: {len(train)} train questions, {args.folds}-fold cross-fitted; "
          f"max_consults {args.max_consults}, prior_strength {args.prior_strength:g}"
          f"{', unrestricted' if args.unrestricted else ''}")
    for weight in (float(value) for value in args.weights.split(",")):
        right, dollars = 0, 0.0
        for fold, fit in zip(folds, fits, strict=True):
            fold_right, fold_dollars, _ = play(fit, [train[i] for i in fold], weight)
            right, dollars = right + fold_right, dollars + fold_dollars
        line = f"w={weight:g}: train (cross-fitted) {right / len(train):.4f} ${dollars:.4f}"
        if test:
            test_right, test_dollars, paths = play(full, test, weight)
            line += f" | test {test_right / len(test):.4f} ${test_dollars:.4f}"
        print(line)
        if test:
            for path, count in paths.most_common(4):
                print(f"    {count:4d}  {path}")


if __name__ == "__main__":
    main()
