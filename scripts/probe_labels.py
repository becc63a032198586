"""Where a counterfactual checkpoint puts its probability, per preference, on the first N test tasks.

    python scripts/probe_labels.py runs/NAME/checkpoints/step_N 60 [configs/train/CONFIG.yaml [SPLIT]]

SPLIT (default test) may be train, to look without choosing anything on the test split; its tasks come last
first there (the end of the train split), which a short run has mostly not drawn.

Every label's answer call is scored (not sampled) under the accuracy and the cost preference, as training scores
it (the system message once, tasks in chunks of 8); printed per preference: accuracy and dollars of the most likely label, how often each label is the most likely (overall and
per subset), and the mean probability of the top labels. Much cheaper than an eval run, so it suits a quick
look during training; the eval is what counts.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3, 4):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    import torch

    from toolorchestra.agent.preference import Preference
    from toolorchestra.agent.prompt import wording_for
    from toolorchestra.train.checkpoint import load_trainable
    from toolorchestra.train.config import load_train_config
    from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe
    from toolorchestra.train.prefix import SharedPrefix, common_prefix_length
    from toolorchestra.train.trainer import Trainer

    checkpoint, count = Path(argv[0]), int(argv[1])
    config = load_train_config(Path(argv[2] if len(argv) > 2 else "configs/train/routerbench-counterfactual.yaml"))
    split = argv[3] if len(argv) > 3 else "test"
    config.data.split, config.trainer.torch_threads, config.model.init_checkpoint = split, 1, None
    trainer = Trainer(config, run_dir=Path("/tmp/probe_labels_run"))
    load_trainable(checkpoint, trainer.policy)
    trainer.policy.eval()
    learner = CounterfactualRecipe(trainer)
    # the split's order mixes the three subsets; on train, the last tasks
    tasks = trainer.tasks[:count] if split == "test" else trainer.tasks[-count:]
    preferences = {"accuracy": Preference(), "cost": Preference(accuracy=1.0, cost=1.0)}
    for name, preference in preferences.items():
        picks: collections.Counter[str] = collections.Counter()
        by_subset: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        mass: dict[str, float] = collections.defaultdict(float)
        correct, dollars = 0, 0.0
        draws = [dataclasses.replace(trainer.sampler.draw(task), preference=preference, wording=wording_for(task.id))
                 for task in tasks]
        outcomes = [learner.outcomes(draw) for draw in draws]
        prompts, continuations = [], []
        for draw, outcome in zip(draws, outcomes):
            calls = learner.call_ids(outcome)
            stem = min(common_prefix_length(calls), min(len(call) for call in calls) - 1)
            prompts.append(learner.prompt_ids(draw) + calls[0][:stem])
            continuations.append([call[stem:] for call in calls])
        with torch.no_grad():  # the system message once, then the tasks in chunks of 8
            shared = SharedPrefix(trainer.policy, prompts, trainer.rollout.pad_id)
            all_scores = []
            for start in range(0, len(prompts), 8):
                rows = list(range(start, min(start + 8, len(prompts))))
                all_scores.extend(shared.score(rows, [continuations[row] for row in rows]))
        for task, outcome, scores in zip(tasks, outcomes, all_scores):
            best = int(torch.argmax(scores))
            for label, p in zip(outcome.labels, torch.softmax(scores, -1).tolist()):
                mass[label] += p / len(tasks)
            picks[outcome.labels[best]] += 1
            by_subset[(task.subtask or "all").split(".")[0]][outcome.labels[best]] += 1
            correct += outcome.correct[best]
            dollars += outcome.cost[best]
        print(f"{name}: accuracy {correct / len(tasks):.3f}, ${dollars:.4f}, picks {dict(picks.most_common())}")
        print("   mean q", {label: round(p, 3) for label, p in sorted(mass.items(), key=lambda item: -item[1])[:6]})
        for subset, counter in sorted(by_subset.items()):
            print(f"   {subset}: {dict(counter.most_common(4))}")
    learner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
