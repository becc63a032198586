"""The rollout engine: B x G multi-turn episodes of a local HF policy, advanced together.

Token-in/token-out: an episode is one growing list of token ids. The policy's generated ids are appended
as they came out of `generate` (loss mask 1, including the end-of-turn token the policy chose); the
chat-template text between turns and the tool outputs are rendered, tokenized on their own and appended
with mask 0. Decoded text is only ever parsed, never re-tokenized, so the ids the loss scores are exactly
the ids that were sampled.

Each turn is played by the episode engine (agent/engine.py) that the live loop uses: this engine only
observes it at the token level (ids, loss masks, KV caches). So the trajectory's cost, latency and calls per
tool are computed the same way and `env.score` sees what it sees in evaluation. Two deliberate differences: the
orchestrator's own latency is its latency prior (overhead + tokens / throughput) because batched generation
has no per-episode wall time, and tools without a model that report no latency count 0 s instead of their
microseconds of wall time, so that rewards are reproducible (exact resume).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.engine import serving, take_turn
from toolorchestra.agent.prompt import initial_messages, task_rules
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.toolcalls import parse_tool_calls, to_plain_messages
from toolorchestra.catalog.schema import LatencyPrior, Price
from toolorchestra.envs.base import Env, Task
from toolorchestra.reward import trajectory_features
from toolorchestra.tools.base import Tool
from toolorchestra.train.config import RolloutConfig
from toolorchestra.train.grpo import pad
from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    import torch

Sampler = Callable[[list[int], int], Awaitable[Sequence[int]]]
"""A policy for `RolloutEngine.play`: (episode token ids so far, max new tokens) -> the new token ids."""


@dataclass
class Episode:
    """One rollout: its draw, its token ids and loss mask, and the trajectory the env scores."""

    draw: PromptDraw
    group: int
    tools: dict[str, Tool]
    messages: list[dict[str, Any]]
    trajectory: Trajectory
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    prompt_length: int = 0
    policy_turns: list[list[int]] = field(default_factory=list)
    done: bool = False
    token_capped: bool = False
    correct: bool = False
    reward: float = 0.0
    advantage: float = 0.0

    @property
    def valid(self) -> bool:
        """Produced a final answer and never wrote a malformed tool call."""
        return self.trajectory.final_answer is not None and self.trajectory.malformed_calls() == 0

    def features(self) -> dict[str, float]:
        """Reward features of the trajectory (toolorchestra.reward.trajectory_features)."""
        return trajectory_features(self.trajectory, self.correct)


def draw_messages(draw: PromptDraw, max_question_chars: int | None) -> list[dict[str, Any]]:
    """The opening messages of an episode of `draw` (system prompt with tools, prices, preference and rules;
    the question), as every training path renders them."""
    return initial_messages(
        draw.tools, question_text(draw.task, max_question_chars), draw.preference, draw.wording, task_rules(draw.task)
    )


def question_text(task: Task, limit: int | None) -> str:
    """The question as the orchestrator sees it. Like evaluation's orchestrator policy (bench/policies.py,
    short_prompt), a task's `meta["query"]` (RouterBench: the last block of the few-shot prompt) replaces
    the prompt; then it is cut to its last `limit` characters, where the question and its options are.
    Tools still receive the full task."""
    text = str(task.meta.get("query") or task.prompt)
    if limit is None or len(text) <= limit:
        return text
    return "..." + text[-limit:]


class TurnRenderer:
    """Chat-template text around turns, tokenized separately from the policy's ids."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.end_of_turn_id = _end_of_turn_id(tokenizer)
        end_text = tokenizer.convert_ids_to_tokens(self.end_of_turn_id)
        probe = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ]
        probe_text = tokenizer.apply_chat_template(probe, tokenize=False)
        cut = probe_text.rfind(end_text)
        if cut < 0:
            raise ValueError(f"the chat template does not close assistant turns with {end_text!r}")
        self._probe = probe
        self._probe_text = probe_text
        # What the template writes after the assistant's end token (ChatML: a newline).
        self._after_end = probe_text[cut + len(end_text) :]

    def prompt_ids(self, messages: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            to_plain_messages(messages, schemas), tokenize=False, add_generation_prompt=True
        )
        return self.encode(text)

    def between_turns_ids(self, new_messages: list[dict[str, Any]]) -> list[int]:
        """Ids of everything after the policy's end-of-turn token up to the next assistant header."""
        plain = to_plain_messages(new_messages, None)
        full = self.tokenizer.apply_chat_template(self._probe + plain, tokenize=False, add_generation_prompt=True)
        if not full.startswith(self._probe_text):
            raise ValueError("the chat template renders earlier turns differently once later turns are added")
        return self.encode(self._after_end + full[len(self._probe_text) :])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _end_of_turn_id(tokenizer: Any) -> int:
    for token in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        token_id = tokenizer.convert_tokens_to_ids(token)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id and token_id is not None:
            return token_id
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no end-of-turn or eos token")
    return int(tokenizer.eos_token_id)


class RolloutEngine:
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        env: Env,
        config: RolloutConfig,
        *,
        model_name: str = "orchestrator",
        price: Price | None = None,
        max_question_chars: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.env = env
        self.config = config
        self.model_name = model_name
        self.price = price or Price()
        self.latency = LatencyPrior(**config.orchestrator_latency.model_dump())
        self.max_question_chars = max_question_chars
        self.renderer = TurnRenderer(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.renderer.end_of_turn_id
        self.prefill_stats = {"prefill_tokens": 0, "prefill_tokens_saved": 0}
        self._loop = asyncio.new_event_loop()
        self._prefix_cache: Any = None

    def close(self) -> None:
        self._loop.close()

    # ---- episodes -------------------------------------------------------------------------------
    def start(self, draws: list[PromptDraw]) -> list[Episode]:
        episodes = []
        for group, draw in enumerate(draws):
            schemas = [tool.schema() for tool in draw.tools]
            messages = draw_messages(draw, self.max_question_chars)
            prompt_ids = self.renderer.prompt_ids(messages, schemas)
            for _ in range(self.config.n):
                trajectory = Trajectory(
                    task_id=draw.task.id,
                    env=self.env.name,
                    split=draw.task.split,
                    policy=self.model_name,
                    question=draw.task.prompt,
                    preference=draw.preference.weights(),
                    messages=[dict(m) for m in messages],
                )
                episodes.append(
                    Episode(
                        draw=draw,
                        group=group,
                        tools={t.name: t for t in draw.tools},
                        messages=trajectory.messages,
                        trajectory=trajectory,
                        token_ids=list(prompt_ids),
                        loss_mask=[0] * len(prompt_ids),
                        prompt_length=len(prompt_ids),
                    )
                )
        return episodes

    def run(self, draws: list[PromptDraw]) -> list[Episode]:
        """Play every draw `rollout.n` times to the end and score the episodes."""
        episodes = self.start(draws)
        self._prefix_cache = None
        if self.config.cache_prompt_prefix:
            from toolorchestra.backends.prefix_cache import PrefixCache

            # Valid for this call only: the weights change after it. Two entries per chunk: this turn's
            # and the previous turn's, from which the next turn's prefix is extended.
            chunks = -(-len(episodes) // self.config.generation_batch_size)
            self._prefix_cache = PrefixCache(keep=max(4, 2 * chunks))
        try:
            self._play(episodes)
        finally:
            self._prefix_cache = None
        for episode in episodes:
            self._score(episode)
        return episodes

    def _play(self, episodes: list[Episode]) -> None:
        for turn in range(self.config.max_assistant_turns):
            active = [episode for episode in episodes if not episode.done and self._room(episode) > 0]
            for episode in episodes:
                if not episode.done and self._room(episode) <= 0:
                    self._stop(episode, capped=True)
            if not active:
                break
            generated = self.generate(active, share_prefill=turn == 0 and self.config.share_prompt_prefill)
            for episode, ids in zip(active, generated, strict=True):
                self._append_policy_turn(episode, ids)
            self._loop.run_until_complete(self._act_all(active, turn, generated))
        for episode in episodes:
            if not episode.done:
                self._stop(episode, capped=False)

    async def play(self, episode: Episode, sample: Sampler) -> Episode:
        """Play one episode to the end with `sample(token_ids, max_new_tokens)` as the policy, then score it.

        The turn logic is `run`'s, one episode at a time: where `run` samples a whole batch with
        `model.generate`, an external rollout server (verl's vLLM/SGLang servers, integrations/verl) samples
        here. `sample` returns the new ids; they are cut at the first end-of-turn and to the room left."""
        for turn in range(self.config.max_assistant_turns):
            room = self._room(episode)
            if room <= 0:
                self._stop(episode, capped=True)
                break
            ids = self._cut(list(await sample(list(episode.token_ids), room)), room)
            self._append_policy_turn(episode, ids)
            await self._act(episode, turn, ids)
            if episode.done:
                break
        if not episode.done:
            self._stop(episode, capped=False)
        self._score(episode)
        return episode

    def _room(self, episode: Episode) -> int:
        return min(self.config.response_length, self.config.max_episode_tokens - len(episode.token_ids))

    def _stop(self, episode: Episode, capped: bool) -> None:
        episode.done = True
        episode.token_capped = capped
        episode.trajectory.stop_reason = "max_turns"
        if capped:
            episode.trajectory.score_details["token_cap"] = True

    def _append_policy_turn(self, episode: Episode, ids: list[int]) -> None:
        episode.policy_turns.append(list(ids))
        episode.token_ids.extend(ids)
        episode.loss_mask.extend([1] * len(ids))
        if not ids or ids[-1] != self.renderer.end_of_turn_id:
            # Cut off by the length cap: close the turn as the template would, outside the loss.
            episode.token_ids.append(self.renderer.end_of_turn_id)
            episode.loss_mask.append(0)

    async def _act_all(self, episodes: list[Episode], turn: int, generated: list[list[int]]) -> None:
        await asyncio.gather(*(self._act(episode, turn, ids) for episode, ids in zip(episodes, generated, strict=True)))

    async def _act(self, episode: Episode, turn: int, ids: list[int]) -> None:
        """Parse the turn and play it through the episode engine; append the observation's ids."""
        body = ids[:-1] if ids and ids[-1] == self.renderer.end_of_turn_id else ids
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        prose, calls, errors = parse_tool_calls(text)
        prompt_tokens = len(episode.token_ids) - len(ids)
        step = Step(
            turn=turn,
            kind="orchestrator",
            name=self.model_name,
            model=self.model_name,
            output=text,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(ids),
            cost_usd=self.price.cost(prompt_tokens, len(ids)),
            latency_s=self.latency.seconds(len(ids)),
            error="; ".join(errors) or None,
        )
        record = await take_turn(
            episode.trajectory, episode.tools, episode.draw.task, step, calls, errors, prose=prose, wall_clock=False
        )
        if episode.trajectory.stop_reason == "answer":
            episode.done = True
            return
        next_ids = self.renderer.between_turns_ids(record.messages)
        episode.token_ids.extend(next_ids)
        episode.loss_mask.extend([0] * len(next_ids))

    def _score(self, episode: Episode) -> None:
        with serving(episode.draw.task):
            score = self.env.score(episode.draw.task, episode.trajectory)
        episode.correct = bool(score.correct)
        episode.trajectory.correct = episode.correct
        episode.trajectory.score_details.update(score.details)

    # ---- generation -----------------------------------------------------------------------------
    def generate(self, episodes: list[Episode], share_prefill: bool = False) -> list[list[int]]:
        """Sample one turn for every episode, in batches; returns the new ids (up to and with end-of-turn)."""
        outputs: list[list[int]] = []
        size = self.config.generation_batch_size
        if share_prefill:
            size = max(self.config.n, size - size % self.config.n)  # keep groups whole in a batch
        for start in range(0, len(episodes), size):
            chunk = episodes[start : start + size]
            outputs.extend(self._generate_chunk(chunk, share_prefill))
        return outputs

    def _generate_chunk(self, chunk: list[Episode], share_prefill: bool) -> list[list[int]]:
        import torch

        device = self.model.device
        max_new = max(self._room(episode) for episode in chunk)
        sequences = [episode.token_ids for episode in chunk]
        input_ids, attention = pad(sequences, self.pad_id, device, left=True)
        kwargs: dict[str, Any] = {}
        cached = None
        if self._prefix_cache is not None:  # [shared prefix][padding][own suffix], prefix KV kept across turns
            saved_before = self._prefix_cache.tokens_saved
            cached = self._prefix_cache.layout(self.model, sequences, self.pad_id)
            self.prefill_stats["prefill_tokens_saved"] += self._prefix_cache.tokens_saved - saved_before
        if cached is not None:
            input_ids, attention, kwargs["past_key_values"] = cached
            input_ids, attention = input_ids.to(device), attention.to(device)
        else:
            copies = self._identical_runs(chunk) if share_prefill else None
            if copies is not None and input_ids.shape[1] > 1:
                kwargs["past_key_values"] = self._shared_prefill(input_ids, attention, copies)
        self.prefill_stats["prefill_tokens"] += int(attention.sum())
        with torch.no_grad():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                do_sample=True,
                temperature=self.config.temperature,
                top_p=self.config.top_p,
                top_k=0,
                max_new_tokens=max_new,
                eos_token_id=self.renderer.end_of_turn_id,
                pad_token_id=self.pad_id,
                **kwargs,
            )
        new_tokens = output[:, input_ids.shape[1] :].tolist()
        return [self._cut(ids, self._room(episode)) for ids, episode in zip(new_tokens, chunk, strict=True)]

    def _identical_runs(self, chunk: list[Episode]) -> int | None:
        """n when the chunk is whole groups of n identical prompts in a row (the first turn), else None."""
        n = self.config.n
        if n < 2 or len(chunk) % n:
            return None
        for start in range(0, len(chunk), n):
            first = chunk[start].token_ids
            if any(chunk[start + k].token_ids != first for k in range(1, n)):
                return None
        return n

    def _shared_prefill(self, input_ids: torch.Tensor, attention: torch.Tensor, copies: int) -> Any:
        """Run each distinct prompt (but its last token) once and repeat its KV cache `copies` times."""
        import torch
        from transformers import DynamicCache

        unique_ids = input_ids[::copies, :-1]
        unique_mask = attention[::copies, :-1]
        positions = (unique_mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        with torch.no_grad():
            # Only the cache is wanted: logits_to_keep=1 skips the vocabulary projection of every
            # prompt position (measured at ~0.3 s per step on the benchmark's 2 x 523-token prompts).
            self.model(
                input_ids=unique_ids,
                attention_mask=unique_mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        cache.batch_repeat_interleave(copies)
        self.prefill_stats["prefill_tokens_saved"] += int(unique_mask.sum()) * (copies - 1)
        return cache

    def _cut(self, ids: list[int], room: int) -> list[int]:
        """Keep the ids up to and including the first end-of-turn, at most `room` of them."""
        ids = ids[:room]
        if self.renderer.end_of_turn_id in ids:
            ids = ids[: ids.index(self.renderer.end_of_turn_id) + 1]
        return ids
