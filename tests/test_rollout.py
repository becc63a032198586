"""The rollout engine (token-in/token-out episodes, loss mask, shared prefill, caps) and the task sampler."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import FakeRoutingEnv, tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.agent.loop import Orchestrator  # noqa: E402
from toolorchestra.agent.preference import Preference  # noqa: E402
from toolorchestra.backends.base import Backend, Completion  # noqa: E402
from toolorchestra.backends.toolcalls import to_plain_messages  # noqa: E402
from toolorchestra.train.config import RolloutConfig, SamplerConfig  # noqa: E402
from toolorchestra.train.rollout import RolloutEngine  # noqa: E402
from toolorchestra.train.sampler import PromptDraw, TaskSampler  # noqa: E402

EXPERT_CALL = '<tool_call>\n{"name": "expert", "arguments": {"model": "expert-3", "question": "which?"}}\n</tool_call>'
ANSWER_CALL = '<tool_call>\n{"name": "answer", "arguments": {"model": "answer-1"}}\n</tool_call>'


class FakeScriptedPolicy(torch.nn.Module):
    """A tiny llama whose generate() writes scripted turns (a test fake for exact-text checks)."""

    def __init__(self, model, tokenizer, turns: list[str]) -> None:
        super().__init__()
        self.inner = model
        self.config = model.config
        self.tokenizer = tokenizer
        self.turns = turns
        self.calls = 0

    @property
    def device(self):
        return self.inner.device

    def generate(self, input_ids, attention_mask, **kwargs):
        text = self.turns[self.calls]
        self.calls += 1
        new = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        rows = torch.tensor([new] * input_ids.shape[0])
        return torch.cat([input_ids, rows], dim=1)


class FakeScriptedBackend(Backend):
    """The same scripted turns for the live Orchestrator loop (a test fake)."""

    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    async def complete(self, messages, tools=None, **_):
        from toolorchestra.backends.toolcalls import parse_tool_calls

        prose, calls, errors = parse_tool_calls(self.turns.pop(0))
        return Completion(text=prose, tool_calls=calls, call_errors=errors)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _draw(env: FakeRoutingEnv, preference: Preference | None = None) -> PromptDraw:
    task = env.tasks("train")[0]
    return PromptDraw(task=task, tools=env.tools_for(task), preference=preference or Preference(), price_factors={})


def _engine(model, tokenizer, env, **rollout) -> RolloutEngine:
    config = RolloutConfig(**{"n": 1, "response_length": 64, "max_assistant_turns": 3,
                              "orchestrator_latency": {"overhead_s": 0.0, "output_tokens_per_s": 1e12},
                              "share_prompt_prefill": False, **rollout})
    return RolloutEngine(model, tokenizer, env, config)


def test_scripted_episode_tokens_are_the_chat_template_of_its_messages(tokenizer) -> None:
    env = FakeRoutingEnv()
    policy = FakeScriptedPolicy(tiny_llama(tokenizer), tokenizer, [EXPERT_CALL, ANSWER_CALL])
    engine = _engine(policy, tokenizer, env)
    draw = _draw(env)
    [episode] = engine.run([draw])
    assert episode.trajectory.stop_reason == "answer" and episode.correct and episode.valid
    schemas = [tool.schema() for tool in draw.tools]
    # The episode's ids end with the policy's last turn: the answer's own observation is never shown.
    last_assistant = max(i for i, m in enumerate(episode.messages) if m["role"] == "assistant")
    rendered = tokenizer.apply_chat_template(to_plain_messages(episode.messages[:last_assistant + 1], schemas),
                                             tokenize=False)
    assert tokenizer.decode(episode.token_ids) + "\n" == rendered
    policy_ids = [t for t, m in zip(episode.token_ids, episode.loss_mask) if m]
    assert tokenizer.decode(policy_ids) == EXPERT_CALL + "<|im_end|>" + ANSWER_CALL + "<|im_end|>"
    assert [tokenizer.decode(turn) for turn in episode.policy_turns] == [EXPERT_CALL + "<|im_end|>",
                                                                         ANSWER_CALL + "<|im_end|>"]
    assert episode.loss_mask[:episode.prompt_length] == [0] * episode.prompt_length


async def test_trajectory_matches_the_live_loop(tokenizer) -> None:
    env = FakeRoutingEnv()
    policy = FakeScriptedPolicy(tiny_llama(tokenizer), tokenizer, [EXPERT_CALL, ANSWER_CALL])
    draw = _draw(env, Preference(accuracy=1.0, cost=1.0))
    engine = _engine(policy, tokenizer, env)
    [episode] = await _in_thread(engine.run, [draw])
    live = await Orchestrator(FakeScriptedBackend([EXPERT_CALL, ANSWER_CALL]), draw.tools,
                              preference=draw.preference).run(draw.task)
    assert episode.trajectory.cost_usd == pytest.approx(live.cost_usd)
    assert episode.trajectory.latency_s == pytest.approx(live.latency_s)
    assert episode.trajectory.calls_per_tool() == live.calls_per_tool() == {"expert": 1, "answer": 1}
    assert episode.trajectory.calls_per_model() == live.calls_per_model()
    assert episode.trajectory.final_answer == live.final_answer == "B"
    assert [(s.kind, s.name, s.label) for s in episode.trajectory.steps] == [(s.kind, s.name, s.label)
                                                                               for s in live.steps]
    assert episode.messages[0] == live.messages[0]  # the same system prompt as evaluation
    assert episode.features()["calls:expert-3"] == 1.0 and episode.features()["calls:answer"] == 1.0


async def _in_thread(function, *args):
    import asyncio

    return await asyncio.to_thread(function, *args)


def test_random_policy_mask_marks_exactly_the_generated_turns(tokenizer) -> None:
    env = FakeRoutingEnv()
    torch.manual_seed(0)
    engine = _engine(tiny_llama(tokenizer), tokenizer, env, n=3, response_length=12, max_assistant_turns=3)
    episodes = engine.run([_draw(env), _draw(env, Preference(cost=1.0))])
    assert len(episodes) == 6
    for episode in episodes:
        assert len(episode.loss_mask) == len(episode.token_ids)
        policy_ids = [t for t, m in zip(episode.token_ids, episode.loss_mask) if m]
        assert policy_ids == [t for turn in episode.policy_turns for t in turn]
        assert tokenizer.decode(policy_ids) == "".join(tokenizer.decode(turn) for turn in episode.policy_turns)
        assert 1 <= len(episode.policy_turns) <= 3
        assert all(len(turn) <= 12 for turn in episode.policy_turns)
        # Every policy turn starts right after an assistant header the template wrote (mask 0).
        header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        start = 0
        for turn in episode.policy_turns:
            index = next(i for i in range(start, len(episode.loss_mask)) if episode.loss_mask[i])
            assert episode.token_ids[index - len(header):index] == header
            start = index + len(turn)


def test_shared_prefill_gives_the_same_samples_and_saves_prefill(tokenizer) -> None:
    env = FakeRoutingEnv()
    model = tiny_llama(tokenizer)
    results = []
    for share in (False, True):
        engine = _engine(model, tokenizer, env, n=4, response_length=10, max_assistant_turns=1,
                         share_prompt_prefill=share)
        torch.manual_seed(1)
        episodes = engine.run([_draw(env), _draw(env, Preference(cost=1.0))])
        results.append([episode.policy_turns for episode in episodes])
        saved = engine.prefill_stats["prefill_tokens_saved"]
        assert (saved > 0) == share
    assert results[0] == results[1]


def test_episode_token_cap(tokenizer) -> None:
    env = FakeRoutingEnv()
    engine = _engine(tiny_llama(tokenizer), tokenizer, env, n=2, response_length=8, max_assistant_turns=5)
    prompt_length = engine.start([_draw(env)])[0].prompt_length
    engine.config.max_episode_tokens = prompt_length + 12
    episodes = engine.run([_draw(env)])
    for episode in episodes:
        assert sum(episode.loss_mask) <= 12
        assert episode.trajectory.stop_reason in ("answer", "max_turns")


def test_sampler_is_seeded_and_its_state_resumes_the_stream() -> None:
    env = FakeRoutingEnv(tasks=5)
    config = SamplerConfig(min_labels=2, max_labels=3, label_style="numbered",
                           preferences={"accuracy": 1, "cost": 1, "latency": 1, "tool": 1})

    def summary(draw: PromptDraw) -> str:
        tools = {tool.name: getattr(tool, "labels", None) for tool in draw.tools}
        prices = {m: round(f, 9) for m, f in draw.price_factors.items()}
        return json.dumps([draw.task.id, tools, prices, draw.preference.weights()], sort_keys=True)

    first = TaskSampler(env, env.tasks("train"), config, seed=3)
    second = TaskSampler(env, env.tasks("train"), config, seed=3)
    stream = [summary(d) for d in first.next_batch(7)]
    assert stream == [summary(d) for d in second.next_batch(7)]
    assert len({s for s in stream}) > 1
    state = json.loads(json.dumps(first.state_dict()))
    upcoming = [summary(d) for d in first.next_batch(6)]
    third = TaskSampler(env, env.tasks("train"), config, seed=99)
    third.load_state_dict(state)
    assert [summary(d) for d in third.next_batch(6)] == upcoming


def test_sampler_draws_subsets_prices_and_consistent_labels() -> None:
    env = FakeRoutingEnv(tasks=3)
    sampler = TaskSampler(env, env.tasks("train"), SamplerConfig(min_labels=2, max_labels=3, label_style="numbered",
                                                                 price_scale=(0.5, 2.0)), seed=0)
    for _ in range(10):
        draw = sampler.draw(env.tasks("train")[0])
        expert = next(t for t in draw.tools if t.name == "expert")
        answer = next(t for t in draw.tools if t.name == "answer")
        assert 2 <= len(expert.labels) <= 3
        # expert-N and answer-N name the same model; prices are scaled by the drawn factor.
        assert {k.split("-")[1]: v for k, v in expert.labels.items()} == {k.split("-")[1]: v
                                                                          for k, v in answer.labels.items()}
        for model, factor in draw.price_factors.items():
            assert 0.5 <= factor <= 2.0
            assert expert.pool.spec(model).price.input_per_m == pytest.approx(env.pool.spec(model).price.input_per_m * factor)
        assert "answer" in draw.tools[-1].name
