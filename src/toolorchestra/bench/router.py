"""A learned router in the style of RouteLLM: predict from the prompt whether each model will be right.

One logistic regression per model (liblinear; bench/predictors.py) over TF-IDF features of the question
(the last block of a few-shot prompt, plus a token naming the subtask), trained on the train split's recorded grades.
For a task the router picks the model with the best predicted accuracy minus a price term:

    argmax_j  p_j(x) - threshold * mean_cost_j / reference_cost

`reference_cost` is the train mean cost per call of the most accurate model. The threshold reads as
"the predicted accuracy gain that is worth paying one more reference-model call": 0 picks the model
most likely to be right whatever it costs, large values pick the cheapest model. Sweeping it draws
the router's accuracy-vs-cost curve (RouteLLM sweeps its strong/weak threshold the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from toolorchestra.bench.predictors import TfidfCorrectness, router_text

__all__ = ["SWEEP", "CorrectnessRouter", "router_text"]

SWEEP = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0)


class CorrectnessRouter(TfidfCorrectness):
    """Per-model correctness classifiers over shared TF-IDF features (bench/predictors.py, C = 0.3): `fit(tasks,
    correct)` with `correct[i, j]` whether model j answered train task i correctly, then `predict(tasks)`, the
    predicted probability of being correct, shape (len(tasks), len(models))."""

    def __init__(self, models: Sequence[str], mean_cost: Sequence[float], reference_cost: float, seed: int = 0) -> None:
        super().__init__(strength=0.3, seed=seed)
        self.models = list(models)
        self.mean_cost = np.asarray(mean_cost, dtype=float)
        self.relative_cost = self.mean_cost / reference_cost if reference_cost > 0 else np.zeros_like(self.mean_cost)

    def choose(self, probabilities: np.ndarray, threshold: float) -> str:
        """The model with the best predicted accuracy net of `threshold` times its relative price."""
        return self.models[int(np.argmax(probabilities - threshold * self.relative_cost))]
