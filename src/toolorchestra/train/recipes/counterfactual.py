"""Counterfactual label training: the exact expected reward over every answer label, in one forward pass.

A replay world knows what each model answered to each task, so for a training prompt the outcome of every
answer call the orchestrator could make (`answer(model=LABEL)` for each offered label) is known without
sampling. `label_outcomes` runs every such call through the real answer tool and scores it with the env;
the ToolOrchestra reward (toolorchestra.reward.group_rewards) is then computed over that counterfactual
group of calls, exactly as GRPO computes it over G sampled episodes.

The policy's probability of each call is the probability of its whole token sequence. With q the policy
restricted to the valid answer calls (q_l ∝ p(call_l | prompt)), the loss of one prompt is

    - Σ_l q_l A_l          exact expected advantage; A = the group z-score of the rewards over labels
    - entropy_coeff H(q)   keeps the label distribution from collapsing early
    - format_coef log Σ_l p(call_l | prompt)   likelihood of writing some valid answer call at all

The first term's gradient is the exact policy gradient over labels (no sampling noise, every label's
reward used); the last term teaches the call format, so no SFT warm start is needed. All label calls of a
prompt share its prompt and the calls' common opening tokens, and all prompts share the system message:
train/prefix.py computes each of these once. This is the recipe beside GRPO (`recipe: counterfactual`, its
knobs in the `counterfactual:` section); it needs an env with recorded outcomes and an answer tool with labels,
and it trains the one routing decision (or, with `targets: escalation`, consult-then-answer), not multi-turn
tool use. It reads the trainer only through its public interface (`renderer`, `policy`, `optimizer_step`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.engine import run_calls, try_each
from toolorchestra.agent.preference import Preference
from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.toolcalls import render_tool_call
from toolorchestra.envs.base import Env
from toolorchestra.errors import TrainingError, UserError
from toolorchestra.reward import (
    batch_advantages,
    expected_group_rewards,
    group_rewards,
    trajectory_features,
    with_cost_floor,
)
from toolorchestra.tools.llm import AnswerTool, ExpertTool
from toolorchestra.train.escalation import EscalationTargets, History, follow
from toolorchestra.train.outcome_model import SubtaskOutcomeModel
from toolorchestra.train.prefix import SharedPrefix, common_prefix_length
from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    import torch

    from toolorchestra.train.trainer import Trainer


@dataclass
class LabelOutcomes:
    """What every answer label of one draw would have given: correctness, dollars, seconds, reward."""

    tool: str
    labels: list[str]
    models: list[str]
    correct: Sequence[float]  # 0/1 recorded grades, or P(right) under escalation targets
    cost: list[float]
    latency: list[float]
    rewards: list[float]
    errors: list[str]
    features: list[dict[str, float]] = field(default_factory=list)
    targets: list[float] | None = None  # what the policy learns from; None: the recorded `rewards`
    actions: list[ToolCall] | None = None  # the calls scored; None: answer(model=LABEL) for each label
    history: list[dict[str, Any]] = field(default_factory=list)  # messages of earlier turns (escalation states)

    @property
    def learning_targets(self) -> list[float]:
        """The rewards the step's advantages are computed from: an outcome model's expected rewards when
        counterfactual.targets says so, else the recorded ones."""
        return self.rewards if self.targets is None else self.targets

    def call(self, index: int) -> ToolCall:
        if self.actions is not None:
            return self.actions[index]
        return ToolCall(id="call_0", name=self.tool, arguments={"model": self.labels[index]})


def profile_targets(draw: PromptDraw, outcome: LabelOutcomes) -> list[float]:
    """Each label's expected reward from what the draw's prompt shows and nothing else: its price and its
    profile's accuracy on the question's task type, as the reader computes it (agent/reader.expected_rewards,
    with the question's type known). Outcome-model targets use the whole train split's accuracies and each
    question's recorded dollars, which the prompt does not show, so two prompts that read alike could ask for
    different labels; these targets are a function of the prompt and the task type alone."""
    from toolorchestra.agent.reader import expected_rewards, offers
    from toolorchestra.envs.replay.tokens import count_tokens

    try:
        pool = offers(draw.tools, outcome.tool)
    except UserError as error:  # a label without a profile: the config did not show them
        raise TrainingError(f"counterfactual.targets profiles needs sampler.profiles: true ({error})") from None
    rewards = expected_rewards(
        pool, {str(draw.task.subtask): 1.0}, count_tokens(draw.task.prompt), draw.preference.weights()
    )
    by_label = {offer.label: reward for offer, reward in zip(pool, rewards, strict=True)}
    return [by_label[label] for label in outcome.labels]


async def label_outcomes(
    env: Env, draw: PromptDraw, cost_floor: float = 0.0, cost_scale: float = 1.0
) -> LabelOutcomes | None:
    """Run `answer(model=LABEL)` for every offered label through the real tool and score it; None when the
    draw offers no answer tool with labels. `cost_floor`, `cost_scale`: see toolorchestra.reward.with_cost_floor."""
    answer = next((tool for tool in draw.tools if isinstance(tool, AnswerTool) and tool.labels), None)
    if answer is None:
        return None
    labels = list(answer.labels)
    calls = [ToolCall(id="call_0", name=answer.name, arguments={"model": label}) for label in labels]
    attempts = await try_each(env, draw.task, {answer.name: answer}, calls)
    correct = [attempt.correct for attempt in attempts]
    features = [trajectory_features(attempt.trajectory, attempt.correct) for attempt in attempts]
    rewards = group_rewards(features, correct, with_cost_floor(draw.preference.weights(), cost_floor, cost_scale))
    return LabelOutcomes(
        answer.name,
        labels,
        [answer.labels[label] for label in labels],
        correct,
        [attempt.trajectory.cost_usd for attempt in attempts],
        [attempt.trajectory.latency_s for attempt in attempts],
        rewards,
        [attempt.result.error for attempt in attempts if attempt.result.error],
        features,
    )


async def escalation_outcomes(
    draw: PromptDraw,
    targets: EscalationTargets,
    cost_floor: float = 0.0,
    cost_scale: float = 1.0,
    top_k: int | None = None,
    siblings: int = 0,
) -> list[LabelOutcomes]:
    """The states `draw`'s question passes through when the orchestrator consults models one at a time and
    follows the escalation model's best actions (train/escalation.py), each with every action's value there.

    A state's actions: `expert(model=L)` for every label not yet consulted (while consultations are left) and
    `answer(model=L)` for every label (adopting L's answer if it was consulted). The consultations that lead
    from one state to the next run through the real expert tool, so the policy is trained on the very
    answers it will read; whether a model attempted the question is the recorded fact the targets condition
    on, and the policy has to read it from the answer's text. `top_k`: keep the k best actions of each state
    (scoring every one of the ~2 x labels actions costs most of a step; the format term, log p(one of the k),
    then pushes the policy's mass into the best actions and the distillation orders them). `siblings`: also
    the states after the root's next best `siblings` consultations, each with that model's real answer: more
    answers to read, attempted and declined, per question."""
    expert = next((tool for tool in draw.tools if isinstance(tool, ExpertTool) and tool.labels), None)
    answer = next((tool for tool in draw.tools if isinstance(tool, AnswerTool) and tool.labels), None)
    if expert is None or answer is None:
        raise TrainingError(
            "counterfactual.targets escalation needs an expert and an answer tool with "
            "model labels in every draw (sampler.tool_keep_prob: 1.0 keeps the expert tool)"
        )
    label_of = {model: label for label, model in answer.labels.items() if model in targets.index}
    consult_label = {model: label for label, model in expert.labels.items()}
    if any(consult_label.get(model) != label for model, label in label_of.items()):
        raise TrainingError(
            "counterfactual.targets escalation needs the expert and the answer tool to "
            "name each model by the same label (an answer adopts a consultation by its label); "
            "use sampler.label_style: env"
        )
    weights = with_cost_floor(draw.preference.weights(), cost_floor, cost_scale)
    w_cost, w_latency = float(weights.get("cost", 0.0)), float(weights.get("latency", 0.0))
    model = targets.model_for(draw.task)
    attempted = targets.attempted_by(draw.task)
    visited, _ = follow(model, attempted, w_cost, w_latency)

    def state_outcome(state: History, history: list[dict[str, Any]], turn: int) -> LabelOutcomes:
        here = model.estimates(state)
        values = [
            (act, value)
            for act, value in model.action_values(state, w_cost, w_latency).items()
            if model.models[act.model] in label_of
        ]
        if top_k is not None:
            values = sorted(values, key=lambda pair: -pair[1])[:top_k]
        calls = [
            ToolCall(
                id=f"call_{turn}",
                name=expert.name if act.consult else answer.name,
                arguments={"model": label_of[model.models[act.model]]},
            )
            for act, _ in values
        ]
        return LabelOutcomes(
            tool=answer.name,
            labels=[str(call.arguments["model"]) for call in calls],
            models=[model.models[act.model] for act, _ in values],
            correct=[float(here.right[act.model]) for act, _ in values],
            cost=[
                0.0 if any(act.model == seen for seen, _ in state) else float(here.cost[act.model]) for act, _ in values
            ],
            latency=[float(here.latency[act.model]) for act, _ in values],
            rewards=[value for _, value in values],
            errors=[],
            targets=[value for _, value in values],
            actions=calls,
            history=list(history),
        )

    async def consulted(history: list[dict[str, Any]], index: int, turn: int) -> list[dict[str, Any]]:
        call = ToolCall(id=f"call_{turn}", name=expert.name, arguments={"model": label_of[model.models[index]]})
        (result,) = await run_calls({expert.name: expert}, [call], draw.task, history, wall_clock=False)
        if result.error:
            raise TrainingError(
                f"escalation: consulting {call.arguments['model']} on task {draw.task.id} failed: {result.error}"
            )
        return history + [
            {"role": "assistant", "content": "", "tool_calls": [call.to_openai()]},
            {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.observation()},
        ]

    history: list[dict[str, Any]] = []
    states = []
    for turn, (state, action) in enumerate(visited):
        states.append(state_outcome(state, history, turn))
        if not action.consult:
            break
        history = await consulted(history, action.model, turn)
    if siblings and model.max_consults > 1:
        root = model.action_values((), w_cost, w_latency)
        taken = visited[0][1]
        others = sorted(
            (act for act in root if act.consult and act != taken and model.models[act.model] in label_of),
            key=lambda act: -root[act],
        )
        for act in others[:siblings]:
            states.append(state_outcome(((act.model, attempted[act.model]),), await consulted([], act.model, 0), 1))
    return states


SPLIT_ROWS_ABOVE = 16  # calls per state above which a state is scored in one row per tool


class CounterfactualRecipe:
    """One counterfactual step for a `Trainer`: outcomes (cached per draw), prompts, scoring, loss, update."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self._outcomes: dict[str, LabelOutcomes | None] = {}
        self._loop = asyncio.new_event_loop()
        self._outcome_model: SubtaskOutcomeModel | None = None
        self._escalation: EscalationTargets | None = None
        self._states: dict[str, list[LabelOutcomes]] = {}
        section = trainer.config.counterfactual
        if section.targets == "outcome_model":
            self._outcome_model = SubtaskOutcomeModel(trainer.env, trainer.tasks)
        elif section.targets == "escalation":
            self._escalation = EscalationTargets(
                trainer.env,
                trainer.tasks,
                section.escalation.max_consults,
                section.escalation.prior_strength,
                seed=trainer.config.seed,
            )

    def outcomes(self, draw: PromptDraw) -> LabelOutcomes | None:
        key = json.dumps(
            [
                draw.task.id,
                [tool.name for tool in draw.tools],
                draw.price_factors,
                draw.preference.weights(),
                [list(getattr(tool, "labels", {}).items()) for tool in draw.tools],
            ],
            sort_keys=True,
        )
        if key not in self._outcomes:
            algorithm = self.trainer.config.algorithm
            outcome = self._loop.run_until_complete(
                label_outcomes(self.trainer.env, draw, algorithm.cost_floor, algorithm.cost_scale)
            )
            if outcome is not None and self._outcome_model is not None:
                p_correct = self._outcome_model.probabilities(draw.task, outcome.models)
                weights = with_cost_floor(draw.preference.weights(), algorithm.cost_floor, algorithm.cost_scale)
                outcome.targets = expected_group_rewards(outcome.features, p_correct, weights)
            elif outcome is not None and self.trainer.config.counterfactual.targets == "profiles":
                outcome.targets = profile_targets(draw, outcome)
            self._outcomes[key] = outcome
        return self._outcomes[key]

    def draw_outcomes(self, draw: PromptDraw) -> list[LabelOutcomes]:
        """The scored decisions of one draw: its one answer decision, or with escalation targets every state
        its question passes through."""
        if self._escalation is None:
            outcome = self.outcomes(draw)
            return [] if outcome is None else [outcome]
        key = json.dumps(
            [
                draw.task.id,
                draw.preference.weights(),
                [list(getattr(tool, "labels", {}).items()) for tool in draw.tools],
            ],
            sort_keys=True,
        )
        if key not in self._states:
            algorithm, escalation = self.trainer.config.algorithm, self.trainer.config.counterfactual.escalation
            self._states[key] = self._loop.run_until_complete(
                escalation_outcomes(
                    draw,
                    self._escalation,
                    algorithm.cost_floor,
                    algorithm.cost_scale,
                    escalation.top_k,
                    escalation.siblings,
                )
            )
        return self._states[key]

    def prompt_ids(self, draw: PromptDraw, outcome: LabelOutcomes | None = None) -> list[int]:
        from toolorchestra.train.rollout import draw_messages

        trainer = self.trainer
        messages = draw_messages(draw, trainer.config.data.max_question_chars)
        if outcome is not None:
            messages += outcome.history
        return trainer.renderer.prompt_ids(messages, [tool.schema() for tool in draw.tools])

    def call_ids(self, outcome: LabelOutcomes) -> list[list[int]]:
        renderer = self.trainer.renderer
        calls = [
            renderer.encode(render_tool_call(outcome.call(index))) + [renderer.end_of_turn_id]
            for index in range(len(outcome.labels))
        ]
        if self.trainer.config.counterfactual.score == "label":
            calls = label_spans(calls)
        return calls

    def step(self, draws: list[PromptDraw]) -> tuple[dict[str, Any], list[Any]]:
        """Every label's outcome and the exact expected reward under the policy, no rollouts: the step's
        metrics (and no episodes)."""
        import torch

        trainer = self.trainer
        config = trainer.config
        started = time.perf_counter()
        usable = [(draw, outcome) for draw in draws for outcome in self.draw_outcomes(draw)]
        stems: list[list[int]] = []
        if not usable:
            raise TrainingError(
                "recipe counterfactual: no draw of this step offers an answer tool "
                "with model labels; this estimator trains the answer-label decision only"
            )
        errors = sorted({error for _, outcome in usable for error in outcome.errors})
        if all(len(outcome.errors) == len(outcome.labels) for _, outcome in usable):
            raise TrainingError(
                "every answer call of this step failed, so there is nothing to learn from; first "
                f"errors: {'; '.join(errors[:3])}"
            )
        # One scored row per state and tool: a state's calls of one tool share their opening tokens
        # (`<tool_call>` ... `"model": "`), which join the row's prompt, so only the short label tails are scored
        # per call; the opening's log-prob is added back to each call of the row (it cancels in q when the
        # state offers one tool, and weighs the tools against each other when it offers two).
        prompts, calls, row_state, row_members = [], [], [], []
        for state, (draw, outcome) in enumerate(usable):
            full = self.call_ids(outcome)
            base = self.prompt_ids(draw, outcome)
            # a few calls: one row (their tool names scored in the tails); many: a row per tool, whose tails
            # are then the labels alone
            groups = _members_by_tool(outcome) if len(full) > SPLIT_ROWS_ABOVE else [list(range(len(full)))]
            for members in groups:
                part = [full[i] for i in members]
                stem = min(common_prefix_length(part), min(len(call) for call in part) - 1)
                prompts.append(base + part[0][:stem])
                calls.append([call[stem:] for call in part])
                stems.append(part[0][:stem])
                row_state.append(state)
                row_members.append(members)
        prepared = time.perf_counter()
        trainer.policy.train()
        # log p(call_l | prompt) for every label. Prompts that share a prefix run it once: the system message of
        # the whole step, or (preference_contrast, or several rows per state) the system message and question
        # of each task, whose rows differ only after it (the preference sentence, earlier turns, the tool).
        # Each chunk's graph is freed after its backward (train/prefix.py), which bounds memory.
        actor, algorithm, section = config.actor, config.algorithm, config.counterfactual
        stats, total_loss = _Stats(), 0.0
        # the stems are scored as prompt tails, so no shared prefix may reach into them
        limits = [len(prompt) - len(stem) for prompt, stem in zip(prompts, stems, strict=True)]
        # advantages over each state's counterfactual group of calls, scaled as algorithm.norm_adv_by_std says
        step_advantages = batch_advantages(
            [outcome.learning_targets for _, outcome in usable], algorithm.norm_adv_by_std
        )
        by_task = config.sampler.preference_contrast or len(prompts) > len(usable)
        for shared, local, indices in self._chunks(
            prompts, [usable[row_state[row]][0].task.id for row in range(len(prompts))], limits, by_task
        ):
            scores = shared.score(
                local,
                [calls[i] for i in indices],
                config.rollout.temperature,
                prompt_tails=[len(stems[i]) for i in indices],
            )
            rows_of_state: dict[int, list[tuple[int, Any]]] = {}
            for row, scored in zip(indices, scores, strict=True):
                rows_of_state.setdefault(row_state[row], []).append((row, scored))
            losses: list[Any] = []
            errors_of_task: dict[str, list[Any]] = {}  # each task's regression errors, one per preference
            for index, rows in rows_of_state.items():
                # every call's log-prob: its tail plus its row's opening, back in the state's call order
                order = [member for row, _ in rows for member in row_members[row]]
                joined = torch.cat([scored[:-1] + scored[-1] for _, scored in rows])
                label_logp = joined[torch.argsort(torch.tensor(order, device=joined.device))]
                outcome = usable[index][1]
                advantages = torch.tensor(step_advantages[index], dtype=torch.float32, device=label_logp.device)
                log_q = torch.log_softmax(label_logp, -1)
                q = log_q.exp()
                entropy = -(q * log_q).sum()
                log_valid = torch.logsumexp(label_logp, -1)
                # a flat group (every label equally good, e.g. all right under the accuracy preference) has
                # nothing to teach about routing; regressing it to A = 0 would only pull q toward uniform
                flat = max(outcome.learning_targets) == min(outcome.learning_targets)
                if section.loss == "cross_entropy":
                    # distillation onto the target policy exp(A / tau) itself: the gradient q - target is
                    # bounded and vanishes for labels the target gives no mass, so the fit spends itself on
                    # the order of the good labels (what greedy decoding reads) rather than on how unlikely
                    # the bad ones are
                    target = torch.softmax(advantages / section.tau, -1)
                    route_loss = torch.zeros((), device=label_logp.device) if flat else -(target * log_q).sum()
                elif section.loss == "regression":
                    error = _regression_error(label_logp, advantages, section.tau)
                    # flat groups still count in the preference contrast
                    errors_of_task.setdefault(usable[index][0].task.id, []).append(error)
                    route_loss = torch.zeros((), device=label_logp.device) if flat else (error**2).mean()
                else:
                    route_loss = -(q * advantages).sum()  # A = 0 everywhere for a flat group
                losses.append(route_loss - actor.entropy_coeff * entropy - section.format_coef * log_valid)
                stats.add(
                    outcome,
                    q.detach().tolist(),
                    float(entropy.detach()),
                    float(log_valid.detach()),
                    preference_kind(usable[index][0].preference),
                )
            loss = torch.stack(losses).sum()
            if config.sampler.preference_contrast and section.contrast_weight != 1.0:
                # A task under several preferences: its regression error splits into the part all preferences
                # share (which labels happen to be right on this question: mostly noise a small model cannot
                # predict) and each preference's deviation from it (what the stated preference changes: the
                # signal preference-following needs); contrast_weight scales the latter.
                for task_errors in errors_of_task.values():
                    if len(task_errors) > 1:
                        stacked = torch.stack(task_errors)
                        deviation = ((stacked - stacked.mean(0, keepdim=True)) ** 2).mean(-1).sum()
                        loss = loss + (section.contrast_weight - 1.0) * deviation
            loss = loss / len(usable)
            loss.backward()
            total_loss += float(loss.detach())
        grad_norm = trainer.optimizer_step()
        trainer.policy.eval()
        done = time.perf_counter()
        train_tokens = sum(len(p) for p in prompts) + sum(len(c) for cs in calls for c in cs)
        return {
            **stats.metrics(),
            "actor/pg_loss": total_loss,
            "actor/grad_norm": grad_norm,
            "prepare_time_s": prepared - started,
            "update_time_s": done - prepared,
            "train_tokens": train_tokens,
            "train_tokens_per_s": train_tokens / max(done - prepared, 1e-9),
        }, []

    def _chunks(self, prompts: list[list[int]], task_ids: list[str], limits: list[int], by_task: bool) -> Any:
        """(SharedPrefix, indices into it, indices into the step's prompts) to score together; each prefix's
        backward runs once the caller has back-propagated its chunks. Default: one prefix (the system message)
        for the whole step, ppo_micro_batch_size prompts per chunk. With preference_contrast: the system
        message once, then one child prefix per task (its question), all its preference variants in one chunk
        (also `by_task` otherwise: a state scored in several rows needs them all in one chunk); with
        counterfactual.tasks_per_chunk > 1, that many whole tasks per chunk over the system message alone."""
        trainer = self.trainer
        pad_id = trainer.rollout.pad_id
        if by_task:
            groups: dict[str, list[int]] = {}
            for index, task_id in enumerate(task_ids):
                groups.setdefault(task_id, []).append(index)
            root = SharedPrefix(trainer.policy, prompts, pad_id, limit=min(limits))  # the system message
            per_chunk = trainer.config.counterfactual.tasks_per_chunk
            if per_chunk > 1:
                # several whole tasks per pass over the system message: each prompt's question runs once per
                # row, but in one batch, which a GPU prefers to one small pass per task
                tasks = list(groups.values())
                for start in range(0, len(tasks), per_chunk):
                    indices = [index for task in tasks[start : start + per_chunk] for index in task]
                    yield root, indices, indices
                root.backward()
                return
            for indices in groups.values():
                shared = SharedPrefix(
                    trainer.policy,
                    [prompts[i] for i in indices],
                    pad_id,
                    limit=min(limits[i] for i in indices),
                    parent=root,
                )  # + the question
                yield shared, list(range(len(indices))), indices
                shared.backward()
            root.backward()
            return
        shared = SharedPrefix(trainer.policy, prompts, pad_id, limit=min(limits))
        chunk = trainer.config.actor.ppo_micro_batch_size
        for start in range(0, len(prompts), chunk):
            indices = list(range(start, min(start + chunk, len(prompts))))
            yield shared, indices, indices
        shared.backward()

    def close(self) -> None:
        self._loop.close()


def _members_by_tool(outcome: LabelOutcomes) -> list[list[int]]:
    """The indices of a state's calls, grouped by tool name in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index in range(len(outcome.labels)):
        groups.setdefault(outcome.call(index).name, []).append(index)
    return list(groups.values())


def label_spans(calls: list[list[int]]) -> list[list[int]]:
    """The calls cut after the first token of their common closing (`"}}` ... end of turn): that token
    still delimits each label (so `gpt-4` is not scored as a prefix of a longer label), and everything after
    it is the same for every label and forced by the schema under guided decoding. Scoring only this span
    costs about half of scoring whole calls, since the closing tokens dominate a short label's call."""
    closing = common_prefix_length([call[::-1] for call in calls])
    shortest = min(len(call) for call in calls)
    closing = min(closing, shortest - 1)
    return [call[: len(call) - closing + 1] if closing > 1 else list(call) for call in calls]


def _regression_error(label_logp: torch.Tensor, advantages: torch.Tensor, tau: float) -> torch.Tensor:
    """Per label: centered log-prob minus A / tau (A = 0 everywhere for a flat group)."""
    return (label_logp - label_logp.mean()) - advantages / tau


def _regression_loss(label_logp: torch.Tensor, advantages: torch.Tensor, tau: float) -> torch.Tensor:
    """Least squares between the label log-probs, centered over the labels, and A / tau.

    For a fixed prompt context the minimizer over many questions is log q_l = E[A_l | context] / tau + c, so
    q ∝ exp(E[A | context] / tau): the policy that maximizes expected advantage plus tau times entropy, whose
    argmax (what greedy evaluation picks) is the label with the best expected reward. Unlike the expected-
    advantage gradient q_l (A_l - sum q A), the error of a label with a tiny probability is large, not
    vanishing, so a policy that has collapsed onto one label is pulled back.
    """
    return (_regression_error(label_logp, advantages, tau) ** 2).mean()


class _Stats:
    """Step metrics under the policy's label distribution q (expected values, no sampling)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.mass: dict[str, float] = {}
        self.by_preference: dict[str, list[tuple[float, float]]] = {}
        self.matches: dict[int, list[float]] = {}

    def add(self, outcome: LabelOutcomes, q: list[float], entropy: float, log_valid: float, preference: str) -> None:
        best = max(range(len(q)), key=q.__getitem__)
        # the labels the targets rank first: q's mass on them and whether greedy decoding picks one show the fit
        # to the targets that the loss alone does not (a loss can fall while the first choice stays wrong)
        top = max(outcome.learning_targets)
        on_target = [target == top for target in outcome.learning_targets]
        if outcome.actions is not None:  # escalation states: the same match, per turn
            turn = sum(message.get("role") == "tool" for message in outcome.history)
            self.matches.setdefault(turn, []).append(float(on_target[best]))
        self.by_preference.setdefault(preference, []).append((float(outcome.correct[best]), outcome.cost[best]))
        self.rows.append(
            {
                "target/best_mass": sum(p for p, hit in zip(q, on_target, strict=True) if hit),
                "argmax/on_target": float(on_target[best]),
                "reward/mean": sum(p * r for p, r in zip(q, outcome.rewards, strict=True)),
                "reward/best_possible": max(outcome.rewards),
                "accuracy": sum(p for p, ok in zip(q, outcome.correct, strict=True) if ok),
                "cost_usd": sum(p * c for p, c in zip(q, outcome.cost, strict=True)),
                "latency_s": sum(p * s for p, s in zip(q, outcome.latency, strict=True)),
                "argmax/accuracy": float(outcome.correct[best]),
                "argmax/cost_usd": outcome.cost[best],
                "valid_frac": math.exp(min(log_valid, 0.0)),
                "flat_frac": float(max(outcome.rewards) == min(outcome.rewards)),
                "actor/entropy": entropy,
            }
        )
        for model, p in zip(outcome.models, q, strict=True):
            self.mass[model] = self.mass.get(model, 0.0) + p

    def metrics(self) -> dict[str, float]:
        count = len(self.rows)
        metrics = {key: sum(row[key] for row in self.rows) / count for key in self.rows[0]}
        metrics.update({f"calls/model/{model}": mass / count for model, mass in sorted(self.mass.items())})
        # What greedy evaluation would do under each preference drawn this step: whether they differ is
        # the point of preference-conditioned routing.
        for turn, matches in sorted(self.matches.items()):
            metrics[f"argmax/target_match/turn{turn}"] = sum(matches) / len(matches)
        for kind, picks in sorted(self.by_preference.items()):
            metrics[f"argmax/{kind}/accuracy"] = sum(ok for ok, _ in picks) / len(picks)
            metrics[f"argmax/{kind}/cost_usd"] = sum(cost for _, cost in picks) / len(picks)
        return metrics


def preference_kind(preference: Preference) -> str:
    """accuracy, cost, latency or tool: the named preference a draw states (mixed weights name the largest
    efficiency term)."""
    if preference.tools:
        return "tool"
    if preference.cost > 0 or preference.latency > 0:
        return "cost" if preference.cost >= preference.latency else "latency"
    return "accuracy"
