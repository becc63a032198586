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
train/prefix.py computes each of these once. This is an option beside GRPO (`algorithm.adv_estimator:
counterfactual`); it needs an env with recorded outcomes and an answer tool with labels, and it trains the
one routing decision, not multi-turn tool use.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolorchestra.agent.loop import _tool_step, current_task
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import initial_messages, task_rules
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import ToolCall
from toolorchestra.backends.toolcalls import render_tool_call
from toolorchestra.envs.base import Env
from toolorchestra.reward import batch_advantages, expected_group_rewards, group_rewards, with_cost_floor
from toolorchestra.tools.base import ToolContext
from toolorchestra.tools.llm import AnswerTool
from toolorchestra.train.outcome_model import SubtaskOutcomeModel
from toolorchestra.train.prefix import SharedPrefix, common_prefix_length
from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    from toolorchestra.train.trainer import Trainer


@dataclass
class LabelOutcomes:
    """What every answer label of one draw would have given: correctness, dollars, seconds, reward."""

    tool: str
    labels: list[str]
    models: list[str]
    correct: list[bool]
    cost: list[float]
    latency: list[float]
    rewards: list[float]
    errors: list[str]
    features: list[dict[str, float]] = field(default_factory=list)
    targets: list[float] | None = None  # what the policy learns from; None: the recorded `rewards`

    @property
    def learning_targets(self) -> list[float]:
        """The rewards the step's advantages are computed from: an outcome model's expected rewards when
        algorithm.counterfactual_targets says so, else the recorded ones."""
        return self.rewards if self.targets is None else self.targets

    def call(self, index: int) -> ToolCall:
        return ToolCall(id="call_0", name=self.tool, arguments={"model": self.labels[index]})


async def label_outcomes(env: Env, draw: PromptDraw, cost_floor: float = 0.0,
                         cost_scale: float = 1.0) -> LabelOutcomes | None:
    """Run `answer(model=LABEL)` for every offered label through the real tool and score it; None when the
    draw offers no answer tool with labels. `cost_floor`, `cost_scale`: see toolorchestra.reward.with_cost_floor."""
    answer = next((tool for tool in draw.tools if isinstance(tool, AnswerTool) and tool.labels), None)
    if answer is None:
        return None
    labels = list(answer.labels)
    correct, cost, latency, models, errors, features = [], [], [], [], [], []
    token = current_task.set(draw.task)
    try:
        for label in labels:
            call = ToolCall(id="call_0", name=answer.name, arguments={"model": label})
            result = await answer.run(call.arguments, ToolContext(task=draw.task))
            trajectory = Trajectory(task_id=draw.task.id, question=draw.task.prompt, final_answer=result.answer,
                                    answered_by=result.model, latency_s=result.latency_s,
                                    steps=[_tool_step(0, call, result)])
            ok = bool(env.score(draw.task, trajectory).correct) if result.final else False
            if result.error:
                errors.append(result.error)
            correct.append(ok)
            cost.append(trajectory.cost_usd)
            latency.append(trajectory.latency_s)
            models.append(answer.labels[label])
            features.append({"accuracy": float(ok), "cost": trajectory.cost_usd, "latency": trajectory.latency_s,
                             f"calls:{answer.name}": 1.0, f"calls:{label}": 1.0})
    finally:
        current_task.reset(token)
    rewards = group_rewards(features, correct, with_cost_floor(draw.preference.weights(), cost_floor, cost_scale))
    return LabelOutcomes(answer.name, labels, models, correct, cost, latency, rewards, errors, features)


class CounterfactualLearner:
    """One counterfactual step for a `Trainer`: outcomes (cached per draw), prompts, scoring, loss, update."""

    def __init__(self, trainer: "Trainer") -> None:
        self.trainer = trainer
        self._outcomes: dict[str, LabelOutcomes | None] = {}
        self._loop = asyncio.new_event_loop()
        self._outcome_model: SubtaskOutcomeModel | None = None
        if trainer.config.algorithm.counterfactual_targets == "outcome_model":
            self._outcome_model = SubtaskOutcomeModel(trainer.env, trainer.tasks)

    def outcomes(self, draw: PromptDraw) -> LabelOutcomes | None:
        key = json.dumps([draw.task.id, [tool.name for tool in draw.tools], draw.price_factors,
                          draw.preference.weights(),
                          [list(getattr(tool, "labels", {}).items()) for tool in draw.tools]], sort_keys=True)
        if key not in self._outcomes:
            outcome = self._loop.run_until_complete(
                label_outcomes(self.trainer.env, draw, self.trainer.config.algorithm.cost_floor,
                               self.trainer.config.algorithm.cost_scale))
            if outcome is not None and self._outcome_model is not None:
                p_correct = self._outcome_model.probabilities(draw.task, outcome.models)
                algorithm = self.trainer.config.algorithm
                weights = with_cost_floor(draw.preference.weights(), algorithm.cost_floor, algorithm.cost_scale)
                outcome.targets = expected_group_rewards(outcome.features, p_correct, weights)
            self._outcomes[key] = outcome
        return self._outcomes[key]

    def prompt_ids(self, draw: PromptDraw) -> list[int]:
        from toolorchestra.train.rollout import question_text

        trainer = self.trainer
        messages = initial_messages(draw.tools, question_text(draw.task, trainer.config.data.max_question_chars),
                                    draw.preference, draw.wording, task_rules(draw.task))
        return trainer.rollout.renderer.prompt_ids(messages, [tool.schema() for tool in draw.tools])

    def call_ids(self, outcome: LabelOutcomes) -> list[list[int]]:
        renderer = self.trainer.rollout.renderer
        calls = [renderer.encode(render_tool_call(outcome.call(index))) + [renderer.end_of_turn_id]
                 for index in range(len(outcome.labels))]
        if self.trainer.config.algorithm.counterfactual_score == "label":
            calls = label_spans(calls)
        return calls

    def step(self, draws: list[PromptDraw]) -> dict[str, Any]:
        import torch

        trainer = self.trainer
        config = trainer.config
        started = time.perf_counter()
        items = [(draw, self.outcomes(draw)) for draw in draws]
        usable = [(draw, outcome) for draw, outcome in items if outcome is not None]
        stems: list[list[int]] = []
        if not usable:
            from toolorchestra.errors import TrainingError

            raise TrainingError("algorithm.adv_estimator counterfactual: no draw of this step offers an answer tool "
                                "with model labels; this estimator trains the answer-label decision only")
        errors = sorted({error for _, outcome in usable for error in outcome.errors})
        if all(len(outcome.errors) == len(outcome.labels) for _, outcome in usable):
            from toolorchestra.errors import TrainingError

            raise TrainingError("every answer call of this step failed, so there is nothing to learn from; first "
                                f"errors: {'; '.join(errors[:3])}")
        prompts, calls = [], []
        for draw, outcome in usable:
            # The label calls' common opening tokens (`<tool_call>` ... `"model": "`) join the prompt, so
            # only the short label tails are scored per label; they cancel in q and count in log p(valid).
            full = self.call_ids(outcome)
            stem = min(common_prefix_length(full), min(len(call) for call in full) - 1)
            prompts.append(self.prompt_ids(draw) + full[0][:stem])
            calls.append([call[stem:] for call in full])
            stems.append(full[0][:stem])
        prepared = time.perf_counter()
        trainer.policy.train()
        # log p(call_l | prompt) for every label (the calls' common opening tokens cancel in q). Prompts that
        # share a prefix run it once: the system message of the whole step, or with preference_contrast the
        # system message and question of each task, whose variants differ only in the preference sentence at
        # the end. Each chunk's graph is freed after its backward (train/prefix.py), which bounds memory.
        actor, algorithm = config.actor, config.algorithm
        stats, total_loss = _Stats(), 0.0
        # the stems are scored as prompt tails, so no shared prefix may reach into them
        limits = [len(prompt) - len(stem) for prompt, stem in zip(prompts, stems)]
        # advantages over each prompt's counterfactual group of labels, scaled as algorithm.norm_adv_by_std says
        step_advantages = batch_advantages([outcome.learning_targets for _, outcome in usable],
                                           algorithm.norm_adv_by_std)
        for shared, local, indices in self._chunks(prompts, [draw.task.id for draw, _ in usable], limits):
            scores = shared.score(local, [calls[i] for i in indices], config.rollout.temperature,
                                  prompt_tails=[len(stems[i]) for i in indices])
            losses, errors_of_chunk = [], []
            for index, scored in zip(indices, scores):
                label_logp, stem_logp = scored[:-1], scored[-1]
                outcome = usable[index][1]
                advantages = torch.tensor(step_advantages[index], dtype=torch.float32,
                                          device=label_logp.device)
                log_q = torch.log_softmax(label_logp, -1)
                q = log_q.exp()
                entropy = -(q * log_q).sum()
                log_valid = stem_logp + torch.logsumexp(label_logp, -1)
                # a flat group (every label equally good, e.g. all right under the accuracy preference) has
                # nothing to teach about routing; regressing it to A = 0 would only pull q toward uniform
                flat = max(outcome.learning_targets) == min(outcome.learning_targets)
                if algorithm.counterfactual_loss == "cross_entropy":
                    # distillation onto the target policy exp(A / tau) itself: the gradient q - target is
                    # bounded and vanishes for labels the target gives no mass, so the fit spends itself on
                    # the order of the good labels (what greedy decoding reads) rather than on how unlikely
                    # the bad ones are
                    target = torch.softmax(advantages / algorithm.counterfactual_tau, -1)
                    route_loss = torch.zeros((), device=label_logp.device) if flat else -(target * log_q).sum()
                elif algorithm.counterfactual_loss == "regression":
                    error = _regression_error(label_logp, advantages, algorithm.counterfactual_tau)
                    errors_of_chunk.append(error)  # flat groups still count in the preference contrast
                    route_loss = torch.zeros((), device=label_logp.device) if flat else (error ** 2).mean()
                else:
                    route_loss = -(q * advantages).sum()  # A = 0 everywhere for a flat group
                losses.append(route_loss - actor.entropy_coeff * entropy - algorithm.format_coef * log_valid)
                stats.add(outcome, q.detach().tolist(), float(entropy.detach()), float(log_valid.detach()),
                          preference_kind(usable[index][0].preference))
            loss = torch.stack(losses).sum()
            if config.sampler.preference_contrast and algorithm.contrast_weight != 1.0 and len(errors_of_chunk) > 1:
                # This chunk is one task under several preferences. Its regression error splits into the part
                # all preferences share (which labels happen to be right on this question: mostly noise a
                # small model cannot predict) and each preference's deviation from it (what the stated
                # preference changes: the signal preference-following needs); contrast_weight scales the latter.
                stacked = torch.stack(errors_of_chunk)
                deviation = ((stacked - stacked.mean(0, keepdim=True)) ** 2).mean(-1).sum()
                loss = loss + (algorithm.contrast_weight - 1.0) * deviation
            loss = loss / len(usable)
            loss.backward()
            total_loss += float(loss.detach())
        parameters = [param for param in trainer.policy.parameters() if param.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, actor.grad_clip)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.policy.eval()
        done = time.perf_counter()
        return {**stats.metrics(), "actor/pg_loss": total_loss, "actor/grad_norm": float(grad_norm),
                "prepare_time_s": prepared - started, "update_time_s": done - prepared,
                "train_tokens": sum(len(p) for p in prompts) + sum(len(c) for cs in calls for c in cs)}

    def _chunks(self, prompts: list[list[int]], task_ids: list[str], limits: list[int]) -> Any:
        """(SharedPrefix, indices into it, indices into the step's prompts) to score together; each prefix's
        backward runs once the caller has back-propagated its chunks. Default: one prefix (the system message)
        for the whole step, ppo_micro_batch_size prompts per chunk. With preference_contrast: the system
        message once, then one child prefix per task (its question), all its preference variants in one chunk."""
        trainer = self.trainer
        pad_id = trainer.rollout.pad_id
        if trainer.config.sampler.preference_contrast:
            groups: dict[str, list[int]] = {}
            for index, task_id in enumerate(task_ids):
                groups.setdefault(task_id, []).append(index)
            root = SharedPrefix(trainer.policy, prompts, pad_id, limit=min(limits))  # the system message
            for indices in groups.values():
                shared = SharedPrefix(trainer.policy, [prompts[i] for i in indices], pad_id,
                                      limit=min(limits[i] for i in indices), parent=root)  # + the question
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


def label_spans(calls: list[list[int]]) -> list[list[int]]:
    """The calls cut after the first token of their common closing (`"}}` ... end of turn): that token
    still delimits each label (so `gpt-4` is not scored as a prefix of a longer label), and everything after
    it is the same for every label and forced by the schema under guided decoding. Scoring only this span
    costs about half of scoring whole calls, since the closing tokens dominate a short label's call."""
    closing = common_prefix_length([call[::-1] for call in calls])
    shortest = min(len(call) for call in calls)
    closing = min(closing, shortest - 1)
    return [call[:len(call) - closing + 1] if closing > 1 else list(call) for call in calls]


def _regression_error(label_logp: "torch.Tensor", advantages: "torch.Tensor", tau: float) -> "torch.Tensor":
    """Per label: centered log-prob minus A / tau (A = 0 everywhere for a flat group)."""
    return (label_logp - label_logp.mean()) - advantages / tau


def _regression_loss(label_logp: "torch.Tensor", advantages: "torch.Tensor", tau: float) -> "torch.Tensor":
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

    def add(self, outcome: LabelOutcomes, q: list[float], entropy: float, log_valid: float,
            preference: str) -> None:
        best = max(range(len(q)), key=q.__getitem__)
        self.by_preference.setdefault(preference, []).append((float(outcome.correct[best]), outcome.cost[best]))
        self.rows.append({
            "reward/mean": sum(p * r for p, r in zip(q, outcome.rewards)),
            "reward/best_possible": max(outcome.rewards),
            "accuracy": sum(p for p, ok in zip(q, outcome.correct) if ok),
            "cost_usd": sum(p * c for p, c in zip(q, outcome.cost)),
            "latency_s": sum(p * s for p, s in zip(q, outcome.latency)),
            "argmax/accuracy": float(outcome.correct[best]),
            "argmax/cost_usd": outcome.cost[best],
            "valid_frac": math.exp(min(log_valid, 0.0)),
            "flat_frac": float(max(outcome.rewards) == min(outcome.rewards)),
            "actor/entropy": entropy,
        })
        for model, p in zip(outcome.models, q):
            self.mass[model] = self.mass.get(model, 0.0) + p

    def metrics(self) -> dict[str, float]:
        count = len(self.rows)
        metrics = {key: sum(row[key] for row in self.rows) / count for key in self.rows[0]}
        metrics.update({f"calls/model/{model}": mass / count for model, mass in sorted(self.mass.items())})
        # What greedy evaluation would do under each preference drawn this step: whether they differ is
        # the point of preference-conditioned routing.
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
