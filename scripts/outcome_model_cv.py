"""How well each outcome model predicts whether a model answers a train question right: 5-fold
cross-validated log-loss over every (question, model) of a replay world's train split.

    python scripts/outcome_model_cv.py [--env replay:routerbench] [--folds 5]

Candidates (bench/predictors.py): the per-subtask mean grade (what train/outcome_model.py's SubtaskOutcomeModel
uses), the overall mean grade, and the `router` baseline's predictor, one TF-IDF logistic regression per model,
at several strengths C. The lower the log-loss, the better the model's probabilities; the counterfactual
targets use the best.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def main() -> None:
    from toolorchestra.bench.policies import outcomes
    from toolorchestra.bench.predictors import (
        Predictor,
        SubtaskMeanGrades,
        TfidfCorrectness,
        cross_fit,
        folds,
        log_loss,
    )
    from toolorchestra.envs.registry import make_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="replay:routerbench")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    env = make_env(args.env)
    train = outcomes(env, env.tasks("train"))
    grades = train.correct.astype(int)
    splits = folds(len(train.tasks), args.folds)
    print(f"{args.env} train: {len(train.tasks)} questions x {grades.shape[1]} models, {args.folds}-fold log-loss")
    candidates: list[tuple[str, Callable[[], Predictor]]] = [
        ("per-subtask mean grade", SubtaskMeanGrades), ("overall mean grade", lambda: SubtaskMeanGrades(False))]
    candidates += [(f"TF-IDF logistic, C={strength:<5g}", lambda strength=strength: TfidfCorrectness(strength))
                   for strength in (0.03, 0.1, 0.3, 1.0, 3.0)]
    for name, make in candidates:
        print(f"  {name:31s} {log_loss(cross_fit(make, train.tasks, grades, splits), grades):.4f}")


if __name__ == "__main__":
    main()
