"""The verl agent loop of the orchestrator, and the AgentLoopManager that gives verl the group reward.

Importing this module imports verl and registers `OrchestratorAgentLoop` in verl's agent-loop registry under
`AGENT_NAME` (verl's `@register`); `verl train` also names it in an agent-loop config file, which verl's
workers load in their own processes. For each parquet row the loop plays one episode (episode.py): verl's
rollout server samples every orchestrator turn from the token ids so far (token-in/token-out, stopping at
the end-of-turn token), our environment's tools run the calls, and the loop returns prompt ids, response ids
and the response mask (policy tokens 1, tool outputs and chat-template text 0).

The reward needs all `rollout.n` rollouts of a prompt at once (min-max over the group), and verl 0.9 scores
rule rewards one rollout at a time while rollouts stream. The one stage that sees the whole batch before
advantages are computed is the AgentLoopManager, which verl lets a config replace
(`actor_rollout_ref.rollout.agent.agent_loop_manager_class`): `GroupRewardAgentLoopManager` runs verl's own
manager, then writes `rm_scores` from `toolorchestra.reward` over each uid group (reward.py). In validation
(groups of one) the score stays the episode's correctness.
"""

from __future__ import annotations

import time
from typing import Any, cast
from uuid import uuid4

import numpy as np
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)
from verl.protocol import DataProto
from verl.utils.ray_utils import auto_await

from toolorchestra.integrations.verl import AGENT_NAME, EXTRA_KEY
from toolorchestra.integrations.verl.episode import EpisodeSettings, play_row
from toolorchestra.integrations.verl.reward import group_reward_scores
from toolorchestra.train.rollout import TurnRenderer


def episode_settings(config: Any) -> EpisodeSettings:
    """Our episode knobs from verl's config: its `toolorchestra` section, and the turn cap from verl's own
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns."""
    section = config.get("toolorchestra") if config is not None else None
    # the section is a DictConfig, so to_container gives a dict (typed as any container it could give)
    values = dict(cast(dict[str, Any], OmegaConf.to_container(section, resolve=True))) if section is not None else {}
    turns = OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns", default=None)
    if turns is not None:
        values["max_assistant_turns"] = int(turns)
    return EpisodeSettings(**values)


@register(AGENT_NAME)
class OrchestratorAgentLoop(AgentLoopBase):
    """One orchestrator episode per row, over our env's tools (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        settings = episode_settings(self.config)
        end_of_turn = TurnRenderer(self.tokenizer).end_of_turn_id
        request_id = uuid4().hex  # one id per episode: the server's prefix cache sticks to it
        timing = {"generate": 0.0}

        async def sample(token_ids: list[int], max_new_tokens: int) -> list[int]:
            params = {**sampling_params, "max_tokens": max_new_tokens, "stop_token_ids": [end_of_turn]}
            started = time.perf_counter()
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=token_ids, sampling_params=params
            )
            timing["generate"] += time.perf_counter() - started
            return list(output.token_ids)

        started = time.perf_counter()
        result = await play_row(kwargs["extra_info"], self.tokenizer, sample, settings)
        total = time.perf_counter() - started
        record = result.record
        features = record["features"]
        return AgentLoopOutput(
            prompt_ids=result.prompt_ids,
            response_ids=result.response_ids,
            response_mask=result.response_mask,
            reward_score=float(record["correct"]),
            num_turns=result.num_turns,
            metrics=AgentLoopMetrics(
                generate_sequences=timing["generate"], tool_calls=max(0.0, total - timing["generate"])
            ),
            extra_fields={
                EXTRA_KEY: record,
                "reward_extra_info": {
                    "acc": float(record["correct"]),
                    "valid": float(record["valid"]),
                    "cost_usd": float(features.get("cost", 0.0)),
                    "latency_s": float(features.get("latency", 0.0)),
                },
            },
        )


def apply_group_rewards(output: DataProto, uids: Any) -> list[float]:
    """Replace `output`'s rm_scores with the group rewards of its rollouts (grouped by uid); the score sits
    on the last response token, where verl's own reward paths put it."""
    records = list(output.non_tensor_batch[EXTRA_KEY])
    scores = group_reward_scores(records, [str(uid) for uid in uids])
    prompt_length = output.batch["prompts"].size(1)
    last = output.batch["attention_mask"][:, prompt_length:].sum(dim=1) - 1
    import torch

    rm_scores = torch.zeros_like(output.batch["response_mask"], dtype=torch.float32)
    rm_scores[torch.arange(len(scores)), last] = torch.tensor(scores, dtype=torch.float32)
    output.batch["rm_scores"] = rm_scores
    output.non_tensor_batch["group_reward"] = np.array(scores, dtype=np.float64)
    keys = list(output.meta_info.get("reward_extra_keys", []))
    output.meta_info["reward_extra_keys"] = keys + (["group_reward"] if "group_reward" not in keys else [])
    return scores


class GroupRewardAgentLoopManager(AgentLoopManager):
    """verl's AgentLoopManager, then the group reward over each prompt's rollouts (training batches only)."""

    @auto_await
    async def generate_sequences(self, prompts: DataProto) -> DataProto:
        output = await super().generate_sequences(prompts)
        if not prompts.meta_info.get("validate", False):
            apply_group_rewards(output, prompts.non_tensor_batch["uid"])
        return output
