"""An orchestrator that reads its pool: capability profiles measured on the train split and shown in the price
table, randomized pools in training (random names, log-uniform prices charged on recorded costs too), and the
evaluation options that rename labels and choose the profiles shown."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections import defaultdict

import pytest
from test_replay_format import write_jsonl, write_world

from toolorchestra.agent.prompt import system_prompt
from toolorchestra.bench.eval import EvalRequest, run_eval
from toolorchestra.envs.replay.profiles import calibration_sample, measure_profiles, read_profiles
from toolorchestra.envs.replay.world import DirectoryWorldEnv
from toolorchestra.errors import UserError
from toolorchestra.tools.llm import LLMTool
from toolorchestra.train.config import SamplerConfig
from toolorchestra.train.sampler import TaskSampler


@pytest.fixture
def world(tmp_path):
    """The replay-format test world, with alpha declining ("I don't know") every third question."""
    root = write_world(tmp_path / "world")
    alpha = [{"id": i, "response": "I don't know" if i % 3 == 0 else str(2 * i), "correct": i % 3 != 0,
              "cost_usd": 0.01, "latency_s": 2.0} for i in range(80)]
    write_jsonl(root / "models" / "alpha.jsonl", alpha)
    return root


def test_profiles_are_measured_on_the_train_split_only(world):
    env = DirectoryWorldEnv(world)
    train_ids = {task.id for task in env.tasks("train")}
    profiles = measure_profiles(env, per_subset=None)
    right: dict[str, list[bool]] = defaultdict(list)
    for task in env.tasks("train"):
        right[task.subtask].append(env.record(task.id, "beta-large").correct)
    beta = profiles["beta-large"]
    assert beta.n == len(train_ids)
    assert beta.accuracy == {subset: round(sum(marks) / len(marks), 3) for subset, marks in right.items()}
    declines = [int(task.id) % 3 == 0 for task in env.tasks("train")]
    assert profiles["alpha"].declined == round(sum(declines) / len(declines), 3) and profiles["alpha"].declined > 0
    assert profiles["gamma"].declined == 0.0
    sample = calibration_sample(env.tasks("train"), per_subset=5, seed=0)
    assert len(sample) == 10 and {task.id for task in sample} <= train_ids
    assert sample == calibration_sample(env.tasks("train"), per_subset=5, seed=0)  # every model, same questions
    assert measure_profiles(env, per_subset=5)["alpha"].n == 10


def test_the_price_table_shows_each_labels_profile(world):
    env = DirectoryWorldEnv(world)
    task = env.tasks("test")[0]
    assert "acc " not in system_prompt(env.tools_for(task))  # no profiles unless shown
    profiles = measure_profiles(env)
    env.show_profiles(profiles)
    prompt = system_prompt(env.tools_for(task))
    assert "| acc algebra | acc history | declines | out tok | n |" in prompt
    alpha = profiles["alpha"]
    row = next(line for line in prompt.splitlines() if "| alpha |" in line)
    assert row.endswith(f"| {alpha.accuracy['algebra']:.2f} | {alpha.accuracy['history']:.2f} | "
                        f"{alpha.declined:.2f} | {alpha.output_tokens:.0f} | {alpha.n} |")
    env.relabel({"alpha": "fuzo-12"})
    assert "| fuzo-12 |" in system_prompt(env.tools_for(task)) and "| alpha |" not in system_prompt(env.tools_for(task))
    with pytest.raises(UserError, match="not unique"):
        env.relabel({"gamma": "fuzo-12"})


def test_randomized_pools_hide_names_and_draw_prices_log_uniformly(world):
    env = DirectoryWorldEnv(world)
    config = SamplerConfig(min_labels=1, max_labels=3, label_style="random", price_scale=(0.1, 10.0),
                           price_draw="log_uniform", preference_contrast=False)
    sampler = TaskSampler(env, env.tasks("train"), config, seed=0)
    factors, names = [], set()
    for draw in sampler.next_batch(300):
        factors += draw.price_factors.values()
        shown = [tool.labels for tool in draw.tools if isinstance(tool, LLMTool)]
        assert all(labels == shown[0] for labels in shown)  # one name per model in every tool of the prompt
        assert not set(shown[0]) & {"alpha", "beta-large", "gamma"}
        names |= set(shown[0])
    assert all(0.1 <= factor <= 10.0 for factor in factors)
    below = sum(factor < 1 for factor in factors) / len(factors)
    assert 0.4 < below < 0.6  # log-uniform: as often cheaper as dearer
    assert sum(factor < 0.2 for factor in factors) > 0.05 * len(factors)  # a uniform draw would give ~1%
    assert len(names) > 100


def test_drawn_prices_are_charged_on_recorded_costs_too(world):
    """A training prompt's price factor reaches what the episode pays even where the world recorded the cost
    (alpha): otherwise the targets would ignore the prices the prompt shows."""
    from toolorchestra.train.recipes.counterfactual import label_outcomes

    env = DirectoryWorldEnv(world)
    config = SamplerConfig(min_labels=3, max_labels=3, price_scale=(3.0, 3.0), tool_keep_prob=0.0)
    draw = TaskSampler(env, env.tasks("train"), config, seed=0).next_batch(1)[0]
    outcome = asyncio.run(label_outcomes(env, draw))
    assert outcome is not None
    for model, cost in zip(outcome.models, outcome.cost, strict=True):
        assert cost == pytest.approx(3 * env.call_cost(draw.task, model)), model
    assert math.isclose(outcome.cost[outcome.models.index("alpha")], 0.03)


def test_eval_label_options(world, tmp_path):
    env_name = f"replay:{world}"
    assert EvalRequest(env=env_name, policy="orchestrator:smollm2-135m", out=tmp_path).shown_profiles() == "train"
    legacy = EvalRequest(env=env_name, policy="orchestrator:smollm2-135m-orchestrator", out=tmp_path)
    assert legacy.shown_profiles() == "none"  # trained without profiles: its prompt stays as it was
    assert EvalRequest(env=env_name, policy="single:alpha", out=tmp_path).shown_profiles() == "none"
    assert EvalRequest(env="toolscale:bank", policy="orchestrator:x", out=tmp_path).shown_profiles() == "none"
    base = run_eval(EvalRequest(env=env_name, policy="single:alpha", out=tmp_path / "a", progress=False))
    renamed = run_eval(EvalRequest(env=env_name, policy="single:alpha", out=tmp_path / "b", progress=False,
                                   rename_labels=3))
    assert renamed["accuracy"] == base["accuracy"] and renamed["rename_labels"] == 3
    with pytest.raises(UserError, match="replay worlds"):
        run_eval(EvalRequest(env="toolscale:bank", policy="gold", out=tmp_path / "c", progress=False,
                             rename_labels=1, limit=1))
    shuffled = run_eval(EvalRequest(env=env_name, policy="single:alpha", out=tmp_path / "d", progress=False,
                                    shuffle_labels=2))
    assert shuffled["accuracy"] == base["accuracy"] and shuffled["shuffle_labels"] == 2


def test_shuffled_labels_change_only_the_order_of_the_rows(world):
    env = DirectoryWorldEnv(world)
    answer = next(tool for tool in env.tools_for(env.tasks("test")[0]) if tool.name == "answer")
    before = list(answer.labels.items())
    env.reorder_labels(list(reversed(env.models())))
    answer = next(tool for tool in env.tools_for(env.tasks("test")[0]) if tool.name == "answer")
    assert list(answer.labels.items()) == list(reversed(before))  # the same label for each model, rows reversed
    assert [row["model"] for row in answer.price_rows()] == list(reversed(env.models()))
    with pytest.raises(UserError, match="name every model once"):
        env.reorder_labels(env.models()[:1])


def test_profile_command_writes_what_eval_reads(world, tmp_path):
    out = tmp_path / "profiles.yaml"
    done = subprocess.run([sys.executable, "-m", "toolorchestra.cli.main", "profile", "--env", f"replay:{world}",
                           "--per-subset", "5", "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "wrote 3 profiles (10 questions each)" in done.stdout
    env = DirectoryWorldEnv(world)
    # the same profiles, each naming the world it was measured on (what `run --policy reader` calibrates on)
    expected = {model: profile.model_copy(update={"measured_on": f"replay:{world.resolve()}"})
                for model, profile in measure_profiles(env, per_subset=5).items()}
    assert read_profiles(out, env.models()) == expected
    out.write_text(out.read_text().replace("declined: ", "declined: 7", 1))
    with pytest.raises(UserError, match=r"profile of 'alpha', field declined: .*less than or equal to 1"):
        read_profiles(out, env.models())
    out.write_text("nosuch: {n: 1, accuracy: {a: 0.5}}\n")
    with pytest.raises(UserError, match="no model 'nosuch'"):
        read_profiles(out, env.models())
    done = subprocess.run([sys.executable, "-m", "toolorchestra.cli.main", "profile", "--env", "toolscale:bank",
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "replay worlds" in done.stderr


def test_an_orchestrator_reads_renamed_labels_with_profiles(world, tmp_path):
    """The real local model as orchestrator: its prompt has the random labels and the profile columns, and the
    run records both in its manifest."""
    request = EvalRequest(env=f"replay:{world}", policy="orchestrator:smollm2-135m", out=tmp_path / "o",
                          progress=False, limit=1, max_turns=1, max_tokens=24, tools=["answer"], rename_labels=5)
    metrics = run_eval(request)
    assert metrics["n"] == 1 and metrics["profiles"] == "train"
    trajectory = json.loads((tmp_path / "o" / "trajectories.jsonl").read_text().splitlines()[0])
    system = trajectory["messages"][0]["content"]
    assert "acc algebra" in system and "| alpha |" not in system


def test_profile_targets_follow_the_rows_the_prompt_shows(world):
    """counterfactual.targets profiles: a label's target is computed from its row (price, accuracy on the
    question's type) and nothing else, so the label with the best row for the type gets the highest target
    under the accuracy preference, whatever the label is called or where its row stands."""
    from toolorchestra.agent.preference import Preference
    from toolorchestra.agent.reader import offers
    from toolorchestra.errors import TrainingError
    from toolorchestra.train.recipes.counterfactual import label_outcomes, profile_targets

    env = DirectoryWorldEnv(world)
    config = SamplerConfig(min_labels=3, max_labels=3, label_style="random", shuffle_labels=True,
                           preference_contrast=False, tool_keep_prob=0.0)
    draws = TaskSampler(env, env.tasks("train"), config, seed=3).next_batch(12)
    with pytest.raises(TrainingError, match="sampler.profiles"):  # no profiles shown: refused, not guessed
        profile_targets(draws[0], asyncio.run(label_outcomes(env, draws[0])))
    env.show_profiles(measure_profiles(env))
    draws = TaskSampler(env, env.tasks("train"), config, seed=3).next_batch(12)
    for draw in draws:
        draw.preference = Preference(accuracy=1.0)
        outcome = asyncio.run(label_outcomes(env, draw))
        targets = profile_targets(draw, outcome)
        rows = {offer.label: offer for offer in offers(draw.tools)}
        accuracy = [rows[label].profile.accuracy[draw.task.subtask] for label in outcome.labels]
        best = max(range(len(targets)), key=targets.__getitem__)
        assert accuracy[best] == max(accuracy), (draw.task.subtask, accuracy, targets)
        assert targets == profile_targets(draw, outcome)  # a function of the draw alone


def test_profile_targets_without_profiles_is_a_config_error():
    from toolorchestra.train.config import TrainConfig

    with pytest.raises(ValueError, match="set sampler.profiles: true"):
        TrainConfig.model_validate({"recipe": "counterfactual", "counterfactual": {"targets": "profiles"}})
    TrainConfig.model_validate({"recipe": "counterfactual", "counterfactual": {"targets": "profiles"},
                                "sampler": {"profiles": True}})


def test_step_metrics_say_how_much_of_q_sits_on_the_targets_first_choice():
    """The loss can fall while greedy decoding still picks the wrong row: the step logs q's mass on the labels the
    targets rank first, and whether the argmax is one of them, whatever the recorded rewards say."""
    from toolorchestra.train.recipes.counterfactual import LabelOutcomes, _Stats

    outcome = LabelOutcomes(
        tool="answer",
        labels=["a", "b", "c"],
        models=["m1", "m2", "m3"],
        correct=[1.0, 0.0, 1.0],
        cost=[0.1, 0.2, 0.3],
        latency=[1.0, 1.0, 1.0],
        rewards=[1.0, 0.0, 0.9],  # recorded: "a" is best
        errors=[],
        targets=[0.2, 0.7, 0.7],  # what the policy learns from: "b" and "c" tie first
    )
    stats = _Stats()
    stats.add(outcome, [0.5, 0.3, 0.2], entropy=1.0, log_valid=0.0, preference="accuracy")
    stats.add(outcome, [0.1, 0.1, 0.8], entropy=1.0, log_valid=0.0, preference="accuracy")
    metrics = stats.metrics()
    assert metrics["target/best_mass"] == pytest.approx((0.5 + 0.9) / 2)
    assert metrics["argmax/on_target"] == pytest.approx(0.5)
