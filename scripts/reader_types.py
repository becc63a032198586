"""How well the reader policy's question reader tells a world's task types apart (backends/question_reader.py).

    .venv/bin/python scripts/reader_types.py replay:routerbench [--split test] [--model smollm2-135m]

Calibrates on the train split's calibration sample (the one the profiles and `--policy reader` use), reads every
question of --split, and prints, per task type, how many questions the reader's most likely type gets right.
Question vectors come from the on-disk cache when an eval has read them already.
"""

from __future__ import annotations

import argparse
from collections import Counter

from toolorchestra.backends.question_reader import QuestionReader
from toolorchestra.bench.policies import CALIBRATION_PER_TYPE, question_text
from toolorchestra.envs.registry import make_env
from toolorchestra.envs.replay.profiles import calibration_sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env")
    parser.add_argument("--split", default="test")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    env = make_env(args.env)
    sample = [task for task in calibration_sample(env.tasks("train"), CALIBRATION_PER_TYPE) if task.subtask]
    reader = QuestionReader(args.model)
    reader.calibrate([question_text(task) for task in sample], [str(task.subtask) for task in sample])
    tasks = [task for task in env.tasks(args.split) if task.subtask]
    posteriors = reader.posteriors([question_text(task) for task in tasks])
    total, right = Counter(), Counter()
    for task, posterior in zip(tasks, posteriors, strict=True):
        total[task.subtask] += 1
        right[task.subtask] += max(posterior, key=lambda subset: posterior[subset]) == task.subtask
    print(f"{args.env} {args.split}: calibrated on {len(sample)} train questions; most likely type right")
    for subset in sorted(total):
        print(f"  {subset}: {right[subset]}/{total[subset]}")
    print(f"  all: {sum(right.values())}/{sum(total.values())} ({sum(right.values()) / sum(total.values()):.3f})")


if __name__ == "__main__":
    main()
