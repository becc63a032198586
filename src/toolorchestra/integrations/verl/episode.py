"""One verl row played as one episode.

A row's `extra_info` carries the sampler's draw (tools, labels, prices, preference, wording) as
`train/sampler.py`'s `draw_record`; `play_row` rebuilds the draw over the env and plays it with our rollout
engine's turn logic (`RolloutEngine.play`), so prompts, chat-template text between turns, tool calls, loss
mask and scoring are the single-machine trainer's, token for token. Only the sampler differs: verl's rollout
server here, `model.generate` there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from toolorchestra.envs.base import Env
from toolorchestra.train.config import LatencyConfig, RolloutConfig, _Strict
from toolorchestra.train.rollout import Episode, RolloutEngine, Sampler


class EpisodeSettings(_Strict):
    """The episode knobs the agent loop reads from the verl config's `toolorchestra` section (written by
    `verl train`; names as in configs/train/)."""

    response_length: int = Field(96, ge=1, description="max new tokens per orchestrator turn")
    max_assistant_turns: int = Field(3, ge=1)
    max_episode_tokens: int = Field(2048, ge=16, description="cap on prompt + all turns of one episode")
    max_question_chars: int | None = Field(None, ge=16)
    cost_floor: float = Field(0.0, ge=0)
    orchestrator_latency: LatencyConfig = Field(default_factory=LatencyConfig)
    data_dir: str | None = Field(
        None, description="the envs' data dir (default: $TOOLORCHESTRA_DATA or ../shared/data)"
    )
    model_name: str = "orchestrator"

    def rollout_config(self) -> RolloutConfig:
        return RolloutConfig(
            n=1,
            response_length=self.response_length,
            max_assistant_turns=self.max_assistant_turns,
            max_episode_tokens=self.max_episode_tokens,
            share_prompt_prefill=False,
            orchestrator_latency=self.orchestrator_latency,
        )


@dataclass
class EpisodeOutput:
    """What verl's AgentLoopOutput needs, plus our reward record."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    num_turns: int
    record: dict[str, Any]
    episode: Episode = field(repr=False)


_ENVS: dict[tuple[str, str | None], Env] = {}
_ENGINES: dict[tuple[int, int, str], RolloutEngine] = {}


def env_of(name: str, data_dir: str | Path | None) -> Env:
    """The env `name`, built once per process (a verl worker plays many rows of it)."""
    key = (name, str(data_dir) if data_dir else None)
    if key not in _ENVS:
        from toolorchestra.envs.registry import make_env

        _ENVS[key] = make_env(name, data_dir)
    return _ENVS[key]


def engine_for(env: Env, tokenizer: Any, settings: EpisodeSettings) -> RolloutEngine:
    """A model-less rollout engine (its turn logic only), one per env, tokenizer and settings."""
    key = (id(env), id(tokenizer), settings.model_dump_json())
    if key not in _ENGINES:
        _ENGINES[key] = RolloutEngine(
            None,
            tokenizer,
            env,
            settings.rollout_config(),
            model_name=settings.model_name,
            max_question_chars=settings.max_question_chars,
        )
    return _ENGINES[key]


def row_extra(extra_info: Any) -> dict[str, Any]:
    """Our record inside a row's extra_info, with a clear error when the row was not written by `verl prepare`."""
    from toolorchestra.integrations.verl import EXTRA_KEY

    record = extra_info.get(EXTRA_KEY) if isinstance(extra_info, dict) else None
    if isinstance(record, str):  # the parquet keeps the draw as JSON text (integrations/verl/data.py)
        import json

        try:
            record = json.loads(record)
        except json.JSONDecodeError as error:
            raise ValueError(f"extra_info.{EXTRA_KEY}: not valid JSON ({error})") from None
    if not isinstance(record, dict) or "env" not in record or "draw" not in record:
        raise ValueError(
            f"extra_info.{EXTRA_KEY}: missing or malformed (expected env and draw, as `toolorchestra "
            f"verl prepare` writes); got {type(extra_info).__name__}"
        )
    return record


async def play_row(
    extra_info: dict[str, Any], tokenizer: Any, sample: Sampler, settings: EpisodeSettings, env: Env | None = None
) -> EpisodeOutput:
    """Play the row's draw to the end with `sample` as the policy; score it; split prompt and response."""
    from toolorchestra.reward import with_cost_floor
    from toolorchestra.train.sampler import draw_from_record

    record = row_extra(extra_info)
    env = env or env_of(record["env"], settings.data_dir)
    draw_data = record["draw"]
    task = _task(env, draw_data["task_id"], draw_data.get("split", "train"))
    draw = draw_from_record(env, task, draw_data)
    engine = engine_for(env, tokenizer, settings)
    episode = engine.start([draw])[0]
    await engine.play(episode, sample)
    cut = episode.prompt_length
    reward_record = {
        "task_id": task.id,
        "correct": bool(episode.correct),
        "valid": episode.valid,
        "features": episode.features(),
        "preference": with_cost_floor(draw.preference.weights(), settings.cost_floor),
        "token_capped": episode.token_capped,
        "turns": len(episode.policy_turns),
    }
    return EpisodeOutput(
        prompt_ids=episode.token_ids[:cut],
        response_ids=episode.token_ids[cut:],
        response_mask=episode.loss_mask[cut:],
        num_turns=len(episode.messages),
        record=reward_record,
        episode=episode,
    )


_TASKS: dict[tuple[int, str], dict[str, Any]] = {}


def _task(env: Env, task_id: str, split: str) -> Any:
    key = (id(env), split)
    if key not in _TASKS:
        _TASKS[key] = {task.id: task for task in env.tasks(split)}
    task = _TASKS[key].get(task_id)
    if task is None:
        raise ValueError(f"extra_info: env {env.name!r} has no task {task_id!r} in split {split!r}")
    return task
