"""The sft recipe: supervised steps that teach the call format, alone (`recipe: sft`, saved as checkpoint
step_0 for a later run's model.init_checkpoint) or as the warm start of a grpo/counterfactual run (sft.steps > 0).

`sft.targets` picks the examples: answer_labels (replay worlds) or gold_actions (toolscale: whole multi-turn
episodes replaying each task's gold actions).

Examples are found, not hand-written: for each of the first `sft.max_tasks` training tasks the sampler draws
tools, prices and a preference as for GRPO; every label of the answer tool is tried once (through the real
tool, so replay worlds answer from their records), each attempt is scored by the env, and the correct attempt
with the best ToolOrchestra reward under the drawn preference becomes the target turn
`<tool_call>{"name": answer, "arguments": {"model": LABEL}}</tool_call>`. Tasks that no label solves give no
example. The loss is cross-entropy on the target turn's tokens only (prompt tokens are masked), the same
token-in/token-out rendering as the rollouts. No example at all stops the run with a TrainingError naming the
first distinct tool errors seen while trying labels (e.g. a replay world that cannot count tokens).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.engine import take_turn, try_each
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.toolcalls import render_tool_call
from toolorchestra.envs.base import Task
from toolorchestra.errors import TrainingError
from toolorchestra.reward import group_rewards, trajectory_features, with_cost_floor
from toolorchestra.tools.llm import AnswerTool
from toolorchestra.train.grpo import pad_rows
from toolorchestra.train.rollout import draw_messages
from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    from toolorchestra.train.trainer import Trainer


Example = tuple[list[int], list[int]]  # (token ids, loss mask)


def build_examples(trainer: Trainer, errors: list[str] | None = None) -> list[Example]:
    """The warm start's examples for `sft.targets` (answer_labels or gold_actions)."""
    if trainer.config.sft.targets == "gold_actions":
        return build_gold_examples(trainer, errors)
    return build_answer_examples(trainer, errors)


def build_answer_examples(trainer: Trainer, errors: list[str] | None = None) -> list[Example]:
    """(token ids, loss mask) pairs of oracle answer calls. Uses a copy of the sampler's RNG state so the
    GRPO prompt stream is the same with or without the warm start. The errors of the answer calls tried are
    appended to `errors` when given."""
    from toolorchestra.train.sampler import TaskSampler

    sampler = TaskSampler(trainer.env, trainer.tasks, trainer.config.sampler, trainer.config.seed + 1)
    renderer = trainer.renderer
    examples = []
    loop = asyncio.new_event_loop()
    try:
        for task in trainer.tasks[: trainer.config.sft.max_tasks]:
            draw = sampler.draw(task)
            call = loop.run_until_complete(_best_answer_call(trainer, draw, errors))
            if call is None:
                continue
            messages = draw_messages(draw, trainer.config.data.max_question_chars)
            prompt = renderer.prompt_ids(messages, [tool.schema() for tool in draw.tools])
            target = renderer.encode(render_tool_call(call)) + [renderer.end_of_turn_id]
            examples.append((prompt + target, [0] * len(prompt) + [1] * len(target)))
    finally:
        loop.close()
    return examples


def build_gold_examples(trainer: Trainer, errors: list[str] | None = None) -> list[Example]:
    """Whole episodes that replay each task's gold actions (toolscale: `meta["gold_actions"]`), one tool call
    per turn, through the drawn tools, then answer with the gold reply. Rendered token for token as the
    rollout engine renders an episode: the policy's calls carry loss mask 1, the prompt, the template text
    between turns and the tool outputs 0. A task whose gold action fails here gives no example (its error
    goes to `errors`)."""
    from toolorchestra.envs.toolscale.tasks import gold_answer
    from toolorchestra.train.sampler import TaskSampler

    sampler = TaskSampler(trainer.env, trainer.tasks, trainer.config.sampler, trainer.config.seed + 1)
    # A seeded sample, not the first tasks: a toolscale split is ordered by domain.
    count = min(trainer.config.sft.max_tasks, len(trainer.tasks))
    rng = random.Random(trainer.config.seed)
    tasks = (
        sample_by_subtask(trainer.tasks, count, rng)
        if trainer.config.sft.sample == "by_subtask"
        else rng.sample(trainer.tasks, count)
    )
    examples = []
    loop = asyncio.new_event_loop()
    try:
        for task in tasks:
            actions = task.meta.get("gold_actions")
            if not isinstance(actions, list):
                continue
            draw = sampler.draw(task)
            calls = [
                ToolCall(id=f"call_{turn}", name=str(action["name"]), arguments=dict(action["arguments"]))
                for turn, action in enumerate(actions)
            ]
            calls.append(ToolCall(id=f"call_{len(actions)}", name="answer", arguments={"answer": gold_answer(task)}))
            example = loop.run_until_complete(_gold_episode(trainer, draw, calls, errors))
            if example is not None:
                examples.append(example)
    finally:
        loop.close()
    return examples


def sample_by_subtask(tasks: list[Task], count: int, rng: random.Random) -> list[Task]:
    """`count` tasks taking in turn one from each subtask (shuffled within it), so a family with few tasks
    (a multi-step write) is as present as one with thousands (lookups), until it runs out."""
    strata: dict[str | None, list[Task]] = {}
    for task in tasks:
        strata.setdefault(task.subtask, []).append(task)
    queues = [rng.sample(members, len(members)) for members in strata.values()]
    picked: list[Task] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            if queue and len(picked) < count:
                picked.append(queue.pop())
    return picked


async def _gold_episode(
    trainer: Trainer, draw: PromptDraw, calls: list[ToolCall], errors: list[str] | None
) -> Example | None:
    """Play the gold calls one per turn through the episode engine, rendering each turn as the rollout
    engine does."""
    renderer = trainer.renderer
    tools = {tool.name: tool for tool in draw.tools}
    messages = draw_messages(draw, trainer.config.data.max_question_chars)
    ids = renderer.prompt_ids(messages, [tool.schema() for tool in draw.tools])
    mask = [0] * len(ids)
    trajectory = Trajectory(task_id=draw.task.id, messages=messages)
    for turn, call in enumerate(calls):
        text = render_tool_call(call)
        policy_ids = renderer.encode(text) + [renderer.end_of_turn_id]
        ids, mask = ids + policy_ids, mask + [1] * len(policy_ids)
        step = Step(turn=turn, kind="orchestrator", name="gold", output=text)
        record = await take_turn(trajectory, tools, draw.task, step, [call], [], prose="", wall_clock=False)
        result = record.results[0]
        if call.name not in tools or result.error and call.name == "answer":
            if errors is not None:
                errors.append(f"{draw.task.id}: {call.name}: {result.error}")
            return None
        if result.final:
            return ids, mask
        between = renderer.between_turns_ids(record.messages)
        ids, mask = ids + between, mask + [0] * len(between)
    if errors is not None:
        errors.append(f"{draw.task.id}: the gold episode never reached the answer tool")
    return None


async def _best_answer_call(trainer: Trainer, draw: PromptDraw, errors: list[str] | None = None) -> ToolCall | None:
    answer = next((tool for tool in draw.tools if isinstance(tool, AnswerTool) and tool.labels), None)
    if answer is None:
        return None
    calls = [ToolCall(id="call_0", name=answer.name, arguments={"model": label}) for label in answer.labels]
    attempts = await try_each(trainer.env, draw.task, {answer.name: answer}, calls)
    if errors is not None:
        errors.extend(attempt.result.error for attempt in attempts if attempt.result.error)
    correct = [attempt.correct for attempt in attempts]
    if not any(correct):
        return None
    features = [trajectory_features(attempt.trajectory, attempt.correct) for attempt in attempts]
    algorithm = trainer.config.algorithm
    # The RL stage's cost floor applies here too, so the warm start teaches the labels GRPO will reward.
    weights = with_cost_floor(draw.preference.weights(), algorithm.cost_floor, algorithm.cost_scale)
    rewards = group_rewards(features, correct, weights)
    right = [index for index in range(len(calls)) if correct[index]]
    top = max(rewards[index] for index in right)
    tied = [index for index in right if rewards[index] >= top - 1e-12]
    # With several equally good labels (e.g. all right under the accuracy preference) "first" would teach
    # "pick the first label in the table"; a random one (seeded by the task) teaches nothing spurious.
    best = tied[0] if trainer.config.sft.tie_break == "first" else random.Random(draw.task.id).choice(tied)
    return calls[best]


def run_sft(trainer: Trainer, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Supervised steps on the examples with a separate AdamW (the GRPO optimizer state stays fresh).
    `on_step(step, loss)` is called after each step (the progress bar)."""
    import torch

    config = trainer.config.sft
    errors: list[str] = []
    examples = build_examples(trainer, errors)
    if not examples:
        raise TrainingError(_no_examples_message(trainer, errors))
    optimizer = torch.optim.AdamW(trainer.trainable_parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(trainer.config.seed)
    trainer.policy.train()
    losses = []
    groups = _prompt_groups(examples) if config.targets == "gold_actions" else [list(range(len(examples)))]
    for _ in range(config.steps):
        # One prompt group per batch (a ToolScale domain: same policy and tool schemas), so that with
        # actor.stop_gradient_prefix its long shared prompt runs once per step.
        group = groups[int(torch.randint(len(groups), (1,), generator=generator))] if len(groups) > 1 else groups[0]
        picks = torch.randint(len(group), (config.batch_size,), generator=generator).tolist()
        batch = [examples[group[index]] for index in picks]
        ids, attention, mask = pad_rows(batch, trainer.rollout.pad_id, trainer.policy.device)
        logprobs, _ = trainer.logprobs(ids, attention, mask, 1.0)
        loss = -(logprobs * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        trainer.optimizer_step(optimizer)
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(len(losses), losses[-1])
    trainer.policy.eval()
    return {
        "sft_examples": len(examples),
        "sft_steps": config.steps,
        "sft_loss_first": losses[0],
        "sft_loss_last": losses[-1],
        "sft_losses": losses,
    }


def _prompt_groups(examples: list[Example], min_shared: int = 256) -> list[list[int]]:
    """Indices of examples grouped by a shared prompt start of `min_shared` tokens (one group per ToolScale
    domain), in first-seen order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, (ids, _) in enumerate(examples):
        groups.setdefault(tuple(ids[:min_shared]), []).append(index)
    return list(groups.values())


def _no_examples_message(trainer: Trainer, errors: list[str]) -> str:
    from toolorchestra.train.health import first_distinct, format_errors

    tasks = len(trainer.tasks[: trainer.config.sft.max_tasks])
    message = (
        f"the SFT warm start (sft.steps: {trainer.config.sft.steps}) found no example in the first {tasks} "
        f"training tasks of {trainer.config.data.env}"
    )
    if errors:
        return f"{message}: {len(errors)} attempts failed. First errors: {format_errors(first_distinct(errors))}"
    if trainer.config.sft.targets == "gold_actions":
        return (
            f"{message}: sft.targets is gold_actions but no task carries meta gold_actions (the toolscale envs "
            "do); use sft.targets: answer_labels, or sft.steps: 0 to train without the warm start"
        )
    return (
        f"{message}: no answer-tool label answered any of them correctly (or the env offers no answer tool "
        "with labels); set sft.steps: 0 to train without the warm start"
    )
