"""What the counterfactual targets ask for: the accuracy and dollars of the label with the best expected
ToolOrchestra reward under an outcome model (the policy a perfectly fitted orchestrator would follow, greedy).

    python scripts/target_policy.py [--env replay:routerbench] [--floors 0,0.05,0.1,0.2,1]

For each outcome model (bench/predictors.py: per-subtask mean grade, as train/outcome_model.py; TF-IDF logistic
regression per model, as the router baseline predicts) and each cost weight w (reward {accuracy: 1, cost: w};
w = cost_floor under the accuracy preference, w = 1 is the cost preference): on the train split with 5-fold
cross-fitted probabilities (what is known without the test split), and on the test split with the model fitted
on all of train.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Callable

import numpy as np


def main() -> None:
    from toolorchestra.bench.policies import outcomes
    from toolorchestra.bench.predictors import (
        Predictor,
        SubtaskMeanGrades,
        TfidfCorrectness,
        cross_fit,
        folds,
        target_picks,
    )
    from toolorchestra.envs.registry import make_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="replay:routerbench")
    parser.add_argument("--floors", default="0,0.05,0.1,0.2,1")
    args = parser.parse_args()
    env = make_env(args.env)
    train, test = outcomes(env, env.tasks("train")), outcomes(env, env.tasks("test"))
    splits = folds(len(train.tasks))
    candidates: list[tuple[str, Callable[[], Predictor]]] = [
        ("per-subtask mean", SubtaskMeanGrades), ("TF-IDF logistic C=1", lambda: TfidfCorrectness(1.0))]
    for name, make in candidates:
        crossfit = cross_fit(make, train.tasks, train.correct, splits)
        fitted = make().fit(train.tasks, train.correct).predict(test.tasks)
        for split, world, probabilities in (("train (5-fold)", train, crossfit), ("test", test, fitted)):
            for floor in (float(value) for value in args.floors.split(",")):
                weights = {"accuracy": 1.0, **({"cost": floor} if floor else {})}
                picks = target_picks(world.cost, probabilities, weights)
                accuracy = np.mean([world.correct[row, pick] for row, pick in enumerate(picks)])
                dollars = sum(world.cost[row, pick] for row, pick in enumerate(picks))
                top = Counter(env.label(world.models[pick]) for pick in picks).most_common(3)
                print(f"{name:20s} {split:15s} cost weight {floor:<5g} accuracy {accuracy:.4f} ${dollars:8.4f}  "
                      + ", ".join(f"{label} {count}" for label, count in top))


if __name__ == "__main__":
    main()
