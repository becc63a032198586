"""Consult-then-adopt orchestration: the escalation model (train/escalation.py), the expert/answer tools'
adoption of a consulted answer (tools/llm.py), the shared price-table rows, and counterfactual training on
escalation targets (train/counterfactual.py) with the tiny llama of _tiny_policy and a fake env built here
(FakeEscalationEnv: a cheap model that declines half the questions, a dear one that always answers)."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import numpy as np
import pytest

from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import price_table
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, Completion, ToolCall, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import LatencyPrior, ModelSpec, Price
from toolorchestra.envs.base import Env, Score, Task
from toolorchestra.envs.replay.base import Recorded
from toolorchestra.tools.base import Tool, ToolContext
from toolorchestra.tools.llm import AnswerTool, ExpertTool, consulted_answer
from toolorchestra.train.escalation import Action, EscalationModel, EscalationTargets, follow

DECLINE = "I don't know."


class FakeTaskBackend(Backend):
    """A test fake: answers each task from a table (task id -> text), counting its calls."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.calls = 0

    async def complete(self, messages, tools=None, *, max_tokens=512, temperature=0.0, top_p=1.0, seed=None):
        from toolorchestra.envs.base import current_task

        self.calls += 1
        task = current_task.get()
        return Completion(text=self.answers[task.id], usage=Usage(prompt_tokens=50, completion_tokens=5),
                          latency_s=0.1)


class FakeEscalationEnv(Env):
    """A fake replay-like env: 'cheap' answers right on even tasks and declines odd ones; 'dear' is right
    on every task but costs 20x; 'wrong' always answers wrongly. Expert and answer tools share labels."""

    name = "fake-escalation"

    def __init__(self, tasks: int = 12) -> None:
        self._tasks = [Task(id=f"t{index}", split="train", prompt=f"Question {index}?", gold="B")
                       for index in range(tasks)]
        answers = {"cheap": {task.id: ("Answer: B" if index % 2 == 0 else DECLINE)
                             for index, task in enumerate(self._tasks)},
                   "dear": {task.id: "Answer: B" for task in self._tasks},
                   "wrong": {task.id: "Answer: A" for task in self._tasks}}
        prices = {"cheap": 1.0, "dear": 20.0, "wrong": 0.5}
        specs = [ModelSpec(name=name, backend={"type": "replay", "world": "fake", "model": name},
                           price=Price(input_per_m=prices[name], output_per_m=prices[name]),
                           latency=LatencyPrior(overhead_s=1.0)) for name in answers]
        self.backends = {name: FakeTaskBackend(table) for name, table in answers.items()}
        self.pool = ModelPool(specs, self.backends)
        self.answers = answers
        self.labels = {name: name for name in answers}

    def tasks(self, split: str) -> list[Task]:
        return [task.model_copy(update={"split": split}) for task in self._tasks]

    def tools_for(self, task: Task) -> list[Tool]:
        return [ExpertTool("expert", "", self.labels, self.pool), AnswerTool("answer", "", self.labels, self.pool)]

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        return Score(correct=(trajectory.final_answer or "").strip() == "Answer: B")

    def models(self) -> list[str]:
        return list(self.answers)

    def record(self, task_id: str, model: str) -> Recorded:
        response = self.answers[model][task_id]
        return Recorded(response=response, correct=response == "Answer: B")

    def answer_key(self, task: Task, text: str) -> str | None:
        return None if text == DECLINE else text

    def call_cost(self, task: Task, model: str) -> float:
        return self.pool.spec(model).price.cost(50, 5)

    def call_latency(self, task: Task, model: str) -> float:
        return 1.0


# --- the escalation model -----------------------------------------------------------------------------
def two_model_table() -> EscalationModel:
    """8 questions: cheap (cost 1) attempts q0-q3 and is right on them; dear (cost 10) always attempts and
    is right on 6 (wrong on q3 and q7)."""
    right = np.array([[1, 1], [1, 1], [1, 1], [1, 0], [0, 1], [0, 1], [0, 1], [0, 0]])
    attempted = np.array([[1, 1]] * 4 + [[0, 1]] * 4)
    cost = np.array([[1.0, 10.0]] * 8)
    return EscalationModel(["cheap", "dear"], right, attempted, cost, np.ones((8, 2)), max_consults=2,
                           prior_strength=0.0)


def test_action_values_follow_the_dynamic_programme_by_hand() -> None:
    model = two_model_table()
    values = model.action_values((), w_cost=0.2)  # price = 0.2 * cost / 10: cheap 0.02, dear 0.2
    assert values[Action(False, 1)] == pytest.approx(0.75 - 0.2)  # buy dear's answer
    assert values[Action(False, 0)] == pytest.approx(0.5 - 0.02)  # buy cheap's answer
    # consult cheap: adopt when it attempts (right on all 4), else the best of the abstained state (0.55)
    assert values[Action(True, 0)] == pytest.approx(-0.02 + 0.5 * 1.0 + 0.5 * 0.55)
    assert values[Action(True, 1)] == pytest.approx(-0.2 + 0.75)
    assert model.best((), 0.2) == Action(True, 0)
    # once cheap declined, its own answer is worth nothing and dear's is right on 3 of the 4 left
    after = model.action_values(((0, False),), 0.2)
    assert after[Action(False, 0)] == 0.0
    assert after[Action(False, 1)] == pytest.approx(0.75 - 0.2)


def test_a_dear_enough_price_makes_answering_cheaply_at_once_best() -> None:
    model = two_model_table()
    assert model.best((), w_cost=5.0) == Action(False, 0)  # consulting twice costs more than it gains


def test_follow_adopts_an_attempt_and_escalates_a_decline() -> None:
    model = two_model_table()
    visited, final = follow(model, [True, True], 0.2)
    assert [action for _, action in visited] == [Action(True, 0), Action(False, 0)]  # consult, then adopt
    visited, final = follow(model, [False, True], 0.2)
    assert visited[0][1] == Action(True, 0) and visited[1][0] == ((0, False),)
    assert final.model == 1  # escalated to dear


def test_estimates_shrink_towards_the_parent_state() -> None:
    right = np.array([[1, 1], [0, 0], [0, 1], [0, 1]])
    attempted = np.array([[1, 1], [1, 1], [0, 1], [0, 1]])
    cost = np.ones((4, 2))
    plain = EscalationModel(["a", "b"], right, attempted, cost, cost, prior_strength=0.0)
    shrunk = EscalationModel(["a", "b"], right, attempted, cost, cost, prior_strength=2.0)
    state = ((0, True),)  # questions 0 and 1: b right on 1 of 2; at the root b is right on 3 of 4
    assert plain.estimates(state).right[1] == pytest.approx(0.5)
    assert shrunk.estimates(state).right[1] == pytest.approx((1 + 2 * 0.75) / (2 + 2))


def test_cross_fitted_targets_do_not_use_the_tasks_own_outcomes() -> None:
    env = FakeEscalationEnv(tasks=12)
    tasks = env.tasks("train")
    targets = EscalationTargets(env, tasks, max_consults=2, prior_strength=1.0, folds=3)
    flipped = FakeEscalationEnv(tasks=12)
    flipped.answers["dear"]["t0"] = "Answer: A"  # t0's own record changes
    other = EscalationTargets(flipped, tasks, max_consults=2, prior_strength=1.0, folds=3)
    for history in ((), ((0, True),), ((0, False),)):
        mine, theirs = targets.model_for(tasks[0]).estimates(history), other.model_for(tasks[0]).estimates(history)
        assert np.array_equal(mine.right, theirs.right)
    assert targets.attempted_by(tasks[1]) == [False, True, True]


def test_escalation_targets_need_recorded_outcomes() -> None:
    from toolorchestra.errors import TrainingError

    class Plain(Env):
        name = "plain"

        def tasks(self, split):
            return []

        def tools_for(self, task):
            return []

        def score(self, task, trajectory):
            return Score(correct=False)

    with pytest.raises(TrainingError, match="escalation needs recorded outcomes"):
        EscalationTargets(Plain(), [], 2, 1.0)


# --- tools: consult without a question, adopt without a second call --------------------------------------
def run_tools(env: FakeEscalationEnv, task: Task, calls: list[ToolCall]) -> tuple[list[Any], list[dict]]:
    from toolorchestra.envs.base import current_task

    tools = {tool.name: tool for tool in env.tools_for(task)}
    messages: list[dict[str, Any]] = []
    results = []

    async def play() -> None:
        token = current_task.set(task)
        try:
            for call in calls:
                result = await tools[call.name].run(call.arguments, ToolContext(task=task, messages=list(messages)))
                results.append(result)
                messages.append({"role": "assistant", "content": "", "tool_calls": [call.to_openai()]})
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                 "content": result.observation()})
        finally:
            current_task.reset(token)

    asyncio.run(play())
    return results, messages


def test_expert_without_a_question_asks_the_users_question_and_answer_adopts_it() -> None:
    env = FakeEscalationEnv()
    task = env.tasks("test")[0]
    results, _ = run_tools(env, task, [ToolCall(id="call_0", name="expert", arguments={"model": "cheap"}),
                                       ToolCall(id="call_1", name="answer", arguments={"model": "cheap"})])
    consulted, adopted = results
    assert consulted.output == "Answer: B" and consulted.cost_usd > 0
    assert adopted.final and adopted.answer == "Answer: B" and adopted.model == "cheap"
    assert adopted.cost_usd == 0.0 and adopted.meta == {"adopted": True}
    assert env.backends["cheap"].calls == 1  # no second call


def test_answer_with_a_model_not_consulted_on_the_question_calls_it() -> None:
    env = FakeEscalationEnv()
    task = env.tasks("test")[0]
    results, _ = run_tools(env, task, [
        ToolCall(id="call_0", name="expert", arguments={"model": "cheap", "question": "a sub-question"}),
        ToolCall(id="call_1", name="answer", arguments={"model": "cheap"}),
        ToolCall(id="call_2", name="answer", arguments={"model": "dear"})])
    assert results[1].cost_usd > 0 and results[1].meta == {}  # asked something else: a new call
    assert env.backends["cheap"].calls == 2
    assert results[2].cost_usd > 0 and env.backends["dear"].calls == 1


def test_consulted_answer_matches_call_ids_that_repeat_across_turns() -> None:
    call = ToolCall(id="call_0", name="expert", arguments={"model": "cheap"}).to_openai()
    other = ToolCall(id="call_0", name="expert", arguments={"model": "dear"}).to_openai()
    messages = [{"role": "assistant", "content": "", "tool_calls": [other]},
                {"role": "tool", "tool_call_id": "call_0", "name": "expert", "content": "dear says"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_0", "name": "expert", "content": "cheap says"}]
    assert consulted_answer(messages, "cheap", "Q") == "cheap says"
    assert consulted_answer(messages, "dear", "Q") == "dear says"
    assert consulted_answer(messages, "wrong", "Q") is None
    failed = messages[:3] + [{"role": "tool", "tool_call_id": "call_0", "name": "expert", "content": "Error: x"}]
    assert consulted_answer(failed, "cheap", "Q") is None


def test_price_table_gives_a_label_offered_by_two_tools_one_row() -> None:
    env = FakeEscalationEnv()
    table = price_table(env.tools_for(env.tasks("test")[0]))
    rows = [line for line in table.splitlines()[2:]]
    assert len(rows) == 3 and all(row.startswith("| expert, answer | ") for row in rows)


# --- training on escalation targets ---------------------------------------------------------------------
torch = pytest.importorskip("torch")


def escalation_trainer(run_dir, steps: int = 10) -> Any:
    from _tiny_policy import tiny_llama, tiny_tokenizer

    from toolorchestra.train.config import TrainConfig
    from toolorchestra.train.trainer import Trainer

    tokenizer = tiny_tokenizer(extra_corpus=('<tool_call>\n{"name": "expert", "arguments": {"model": "cheap"}}',
                                             '{"model": "dear"}} {"model": "wrong"}} I don\'t know. Answer: B'))
    config = TrainConfig.model_validate({
        "seed": 0,
        "data": {"env": "fake-escalation", "train_batch_size": 4},
        "model": {"lora_rank": 8, "lora_alpha": 16},
        "recipe": "counterfactual",
        "actor": {"ppo_micro_batch_size": 2, "entropy_coeff": 0.0, "optim": {"lr": 1e-2}},
        "algorithm": {"cost_floor": 0.3, "cost_scale": 1.0},
        "counterfactual": {"format_coef": 0.1, "loss": "cross_entropy", "targets": "escalation", "tau": 0.1,
                           "score": "label", "escalation": {"prior_strength": 1.0, "max_consults": 1}},
        "sampler": {"min_labels": 3, "max_labels": 3, "shuffle_labels": False, "price_scale": [1.0, 1.0],
                    "tool_keep_prob": 1.0, "preferences": {"accuracy": 1.0}},
        "trainer": {"total_training_steps": steps, "save_freq": steps, "default_local_dir": str(run_dir),
                    "torch_threads": 1, "save_merged_model": False},
    })
    return Trainer(config, env=FakeEscalationEnv(), model=tiny_llama(tokenizer), tokenizer=tokenizer)


def test_escalation_states_render_as_the_orchestrator_loop_renders_its_turns(tmp_path) -> None:
    """The prompt of a later state is the live loop's messages for the same calls, token for token."""
    from toolorchestra.agent.prompt import initial_messages

    from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe

    trainer = escalation_trainer(tmp_path / "run", steps=1)
    learner = CounterfactualRecipe(trainer)
    draw = trainer.sampler.draw(trainer.tasks[1])  # cheap declines t1: consult cheap, then escalate
    states = learner.draw_outcomes(draw)
    assert len(states) == 2 and states[0].history == []
    assert {call.name for call in states[0].actions} == {"expert", "answer"}
    _, messages = run_tools(trainer.env, draw.task, [ToolCall(id="call_0", name="expert",
                                                              arguments={"model": "cheap"})])
    assert states[1].history == messages and messages[-1]["content"] == DECLINE
    live = initial_messages(draw.tools, draw.task.prompt, draw.preference, draw.wording) + messages
    schemas = [tool.schema() for tool in draw.tools]
    assert learner.prompt_ids(draw, states[1]) == trainer.rollout.renderer.prompt_ids(live, schemas)
    best = max(range(len(states[1].targets)), key=states[1].targets.__getitem__)
    assert states[1].actions[best].name == "answer" and states[1].actions[best].arguments == {"model": "dear"}


def root_choice(trainer: Any, learner: Any, draw: Any) -> dict[str, float]:
    """The policy's probability of each action at the root state of `draw` (restricted to those actions)."""
    from toolorchestra.backends.toolcalls import render_tool_call
    from toolorchestra.train.prefix import continuation_logprobs

    root = learner.draw_outcomes(draw)[0]
    renderer = trainer.rollout.renderer
    calls = [renderer.encode(render_tool_call(call)) + [renderer.end_of_turn_id] for call in root.actions]
    with torch.no_grad():
        logp = continuation_logprobs(trainer.policy, [learner.prompt_ids(draw, root)], [calls],
                                     trainer.rollout.pad_id)[0]
    q = torch.softmax(logp, -1).tolist()
    return {f"{call.name}({call.arguments['model']})": p for call, p in zip(root.actions, q)}


def test_escalation_training_learns_to_consult_the_cheap_model_first(tmp_path) -> None:
    from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe

    trainer = escalation_trainer(tmp_path / "run", steps=30)
    learner = CounterfactualRecipe(trainer)
    draw = trainer.sampler.draw(trainer.tasks[0])
    before = root_choice(trainer, learner, draw)
    history = trainer.fit(show_progress=False)
    after = root_choice(trainer, learner, draw)
    assert all(math.isfinite(row["actor/pg_loss"]) for row in history)
    # consult cheap (adopt when it answers, else buy dear) is the root's best action
    # (the 2-layer model separates the root from the later states, where adopting cheap is often best,
    # slowly: 30 steps raise the root's best action more than tenfold and above the other consultations)
    assert after["expert(cheap)"] > 10 * before["expert(cheap)"]
    assert after["expert(cheap)"] > max(after["expert(dear)"], after["expert(wrong)"])
    assert history[-1]["actor/pg_loss"] < history[0]["actor/pg_loss"]


def test_escalation_needs_the_expert_tool(tmp_path) -> None:
    from toolorchestra.errors import TrainingError

    trainer = escalation_trainer(tmp_path / "run", steps=1)
    trainer.config.sampler.tool_keep_prob = 0.0
    with pytest.raises(TrainingError, match="needs an expert and an answer tool"):
        trainer.step()


def test_sibling_states_read_the_answers_of_the_roots_other_consultations(tmp_path) -> None:
    from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe

    trainer = escalation_trainer(tmp_path / "run", steps=1)
    trainer.config.counterfactual.escalation.max_consults = 2
    trainer.config.counterfactual.escalation.siblings = 1
    learner = CounterfactualRecipe(trainer)
    draw = trainer.sampler.draw(trainer.tasks[1])
    states = learner.draw_outcomes(draw)
    consulted = [json.loads(state.history[0]["tool_calls"][0]["function"]["arguments"])["model"]
                 for state in states if state.history]
    assert consulted[0] == "cheap" and consulted[-1] != "cheap"  # the path's consultation, then a sibling's
    sibling = states[-1]
    assert sibling.history[-1]["content"] == trainer.env.answers[consulted[-1]]["t1"]
    assert all(call.arguments["model"] != consulted[-1] or call.name == "answer" for call in sibling.actions)
