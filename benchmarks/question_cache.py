"""What keeping the stored question vectors in memory saves on each question the reader reads for a user.

`run`/`serve --policy reader` place every user question among the calibration questions: one forward pass of
SmolLM2 over the question, then a vote of its nearest calibration vectors. Those vectors live in an on-disk
cache (one file per model, every question any run has kept). The reader used to read that file for every
question; it now keeps it in memory and reads it again only when another process rewrote it.

Both ways run in this process over the same cold questions (new ones, never cached: as a user's), one at a time,
in alternating blocks of 10:
- **baseline**: the file read for every question (the memory copy dropped before each), as before;
- **kept**: the vectors from memory.

Prints each way's median and mean wall time per question, the ratio of medians, the size of the vector file,
and the share of one core the kept way used.

Run: .venv/bin/python benchmarks/question_cache.py [--questions 60] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

BLOCK = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.questions < 1:
        parser.error("--questions must be at least 1")

    import torch

    from toolorchestra.backends.question_reader import QuestionReader
    from toolorchestra.bench.policies import question_text
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.profiles import calibration_sample

    torch.set_num_threads(args.threads)
    world = make_env("replay:routerbench")
    sample = calibration_sample(world.tasks("train"), 50)
    reader = QuestionReader(keep_questions=False)
    reader.calibrate([question_text(task) for task in sample], [str(task.subtask) for task in sample])
    path = reader._cache_path()
    stored = len(reader._stored())
    # cold questions: test questions made new by a nonce, so no vector of theirs is stored anywhere
    nonce = uuid.uuid4().hex[:8]
    questions = [f"{question_text(task)} ({nonce})" for task in world.tasks("test")[: args.questions]]
    reader.posteriors([f"warm up ({nonce})"])

    wall: dict[str, list[float]] = {"baseline": [], "kept": []}
    kept_cpu = 0.0
    for start in range(0, len(questions), BLOCK):
        for way in ("baseline", "kept"):
            for question in questions[start : start + BLOCK]:
                if way == "baseline":
                    reader._kept_stamp = None  # forget the memory copy: the file is read, as before
                cpu, began = time.process_time(), time.perf_counter()
                reader.posteriors([question + way])
                wall[way].append(time.perf_counter() - began)
                if way == "kept":
                    kept_cpu += time.process_time() - cpu

    print(
        f"{len(questions)} cold replay:routerbench test questions, one at a time, {args.threads} torch thread(s); "
        f"vector file {path.stat().st_size / 2**20:.1f} MiB, {stored} vectors"
    )
    for way, label in (("baseline", "file read per question"), ("kept", "vectors kept in memory")):
        values = wall[way]
        print(
            f"  {label:24s} median {statistics.median(values) * 1000:6.1f} ms  "
            f"mean {statistics.mean(values) * 1000:6.1f} ms"
        )
    ratio = statistics.median(wall["baseline"]) / statistics.median(wall["kept"])
    print(f"  ratio baseline / kept (medians): {ratio:.2f}x")
    print(f"  the kept way used {kept_cpu / sum(wall['kept']):.2f} of one core while it ran")


if __name__ == "__main__":
    main()
