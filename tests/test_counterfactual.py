"""Shared-prefix scoring (train/prefix.py) and the counterfactual label estimator (train/counterfactual.py),
on the tiny randomly initialized llama built in the test and the fake routing env of _tiny_policy."""

from __future__ import annotations

import asyncio
import math

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import FakeRoutingEnv, tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.agent.preference import Preference  # noqa: E402
from toolorchestra.errors import TrainingError  # noqa: E402
from toolorchestra.train.config import TrainConfig  # noqa: E402
from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe, label_outcomes  # noqa: E402
from toolorchestra.train.prefix import SharedPrefix, common_prefix_length, continuation_logprobs  # noqa: E402
from toolorchestra.train.sampler import PromptDraw  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402


def full_logprob(model, prompt: list[int], continuation: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + continuation])
    logprobs = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    return logprobs[len(prompt) - 1:].gather(-1, torch.tensor(continuation)[:, None]).sum()


def sample_batch(tokenizer):
    system = tokenizer("system: you route questions to models, prices follow " * 3)["input_ids"]
    prompts = [system + tokenizer(" question one")["input_ids"],
               system + tokenizer(" a second, longer question here")["input_ids"],
               system + tokenizer(" third")["input_ids"]]
    continuations = [[tokenizer(" alpha")["input_ids"], tokenizer(" beta gamma")["input_ids"]],
                     [tokenizer(" delta epsilon zeta")["input_ids"]],
                     [tokenizer(" eta")["input_ids"], tokenizer(" theta iota")["input_ids"], [5]]]
    return prompts, continuations


def test_common_prefix_length() -> None:
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[1], [2]]) == 0
    assert common_prefix_length([]) == 0


def test_shared_prefix_scores_equal_separate_forwards() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer).eval()
    prompts, continuations = sample_batch(tokenizer)
    with torch.no_grad():
        scored = continuation_logprobs(model, prompts, continuations, tokenizer.pad_token_id)
        for prompt, conts, values in zip(prompts, continuations, scored):
            expected = torch.stack([full_logprob(model, prompt, cont) for cont in conts])
            torch.testing.assert_close(values, expected, rtol=1e-4, atol=1e-4)


def test_chunked_backward_equals_one_big_loss() -> None:
    """SharedPrefix with a detached cache and per-chunk backward gives the gradient of one loss."""
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer)
    prompts, continuations = sample_batch(tokenizer)
    weights = [torch.randn(len(conts), generator=torch.Generator().manual_seed(i))
               for i, conts in enumerate(continuations)]

    def loss_of(values, rows):
        return sum((weights[row] * value).sum() for row, value in zip(rows, values))

    loss_of(continuation_logprobs(model, prompts, continuations, tokenizer.pad_token_id), range(3)).backward()
    expected = {name: param.grad.clone() for name, param in model.named_parameters()}
    model.zero_grad()
    shared = SharedPrefix(model, prompts, tokenizer.pad_token_id)
    for rows in ([0, 1], [2]):
        loss_of(shared.score(rows, [continuations[r] for r in rows]), rows).backward()
    shared.backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], rtol=1e-4, atol=1e-5, msg=name)


def test_prompt_tails_score_the_last_prompt_tokens() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer).eval()
    prompts, continuations = sample_batch(tokenizer)
    with torch.no_grad():
        scored = SharedPrefix(model, prompts, tokenizer.pad_token_id).score([0, 1], continuations[:2],
                                                                              prompt_tails=[1, 3])
        for prompt, tail, values in zip(prompts, [1, 3], scored):
            expected = full_logprob(model, prompt[:-tail], prompt[-tail:])
            torch.testing.assert_close(values[-1], expected, rtol=1e-4, atol=1e-4)


def test_label_outcomes_score_every_label_with_the_reward() -> None:
    env = FakeRoutingEnv()
    task = env.tasks("train")[0]
    tools = [tool for tool in env.tools_for(task) if tool.name == "answer"]
    draw = PromptDraw(task=task, tools=tools, preference=Preference(accuracy=1.0, cost=1.0), price_factors={})
    outcome = asyncio.run(label_outcomes(env, draw))
    assert outcome.labels == ["answer-1", "answer-2", "answer-3", "answer-4"]
    assert outcome.correct == [True, True, False, False]
    assert outcome.rewards[2:] == [0.0, 0.0]
    # both right; under a cost preference the cheap model earns more
    assert outcome.rewards[0] > outcome.rewards[1] > 0


def counterfactual_trainer(run_dir, steps: int = 12, loss: str = "regression", algorithm: dict | None = None,
                           counterfactual: dict | None = None, **sampler) -> Trainer:
    tokenizer = tiny_tokenizer()
    config = TrainConfig.model_validate({
        "seed": 0,
        "data": {"env": "fake-routing", "train_batch_size": 4},
        "model": {"lora_rank": 8, "lora_alpha": 16},
        "recipe": "counterfactual",
        "actor": {"ppo_micro_batch_size": 2, "entropy_coeff": 0.0, "optim": {"lr": 1e-2}},
        "algorithm": algorithm or {},
        "counterfactual": {"format_coef": 0.02, "loss": loss, **(counterfactual or {})},
        "sampler": {"min_labels": 4, "max_labels": 4, "shuffle_labels": False, "price_scale": [1.0, 1.0],
                    "tool_keep_prob": 0.0, "preferences": {"cost": 1.0}, **sampler},
        "trainer": {"total_training_steps": steps, "save_freq": steps, "default_local_dir": str(run_dir),
                    "torch_threads": 1, "save_merged_model": False},
    })
    return Trainer(config, env=FakeRoutingEnv(), model=tiny_llama(tokenizer), tokenizer=tokenizer)


@pytest.mark.parametrize("loss", ["regression", "expected"])
def test_counterfactual_steps_move_probability_to_the_best_label(tmp_path, loss) -> None:
    trainer = counterfactual_trainer(tmp_path / "run", loss=loss)
    history = trainer.fit(show_progress=False)
    first, last = history[0], history[-1]
    for key in ("reward/mean", "accuracy", "cost_usd", "valid_frac", "actor/entropy", "actor/grad_norm"):
        assert math.isfinite(last[key])
    # the cheap correct model is the best label under the cost preference: its mass must grow
    assert last["calls/model/good-cheap"] > first["calls/model/good-cheap"] + 0.2
    assert last["reward/mean"] > first["reward/mean"]
    assert last["actor/pg_loss"] < first["actor/pg_loss"]


def test_raw_advantages_label_spans_and_cost_floor_still_learn_the_best_label(tmp_path) -> None:
    """The cost-floor recipe's settings: targets are raw reward differences, only label spans are scored."""
    trainer = counterfactual_trainer(tmp_path / "run", algorithm={"norm_adv_by_std": "none", "cost_floor": 0.1},
                                     counterfactual={"score": "label", "tau": 0.2})
    history = trainer.fit(show_progress=False)
    assert history[-1]["calls/model/good-cheap"] > history[0]["calls/model/good-cheap"] + 0.2
    assert history[-1]["reward/mean"] > history[0]["reward/mean"]


def test_label_spans_keep_the_label_and_one_closing_token() -> None:
    from toolorchestra.train.recipes.counterfactual import label_spans

    calls = [[1, 2, 10, 11, 7, 8, 9], [1, 2, 12, 7, 8, 9], [1, 2, 13, 14, 15, 7, 8, 9]]
    assert label_spans(calls) == [[1, 2, 10, 11, 7], [1, 2, 12, 7], [1, 2, 13, 14, 15, 7]]
    assert label_spans([[1, 5], [1, 6]]) == [[1, 5], [1, 6]]  # no common closing: unchanged
    # a closing as long as the shortest call: every call keeps at least one token before the cut
    assert label_spans([[4, 7, 8, 9], [5, 7, 8, 9], [7, 8, 9]]) == [[4, 7, 8], [5, 7, 8], [7, 8]]


def test_label_outcomes_with_a_cost_floor_prefer_the_cheaper_right_label_under_accuracy() -> None:
    env = FakeRoutingEnv()
    task = env.tasks("train")[0]
    tools = [tool for tool in env.tools_for(task) if tool.name == "answer"]
    draw = PromptDraw(task=task, tools=tools, preference=Preference(), price_factors={})
    plain = asyncio.run(label_outcomes(env, draw))
    assert plain.rewards[0] == plain.rewards[1]  # accuracy alone: both right labels tie
    floored = asyncio.run(label_outcomes(env, draw, cost_floor=0.1))
    assert floored.rewards[0] > floored.rewards[1] > 0 == floored.rewards[2]


def test_counterfactual_without_answer_labels_fails_loudly(tmp_path) -> None:
    trainer = counterfactual_trainer(tmp_path / "run", steps=1)
    trainer.sampler.draw = lambda task: PromptDraw(task=task, tools=[], preference=Preference(), price_factors={})
    with pytest.raises(TrainingError, match="answer tool"):
        trainer.step()


def test_regression_loss_is_minimal_at_the_tempered_advantage_policy() -> None:
    """Its minimizer has centered log-probs A / tau: the loss is zero there and positive elsewhere; a label with
    a tiny probability but the best advantage gets a large gradient (the expected loss's would vanish)."""
    from toolorchestra.train.recipes.counterfactual import _regression_loss

    advantages = torch.tensor([1.0, 0.0, -1.0])
    optimum = torch.log_softmax(advantages / 0.5, -1)
    assert float(_regression_loss(optimum, advantages, 0.5)) < 1e-10
    collapsed = torch.tensor([-12.0, -0.01, -8.0], requires_grad=True)
    _regression_loss(collapsed, advantages, 0.5).backward()
    assert collapsed.grad[0] < -1.0  # push the best label up hard
    logits = collapsed.detach().clone().requires_grad_(True)
    expected = -(torch.softmax(logits, -1) * advantages).sum()
    assert abs(float(torch.autograd.grad(expected, logits)[0][0])) < 1e-3  # vanishes once collapsed


def test_flat_groups_teach_only_the_format(tmp_path) -> None:
    """Under the accuracy preference a task every label answers right has equal rewards: no routing loss."""
    trainer = counterfactual_trainer(tmp_path / "run", steps=1, preferences={"accuracy": 1.0})
    metrics = trainer.step()
    assert 0.0 <= metrics["flat_frac"] <= 1.0
    assert "argmax/accuracy/accuracy" in metrics


def test_preference_contrast_draws_every_preference_and_keeps_the_exact_gradient(tmp_path) -> None:
    """With sampler.preference_contrast each task comes once per preference kind, and scoring each task's
    variants over their own shared prefix (system message + question) gives the same gradient as scoring the
    same prompts over the step's one shared prefix."""
    prefs = {"accuracy": 1.0, "cost": 1.0, "latency": 0.5}
    contrast = counterfactual_trainer(tmp_path / "a", steps=1, preferences=prefs, preference_contrast=True)
    draws = contrast.sampler.next_batch(2)
    assert len(draws) == 6
    assert [d.task.id for d in draws[:3]] == [draws[0].task.id] * 3
    assert {type(d.preference).__name__ for d in draws} == {"Preference"}
    assert len({(d.preference.cost, d.preference.latency) for d in draws[:3]}) == 3

    def gradient(trainer, contrast_on: bool) -> dict:
        trainer.config.sampler.preference_contrast = contrast_on
        learner = CounterfactualRecipe(trainer)
        trainer.optimizer.step = lambda: None  # keep the weights: only the gradient is compared
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        metrics, _ = learner.step(draws)
        grads = {name: p.grad.clone() for name, p in trainer.policy.named_parameters() if p.grad is not None}
        trainer.policy.zero_grad()
        return metrics, grads

    plain = counterfactual_trainer(tmp_path / "b", steps=1, preferences=prefs)
    grouped_metrics, grouped = gradient(contrast, True)
    plain_metrics, expected = gradient(plain, False)
    assert grouped and set(grouped) == set(expected)
    for name in expected:
        torch.testing.assert_close(grouped[name], expected[name], rtol=1e-3, atol=1e-5, msg=name)
    assert grouped_metrics["actor/pg_loss"] == pytest.approx(plain_metrics["actor/pg_loss"], rel=1e-4)


def test_child_prefix_scores_and_gradients_equal_one_prefix() -> None:
    """A child SharedPrefix over its parent's cache (system message, then a question) gives the scores and
    parameter gradients of scoring the same prompts over one flat prefix."""
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer)
    prompts, continuations = sample_batch(tokenizer)
    question = tokenizer(" the same question for both")["input_ids"]
    group = [prompts[0] + question + tokenizer(" cheap")["input_ids"],
             prompts[0] + question + tokenizer(" accurate please")["input_ids"]]
    conts = continuations[0], continuations[2]

    flat = SharedPrefix(model, group, tokenizer.pad_token_id)
    flat_scores = flat.score([0, 1], list(conts))
    sum((s * (i + 1)).sum() for i, s in enumerate(flat_scores)).backward()
    flat.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()

    root = SharedPrefix(model, [prompts[0] + [7], *group], tokenizer.pad_token_id)
    assert 0 < root.shared < flat.shared
    child = SharedPrefix(model, group, tokenizer.pad_token_id, parent=root)
    assert child.shared == flat.shared
    child_scores = child.score([0, 1], list(conts))
    sum((s * (i + 1)).sum() for i, s in enumerate(child_scores)).backward()
    child.backward()
    root.backward()
    for got, want in zip(child_scores, flat_scores):
        torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-4)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, expected[name], rtol=1e-4, atol=1e-5, msg=name)


def test_several_tasks_per_chunk_keep_the_loss_and_gradient(tmp_path, monkeypatch) -> None:
    """counterfactual.tasks_per_chunk > 1 scores several whole tasks in one pass over the system message (a
    GPU's batching) instead of one question prefix per task: the same loss, contrast term included (it stays
    per task), and the same gradient."""
    prefs = {"accuracy": 1.0, "cost": 1.0}
    passes: list[int] = []
    score = SharedPrefix.score
    monkeypatch.setattr(SharedPrefix, "score", lambda self, indices, *a, **k: passes.append(len(indices))
                        or score(self, indices, *a, **k))

    def step(run_dir, tasks_per_chunk: int) -> tuple[dict, dict]:
        # prices drawn per task, so that the tasks' errors differ and a contrast taken across tasks would show
        trainer = counterfactual_trainer(run_dir, steps=1, preferences=prefs, preference_contrast=True,
                                         price_scale=[0.1, 10.0], price_draw="log_uniform",
                                         counterfactual={"contrast_weight": 4.0, "tasks_per_chunk": tasks_per_chunk})
        trainer.optimizer.step = lambda: None  # keep the weights: only the gradient is compared
        trainer.optimizer.zero_grad = lambda set_to_none=True: None
        draws = trainer.sampler.next_batch(4)
        assert len({draw.task.id for draw in draws}) == 4
        metrics, _ = CounterfactualRecipe(trainer).step(draws)
        return metrics, {name: p.grad.clone() for name, p in trainer.policy.named_parameters() if p.grad is not None}

    one_metrics, one = step(tmp_path / "one", 1)
    assert passes == [2, 2, 2, 2]  # a pass per task: its two preferences
    passes.clear()
    batched_metrics, batched = step(tmp_path / "three", 3)
    assert passes == [6, 2]  # three tasks, then the fourth
    assert one and set(batched) == set(one)
    for name in one:
        torch.testing.assert_close(batched[name], one[name], rtol=1e-3, atol=1e-5, msg=name)
    assert batched_metrics["actor/pg_loss"] == pytest.approx(one_metrics["actor/pg_loss"], rel=1e-4)


def test_contrast_weight_adds_the_preference_deviation_term(tmp_path) -> None:
    prefs = {"accuracy": 1.0, "cost": 1.0}
    losses = []
    for weight in (1.0, 5.0):
        trainer = counterfactual_trainer(tmp_path / f"w{weight}", steps=1, preferences=prefs, preference_contrast=True)
        trainer.config.counterfactual.contrast_weight = weight
        losses.append(trainer.step()["actor/pg_loss"])
    assert losses[1] > losses[0]  # same weights and draws; only the (non-negative) deviation term grew


def test_cross_entropy_loss_learns_the_best_label_from_outcome_model_targets(tmp_path) -> None:
    """The shipped recipe's settings: outcome-model targets (expected rewards), distilled with cross-entropy."""
    trainer = counterfactual_trainer(tmp_path / "run", loss="cross_entropy",
                                     algorithm={"norm_adv_by_std": "none", "cost_floor": 0.1},
                                     counterfactual={"targets": "outcome_model", "score": "label", "tau": 0.1})
    history = trainer.fit(show_progress=False)
    assert history[-1]["calls/model/good-cheap"] > history[0]["calls/model/good-cheap"] + 0.2
    assert history[-1]["reward/mean"] > history[0]["reward/mean"]
    outcome = next(iter(trainer.recipe()._outcomes.values()))
    assert outcome.targets is not None and len(outcome.targets) == len(outcome.labels)


def test_cross_entropy_loss_is_minimal_at_the_tempered_advantage_policy() -> None:
    advantages = torch.tensor([0.3, 0.0, -0.2])
    target = torch.softmax(advantages / 0.1, -1)

    def loss(log_q: torch.Tensor) -> torch.Tensor:
        return -(target * log_q).sum()

    at_target = torch.log(target).requires_grad_(True)
    (gradient,) = torch.autograd.grad(loss(torch.log_softmax(at_target, -1)), at_target)
    assert float(gradient.abs().max()) < 1e-6  # stationary at q = softmax(A / tau)
    assert float(loss(torch.log_softmax(torch.zeros(3), -1))) > float(loss(torch.log(target)))
