"""What the counterfactual targets ask for: the accuracy and dollars of the label with the best expected
ToolOrchestra reward under an outcome model (the policy a perfectly fitted orchestrator would follow, greedy).

    python scripts/target_policy.py [--env replay:routerbench] [--floors 0,0.05,0.1,0.2,1]

For each outcome model (per-subtask mean grade, as train/outcome_model.py; TF-IDF logistic regression per model,
as the router baseline predicts) and each cost weight w (reward {accuracy: 1, cost: w}; w = cost_floor under the
accuracy preference, w = 1 is the cost preference): on the train split with 5-fold cross-fitted probabilities
(what is known without the test split), and on the test split with the model fitted on all of train.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np


def subtask_means(fit_tasks, fit_grades, tasks) -> np.ndarray:
    subtasks = np.array([str(task.subtask) for task in fit_tasks])
    rows = []
    for task in tasks:
        same = subtasks == str(task.subtask)
        rows.append(fit_grades[same].mean(0) if same.any() else fit_grades.mean(0))
    return np.stack(rows)


def tfidf_logistic(fit_tasks, fit_grades, tasks, strength: float = 1.0) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from toolorchestra.bench.router import router_text

    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, max_features=20_000)
    features = vectorizer.fit_transform([router_text(task) for task in fit_tasks])
    wanted = vectorizer.transform([router_text(task) for task in tasks])
    columns = []
    for column in range(fit_grades.shape[1]):
        labels = fit_grades[:, column].astype(int)
        if labels.min() == labels.max():
            columns.append(np.full(len(tasks), float(labels[0])))
        else:
            columns.append(LogisticRegression(C=strength, solver="liblinear").fit(features, labels)
                           .predict_proba(wanted)[:, 1])
    return np.stack(columns, axis=1)


def main() -> None:
    from sklearn.model_selection import KFold

    from toolorchestra.bench.policies import outcomes
    from toolorchestra.envs.registry import make_env
    from toolorchestra.reward import expected_group_rewards

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="replay:routerbench")
    parser.add_argument("--floors", default="0,0.05,0.1,0.2,1")
    args = parser.parse_args()
    env = make_env(args.env)
    train, test = outcomes(env, env.tasks("train")), outcomes(env, env.tasks("test"))
    folds = list(KFold(5, shuffle=True, random_state=0).split(train.tasks))
    for name, predict in (("per-subtask mean", subtask_means), ("TF-IDF logistic C=1", tfidf_logistic)):
        crossfit = np.zeros(train.correct.shape)
        for fitted, held in folds:
            crossfit[held] = predict([train.tasks[i] for i in fitted], train.correct[fitted],
                                     [train.tasks[i] for i in held])
        for split, world, probabilities in (("train (5-fold)", train, crossfit),
                                            ("test", test, predict(train.tasks, train.correct, test.tasks))):
            for floor in (float(value) for value in args.floors.split(",")):
                weights = {"accuracy": 1.0, **({"cost": floor} if floor else {})}
                picks = [int(np.argmax(expected_group_rewards([{"cost": cost} for cost in world.cost[row]],
                                                              list(probabilities[row]), weights)))
                         for row in range(len(world.tasks))]
                accuracy = np.mean([world.correct[row, pick] for row, pick in enumerate(picks)])
                dollars = sum(world.cost[row, pick] for row, pick in enumerate(picks))
                top = Counter(env.label(world.models[pick]) for pick in picks).most_common(3)
                print(f"{name:20s} {split:15s} cost weight {floor:<5g} accuracy {accuracy:.4f} ${dollars:8.4f}  "
                      + ", ".join(f"{label} {count}" for label, count in top))


if __name__ == "__main__":
    main()
