"""`toolorchestra verl prepare`: the parquet files verl's RLHFDataset reads, one sampler draw per row.

Columns (verl's names): `prompt` (the chat messages our prompt renders: system prompt with tools and price
table, user message with the preference), `data_source`, `agent_name` (our agent loop), `reward_model`
(style and the task's gold answer, for reading; the env scores episodes), `extra_info` (index, env, task id,
and under "toolorchestra" the draw as JSON: offered tools, label -> model, price factor per model, preference
and its wording). The draw is JSON text rather than nested columns because its keys (models, labels) differ
from row to row, which parquet's struct columns would fill with nulls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.envs.base import Env
from toolorchestra.errors import UserError
from toolorchestra.integrations.verl.config import VerlConfig
from toolorchestra.train.sampler import PromptDraw, TaskSampler, draw_record

SPLITS = {"train": "train.parquet", "test": "test.parquet"}


@dataclass
class PrepareRequest:
    env: str
    out: Path
    config: VerlConfig
    data_dir: Path | None = None
    epochs: int = 1
    max_test_tasks: int | None = 256


def prepare(request: PrepareRequest) -> dict[str, Path]:
    """Write train.parquet and test.parquet under `request.out`; returns them by split."""
    from toolorchestra.envs.registry import make_env

    if request.epochs < 1:
        raise UserError(f"--epochs {request.epochs}: expected at least 1")
    env = make_env(request.env, request.data_dir)
    request.out.mkdir(parents=True, exist_ok=True)
    written = {}
    for offset, split in enumerate(SPLITS):
        limit = request.config.data.max_tasks if split == "train" else request.max_test_tasks
        tasks = env.tasks(request.config.data.split if split == "train" else split)[:limit]
        if not tasks:
            raise UserError(f"--env {request.env}: no tasks in split {split!r}")
        sampler = TaskSampler(env, tasks, request.config.sampler, request.config.seed + offset)
        rounds = request.epochs if split == "train" else 1
        draws = [draw for _ in range(rounds) for draw in sampler.next_batch(len(tasks))]
        rows = [
            verl_row(env, request.env, draw, index, request.config.data.max_question_chars)
            for index, draw in enumerate(draws)
        ]
        written[split] = write_parquet(rows, request.out / SPLITS[split])
    return written


def verl_row(env: Env, env_name: str, draw: PromptDraw, index: int, max_question_chars: int | None) -> dict[str, Any]:
    """One parquet row for `draw`."""
    from toolorchestra.backends.toolcalls import to_plain_messages
    from toolorchestra.integrations.verl import AGENT_NAME, EXTRA_KEY
    from toolorchestra.train.rollout import draw_messages

    # The same opening as every other training path, task rules included (a ToolScale domain's policy).
    messages = draw_messages(draw, max_question_chars)
    plain = to_plain_messages(messages, [tool.schema() for tool in draw.tools])
    prompt = [{"role": str(message["role"]), "content": str(message.get("content") or "")} for message in plain]
    record = {"env": env_name, "draw": draw_record(draw)}
    return {
        "data_source": f"toolorchestra/{env_name}",
        "agent_name": AGENT_NAME,
        "prompt": prompt,
        "ability": "orchestration",
        "reward_model": {"style": "rule", "ground_truth": "" if draw.task.gold is None else str(draw.task.gold)},
        "extra_info": {
            "index": index,
            "env": env_name,
            "split": draw.task.split,
            "task_id": draw.task.id,
            "tools": [tool.name for tool in draw.tools],
            EXTRA_KEY: json.dumps(record),
        },
    }


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a parquet file `prepare` wrote (for checks and tests)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
