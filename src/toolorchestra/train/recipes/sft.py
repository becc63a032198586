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
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.engine import take_turn
from toolorchestra.agent.trajectory import Step, Trajectory
from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.toolcalls import render_tool_call
from toolorchestra.envs.base import Task
from toolorchestra.errors import TrainingError
from toolorchestra.train.grpo import pad_rows
from toolorchestra.train.recipes.counterfactual import label_outcomes
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
    """(token ids, loss mask) pairs of oracle answer calls. The errors of the answer calls tried are appended
    to `errors` when given."""
    tasks = trainer.tasks[: trainer.config.sft.max_tasks]
    return _collect(trainer, tasks, lambda draw: _answer_example(trainer, draw, errors))


def build_gold_examples(trainer: Trainer, errors: list[str] | None = None) -> list[Example]:
    """Whole episodes that replay each task's gold actions (toolscale: `meta["gold_actions"]`), one tool call
    per turn, through the drawn tools, then answer with the gold reply. Rendered token for token as the
    rollout engine renders an episode: the policy's calls carry loss mask 1, the prompt, the template text
    between turns and the tool outputs 0. A task whose gold action fails here gives no example (its error
    goes to `errors`)."""
    # A seeded sample, not the first tasks: a toolscale split is ordered by domain.
    count = min(trainer.config.sft.max_tasks, len(trainer.tasks))
    rng = random.Random(trainer.config.seed)
    tasks = (
        sample_by_subtask(trainer.tasks, count, rng)
        if trainer.config.sft.sample == "by_subtask"
        else rng.sample(trainer.tasks, count)
    )
    with_gold = [task for task in tasks if isinstance(task.meta.get("gold_actions"), list)]
    return _collect(trainer, with_gold, lambda draw: _gold_episode(trainer, draw, errors))


def _collect(
    trainer: Trainer, tasks: list[Task], example: Callable[[PromptDraw], Coroutine[Any, Any, Example | None]]
) -> list[Example]:
    """`example(draw)` of each task's draw, where it gives one. The draws come from a copy of the sampler's
    RNG state, so the GRPO prompt stream is the same with or without the warm start."""
    from toolorchestra.train.sampler import TaskSampler

    sampler = TaskSampler(trainer.env, trainer.tasks, trainer.config.sampler, trainer.config.seed + 1)
    examples = []
    loop = asyncio.new_event_loop()
    try:
        for task in tasks:
            found = loop.run_until_complete(example(sampler.draw(task)))
            if found is not None:
                examples.append(found)
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


async def _gold_episode(trainer: Trainer, draw: PromptDraw, errors: list[str] | None) -> Example | None:
    """Play the task's gold calls one per turn through the episode engine, rendering each turn as the rollout
    engine does."""
    from toolorchestra.envs.toolscale.tasks import gold_answer

    actions = draw.task.meta["gold_actions"]
    calls = [
        ToolCall(id=f"call_{turn}", name=str(action["name"]), arguments=dict(action["arguments"]))
        for turn, action in enumerate(actions)
    ]
    calls.append(ToolCall(id=f"call_{len(actions)}", name="answer", arguments={"answer": gold_answer(draw.task)}))
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


async def _answer_example(trainer: Trainer, draw: PromptDraw, errors: list[str] | None) -> Example | None:
    """The prompt and the best correct answer call of `draw` (None when no label is right)."""
    algorithm = trainer.config.algorithm
    # The RL stage's cost floor applies here too, so the warm start teaches the labels GRPO will reward.
    outcome = await label_outcomes(trainer.env, draw, algorithm.cost_floor, algorithm.cost_scale)
    if outcome is None:
        return None
    if errors is not None:
        errors.extend(outcome.errors)
    right = [index for index, correct in enumerate(outcome.correct) if correct]
    if not right:
        return None
    top = max(outcome.rewards[index] for index in right)
    tied = [index for index in right if outcome.rewards[index] >= top - 1e-12]
    # With several equally good labels (e.g. all right under the accuracy preference) "first" would teach
    # "pick the first label in the table"; a random one (seeded by the task) teaches nothing spurious.
    best = tied[0] if trainer.config.sft.tie_break == "first" else random.Random(draw.task.id).choice(tied)
    renderer = trainer.renderer
    messages = draw_messages(draw, trainer.config.data.max_question_chars)
    prompt = renderer.prompt_ids(messages, [tool.schema() for tool in draw.tools])
    target = renderer.encode(render_tool_call(outcome.call(best))) + [renderer.end_of_turn_id]
    return prompt + target, [0] * len(prompt) + [1] * len(target)


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
