"""How well each outcome model predicts whether a model answers a train question right: 5-fold
cross-validated log-loss over every (question, model) of a replay world's train split.

    python scripts/outcome_model_cv.py [--env replay:routerbench] [--folds 5]

Candidates: the per-subtask mean grade (train/outcome_model.py's SubtaskOutcomeModel) and the `router`
baseline's predictor, one TF-IDF logistic regression per model (bench/router.py), at several strengths C.
The lower the log-loss, the better the model's probabilities; the counterfactual targets use the best.
"""

from __future__ import annotations

import argparse

import numpy as np


def log_loss(probabilities: np.ndarray, grades: np.ndarray) -> float:
    clipped = np.clip(probabilities, 1e-4, 1 - 1e-4)
    return float(-np.mean(grades * np.log(clipped) + (1 - grades) * np.log(1 - clipped)))


def main() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold

    from toolorchestra.bench.policies import outcomes
    from toolorchestra.bench.router import router_text
    from toolorchestra.envs.registry import make_env

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="replay:routerbench")
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    env = make_env(args.env)
    train = outcomes(env, env.tasks("train"))
    texts = [router_text(task) for task in train.tasks]
    grades = train.correct.astype(int)
    subtasks = np.array([str(task.subtask) for task in train.tasks])
    folds = list(KFold(args.folds, shuffle=True, random_state=0).split(texts))
    print(f"{args.env} train: {len(texts)} questions x {grades.shape[1]} models, {args.folds}-fold log-loss")

    predicted = np.zeros(grades.shape)
    for fitted, held in folds:
        for subtask in set(subtasks[held]):
            seen = fitted[subtasks[fitted] == subtask]
            predicted[held[subtasks[held] == subtask]] = grades[seen].mean(0) if len(seen) else grades[fitted].mean(0)
    print(f"  per-subtask mean grade          {log_loss(predicted, grades):.4f}")
    predicted = np.zeros(grades.shape)
    for fitted, held in folds:
        predicted[held] = grades[fitted].mean(0)
    print(f"  overall mean grade              {log_loss(predicted, grades):.4f}")
    for strength in (0.03, 0.1, 0.3, 1.0, 3.0):
        predicted = np.zeros(grades.shape)
        for fitted, held in folds:
            vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=20_000)
            features = vectorizer.fit_transform([texts[i] for i in fitted])
            held_features = vectorizer.transform([texts[i] for i in held])
            for column in range(grades.shape[1]):
                labels = grades[fitted, column]
                if labels.min() == labels.max():
                    predicted[held, column] = labels[0]
                    continue
                classifier = LogisticRegression(C=strength, solver="liblinear").fit(features, labels)
                predicted[held, column] = classifier.predict_proba(held_features)[:, 1]
        print(f"  TF-IDF logistic, C={strength:<5g}        {log_loss(predicted, grades):.4f}")


if __name__ == "__main__":
    main()
