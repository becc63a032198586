"""The replay worlds on the real recorded data: sizes, recorded costs, the replay backend, scoring."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

from toolorchestra.envs.base import current_task
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Completion, Usage
from toolorchestra.backends.pool import ModelPool, make_backend
from toolorchestra.catalog.schema import ModelSpec, Price
from toolorchestra.envs.registry import env_names, make_env, resolve_data_dir
from toolorchestra.envs.replay.base import ReplayEnv
from toolorchestra.envs.replay.judge import final_answer_text, normalized_match, option_letter
from toolorchestra.envs.replay.tokens import count_tokens
from toolorchestra.errors import BackendError, ConfigError, UserError
from toolorchestra.tools.base import ToolContext

GPT4 = "gpt-4-1106-preview"
SONNET = "claude-sonnet4_frames_budget4096"


@pytest.fixture(scope="module")
def routerbench() -> ReplayEnv:
    return make_env("replay:routerbench", _data_dir())


@pytest.fixture(scope="module")
def frames() -> ReplayEnv:
    return make_env("replay:frames", _data_dir())


def _data_dir() -> Path:
    """The shared data beside the repo (module-scoped fixtures cannot use conftest's shared_data)."""
    path = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the shared data beside the repo at {path}")
        pytest.skip(f"shared data not found at {path}")
    return path


def _answer(env: ReplayEnv, task, text: str, answered_by: str | None = None) -> bool:
    trajectory = Trajectory(task_id=task.id, final_answer=text, answered_by=answered_by)
    return env.score(task, trajectory).correct


# --- sizes and recorded totals (the acceptance figures) --------------------------------
def test_routerbench_sizes_and_gpt4_totals(routerbench):
    test, train = routerbench.tasks("test"), routerbench.tasks("train")
    assert (len(test), len(train)) == (945, 2205)
    assert routerbench.data.dropped == {"test": 8, "train": 20}
    assert len(routerbench.models()) == 11
    correct = sum(routerbench.record(t.id, GPT4).correct for t in test)
    cost = sum(routerbench.call_cost(t, GPT4) for t in test)
    assert (correct, round(correct / len(test), 4), round(cost, 4)) == (831, 0.8794, 4.7282)
    train_correct = sum(routerbench.record(t.id, GPT4).correct for t in train)
    assert (train_correct, round(sum(routerbench.call_cost(t, GPT4) for t in train), 4)) == (1939, 11.07)


def test_routerbench_drops_exactly_the_rows_with_missing_cells(routerbench):
    """An independent plain-CSV count of the rows with an empty score or cost cell."""
    csv.field_size_limit(sys.maxsize)
    empty = 0
    for subset in ("arc_challenge", "mbpp", "winogrande"):
        with open(_data_dir() / "routerbench" / f"{subset}_test.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                models = routerbench.models()
                empty += any(row[m] == "" or row[f"{m}|total_cost"] == "" for m in models)
    assert empty == 8
    assert len({task.id for task in routerbench.tasks("test") + routerbench.tasks("train")}) == 945 + 2205


def test_routerbench_order_mixes_subtasks(routerbench):
    first = routerbench.tasks("test")[:60]
    assert {task.subtask for task in first} == {"arc-challenge", "mbpp", "winogrande"}
    assert [t.id for t in routerbench.tasks("test")] == [t.id for t in make_env("replay:routerbench", _data_dir()).tasks("test")]


def test_frames_sizes_and_sonnet_total(frames):
    test = frames.tasks("test")
    assert len(test) == 412 and all(int(task.id) % 2 == 1 for task in test)
    assert len(frames.tasks("train")) == 410  # ids 214 and 524 lack an answer of one configuration
    assert len(frames.models()) == 28
    correct = sum(frames.record(t.id, SONNET).correct for t in test)
    assert (correct, round(correct / len(test), 4)) == (224, 0.5437)


def test_frames_cost_is_tokens_at_list_price(frames):
    task = frames.tasks("test")[0]
    record = frames.record(task.id, SONNET)
    input_tokens = count_tokens(task.prompt)
    assert input_tokens > 5 and record.output_tokens > 0
    assert frames.call_cost(task, SONNET) == pytest.approx(input_tokens * 3.0 / 1e6 + record.output_tokens * 15.0 / 1e6)
    # grok reports reasoning tokens apart from completion tokens: both are billed
    grok = frames.record(task.id, "grok-3-mini_frames_low_effort")
    assert grok.output_tokens > 0 and frames.prices.family_of("grok-3-mini_frames_low_effort")[0] == "grok-3-mini"


# --- the replay backend through the real pool and tools ----------------------------------------
async def test_expert_tool_replays_recorded_response_and_cost(routerbench):
    task = routerbench.tasks("test")[3]
    expert = next(tool for tool in routerbench.tools_for(task) if tool.name == "expert")
    token = current_task.set(task)
    try:
        result = await expert.run({"model": routerbench.label(GPT4), "question": "anything"}, ToolContext(task=task))
    finally:
        current_task.reset(token)
    record = routerbench.record(task.id, GPT4)
    assert result.error is None and result.output == record.response and result.model == GPT4
    assert result.cost_usd == record.cost_usd  # the recorded cost, exactly
    assert result.prompt_tokens == count_tokens(task.prompt) and result.completion_tokens == count_tokens(record.response)
    spec = routerbench.pool.spec(GPT4)
    assert result.latency_s == pytest.approx(spec.latency.seconds(result.completion_tokens))


async def test_replay_backend_needs_an_episode(routerbench):
    backend = routerbench.pool.backend(GPT4)
    with pytest.raises(BackendError, match="inside an episode"):
        await backend.complete([{"role": "user", "content": "hi"}])


async def test_catalog_replay_model_via_make_backend(monkeypatch):
    monkeypatch.setenv("TOOLORCHESTRA_DATA", str(_data_dir()))
    spec = ModelSpec.model_validate({"name": "gpt4", "backend": {"type": "replay", "world": "routerbench", "model": GPT4}})
    backend = make_backend(spec)
    env = make_env("replay:routerbench")
    task = env.tasks("test")[0]
    token = current_task.set(task)
    try:
        completion = await backend.complete([{"role": "user", "content": task.prompt}])
    finally:
        current_task.reset(token)
    assert completion.text == env.record(task.id, GPT4).response
    bad = ModelSpec.model_validate({"name": "x", "backend": {"type": "replay", "world": "routerbench", "model": "gpt-9"}})
    with pytest.raises(ConfigError, match="no model 'gpt-9'"):
        make_backend(bad)


def test_pool_charges_backend_cost_when_reported():
    pool = ModelPool([ModelSpec.model_validate({"name": "m", "backend": {"type": "replay", "world": "w", "model": "m"},
                                                "price": {"input_per_m": 1.0, "output_per_m": 2.0}})])
    priced = Completion(usage=Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000))
    assert pool.cost("m", priced) == pytest.approx(3.0)
    assert pool.cost("m", priced.model_copy(update={"cost_usd": 0.25})) == 0.25


# --- scoring -------------------------------------------------------------------------------------
def test_recorded_response_inherits_its_grade(routerbench):
    for task in routerbench.tasks("test")[:200]:
        for model in routerbench.models():
            record = routerbench.record(task.id, model)
            assert _answer(routerbench, task, record.response + "\n", answered_by=model) == record.correct


def test_letter_judge_agrees_with_every_recorded_multiple_choice_grade(routerbench):
    checked = 0
    for task in routerbench.tasks("test"):
        if task.subtask == "mbpp" or task.gold is None:
            continue
        for model in routerbench.models():
            record = routerbench.record(task.id, model)
            letter = option_letter(record.response, task.meta["options"])
            if letter is not None:
                assert (letter == task.gold) == record.correct, (task.id, model, record.response)
                checked += 1
    assert checked > 7000


def test_free_text_multiple_choice_answers(routerbench):
    task = next(t for t in routerbench.tasks("test") if t.subtask == "arc-challenge" and t.gold)
    wrong = next(letter for letter in task.meta["options"] if letter != task.gold)
    assert _answer(routerbench, task, f"The answer is {task.gold}.")
    assert _answer(routerbench, task, f"({task.gold}) because of physics")
    assert not _answer(routerbench, task, f"The answer is {wrong}.")
    assert not _answer(routerbench, task, "I am not sure.")
    score = routerbench.score(task, Trajectory(task_id=task.id))
    assert not score.correct and score.details["method"] == "no_answer"


def test_code_answers_are_graded_only_by_inheritance(routerbench):
    task = next(t for t in routerbench.tasks("test") if t.subtask == "mbpp")
    right = next(m for m in routerbench.models() if routerbench.record(task.id, m).correct)
    assert _answer(routerbench, task, routerbench.record(task.id, right).response)
    score = routerbench.score(task, Trajectory(task_id=task.id, final_answer="def f(): pass"))
    assert not score.correct and score.details["method"] == "unjudgeable"


def test_option_letter_forms():
    assert option_letter("B") == option_letter("B\n") == option_letter("(B) Dennis") == "B"
    assert option_letter("Answer: C") == "C" and option_letter("the answer is d") == "D"
    assert option_letter("I do") is None and option_letter("A or B") is None
    assert option_letter("E", options="ABCD") is None


def test_normalized_match_forms():
    assert normalized_match("Answer: Jane Ballou<｜end▁of▁sentence｜>", "Jane Ballou")
    assert normalized_match("Mesut Özil", "This was Mesut Ozil.")
    assert normalized_match("Seven.", "7") and normalized_match("It ranks 37th.", "37th")
    assert not normalized_match("Jane", "Jane Ballou")
    assert not normalized_match("Polly Whittaker", "Jane Ballou")
    assert not normalized_match("624", "828")
    assert final_answer_text("Steps...\nAnswer: 624") == "624"


def test_normalized_match_agrees_with_recorded_llm_grades(frames):
    """docs/replay.md reports this agreement; the judge must stay conservative (few false passes)."""
    agree = false_pass = total = 0
    for task in frames.tasks("test"):
        for model in frames.models():
            record = frames.record(task.id, model)
            judged = normalized_match(record.response, task.gold)
            agree += judged == record.correct
            false_pass += judged and not record.correct
            total += 1
    assert agree / total > 0.88
    assert false_pass / total < 0.01


def test_frames_free_text_and_inheritance(frames):
    task = frames.tasks("test")[0]
    assert _answer(frames, task, f"Answer: {task.gold}")
    for model in frames.models()[:6]:
        record = frames.record(task.id, model)
        assert _answer(frames, task, record.response, answered_by=model) == (record.grade == "A")


def test_scoring_is_deterministic(frames, routerbench):
    for env in (frames, routerbench):
        task = env.tasks("test")[5]
        trajectory = Trajectory(task_id=task.id, final_answer="B")
        assert env.score(task, trajectory) == env.score(task, trajectory)


# --- names and data dir --------------------------------------------------------------------------
def test_unknown_env_and_split_are_user_errors(routerbench):
    names = env_names()
    assert names == sorted(names) and {"replay:frames", "replay:routerbench"} <= set(names)
    valid = ("valid: frames-live, hle, replay:frames, replay:frames-dev, replay:frames-dev1, replay:frames-dev2, "
             "replay:frames-typed, replay:routerbench, replay:routerbench-dev, replay:routerbench-dev1, ")
    with pytest.raises(UserError, match=valid + "replay:routerbench-dev2, "):
        make_env("replay:nope", _data_dir())
    with pytest.raises(UserError, match="has splits"):
        routerbench.tasks("dev")


def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TOOLORCHESTRA_DATA", str(_data_dir()))
    assert resolve_data_dir() == _data_dir()
    monkeypatch.setenv("TOOLORCHESTRA_DATA", str(tmp_path / "missing"))
    with pytest.raises(UserError, match="TOOLORCHESTRA_DATA"):
        resolve_data_dir()
    with pytest.raises(UserError, match="routerbench"):
        make_env("replay:routerbench", tmp_path)


def test_price_sheet_names_its_tokenizer_and_sources(frames):
    sheet = frames.prices
    assert "smollm2" in sheet.tokenizer and sheet.as_of
    assert all(family.source.startswith("https://") for family in sheet.families.values())
    assert count_tokens("Hello world") == 2


def test_short_labels_map_to_models(routerbench):
    assert routerbench.label(GPT4) == "gpt-4"
    expert = next(tool for tool in routerbench.tools_for(routerbench.tasks("test")[0]) if tool.name == "expert")
    assert expert.labels["gpt-4"] == GPT4 and len(expert.labels) == 11
    assert isinstance(routerbench.pool.spec(GPT4).price, Price)


class FakeJudgeBackend:
    """Unit-test stand-in for a grader model: grades everything 'A' and counts its calls."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def complete(self, messages, tools=None, **sampling) -> Completion:
        self.prompts.append(messages[-1]["content"])
        return Completion(text=" A")


async def test_llm_judge_grades_free_text_only():
    from toolorchestra.envs.replay.frames import FramesEnv
    from toolorchestra.envs.replay.judge import LLMJudge

    grader = FakeJudgeBackend()
    env = FramesEnv(_data_dir(), judge=LLMJudge(grader))  # type: ignore[arg-type]
    task = env.tasks("test")[0]
    free = await env.ascore(task, Trajectory(task_id=task.id, final_answer="something else entirely"))
    assert free.correct and free.details["method"] == "llm_judge" and free.details["grade"] == "A"
    assert task.gold in grader.prompts[0] and "something else entirely" in grader.prompts[0]
    wrong = next(m for m in env.models() if not env.record(task.id, m).correct)
    inherited = await env.ascore(task, Trajectory(task_id=task.id, final_answer=env.record(task.id, wrong).response))
    assert not inherited.correct and inherited.details["method"] == "inherit" and len(grader.prompts) == 1


def test_frames_typed_shows_the_reasoning_type_to_the_orchestrator_only(frames):
    from toolorchestra.train.rollout import question_text

    typed = make_env("replay:frames-typed", _data_dir())
    assert typed.name == "replay:frames-typed"
    for split in ("train", "test"):
        plain_tasks, typed_tasks = frames.tasks(split), typed.tasks(split)
        assert [t.id for t in typed_tasks] == [t.id for t in plain_tasks]
        for plain, shown in zip(plain_tasks[:25], typed_tasks[:25]):
            # what the orchestrator reads ends with the type; the recorded world (prompt, costs) is unchanged
            assert question_text(shown, None) == f"{plain.prompt}\n\nQuestion type (FRAMES annotation): {plain.subtask}"
            assert shown.prompt == plain.prompt and shown.subtask == plain.subtask and shown.gold == plain.gold
            for model in frames.models()[:4]:
                assert typed.call_cost(shown, model) == frames.call_cost(plain, model)
                assert typed.record(shown.id, model).correct == frames.record(plain.id, model).correct
    # the plain world's cached tasks were not touched
    assert "query" not in frames.tasks("test")[0].meta


@pytest.mark.parametrize("name", ["replay:routerbench", "replay:frames"])
@pytest.mark.parametrize("seed", ["", "1"])
def test_dev_world_cuts_the_train_split_in_two_and_never_shows_test(name, seed):
    """`replay:NAME-dev` (and `-dev1`, `-dev2`, other seeds): half of each subset's train questions train, the
    rest test; no test question in either, the same halves on every build, and the world's own records and
    scoring."""
    world, dev = make_env(name, _data_dir()), make_env(f"{name}-dev{seed}", _data_dir())
    train_ids = {task.id for task in world.tasks("train")}
    dev_train, dev_test = dev.tasks("train"), dev.tasks("test")
    assert {task.id for task in dev_train} | {task.id for task in dev_test} == train_ids
    assert not {task.id for task in dev_train} & {task.id for task in dev_test}
    for subset in {task.subtask for task in world.tasks("train")}:
        halves = [sum(task.subtask == subset for task in split) for split in (dev_train, dev_test)]
        assert abs(halves[0] - halves[1]) <= 1, (subset, halves)
    assert all(task.split == "test" for task in dev_test) and all(task.split == "train" for task in dev_train)
    assert [task.id for task in make_env(f"{name}-dev{seed}", _data_dir()).tasks("train")] == [t.id for t in dev_train]
    if seed:  # another seed cuts it another way
        assert {t.id for t in make_env(f"{name}-dev", _data_dir()).tasks("train")} != {t.id for t in dev_train}
    task = dev_test[0]
    for model in world.models()[:3]:
        assert dev.record(task.id, model) == world.record(task.id, model)
    assert dev.name == f"{name}-dev{seed}" and world.name == name
    # exported results of a dev world go to a folder of their own, never beside the world's test runs
    from toolorchestra.envs.registry import world_of

    assert world_of(dev.name) == f"{name.split(':')[1]}-dev{seed}"


@pytest.mark.parametrize("seed", ["", "2"])
def test_routerbench_dev_world_prices_its_table_on_its_own_train_half(seed):
    """RouterBench's price table shows mean train costs; the dev world's must come from its train half, or its
    test half leaks into every decision that reads a price."""
    dev = make_env(f"replay:routerbench-dev{seed}", _data_dir())
    train = dev.tasks("train")
    rows = {row["model"]: row["per_call"] for row in dev.tools_for(train[0])[1].price_rows()}
    for model in dev.models():
        mean = sum(dev.record(task.id, model).cost_usd or 0.0 for task in train) / len(train)
        assert rows[model] == float(f"{mean:.2g}"), model
    # mistral-7b's mean differs between the halves in the shown digits, so this would fail on the world's prices
    world = make_env("replay:routerbench", _data_dir())
    assert any(world.specs[model].price.per_call != rows[model] for model in dev.models())
