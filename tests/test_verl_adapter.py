"""The verl adapter on CPU: verl's agent loop (instantiated as verl's workers do) against a stand-in rollout
server gives the ids and masks of our rollout engine on the same episode and seed; the group reward equals
toolorchestra.reward; `verl prepare` writes parquet that verl's RLHFDataset loads."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

pytest.importorskip("verl")
torch = pytest.importorskip("torch")

from _tiny_policy import tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.integrations.verl import AGENT_NAME, EXTRA_KEY  # noqa: E402
from toolorchestra.integrations.verl.config import VerlConfig  # noqa: E402
from toolorchestra.integrations.verl.data import read_rows, verl_row  # noqa: E402
from toolorchestra.integrations.verl.episode import row_extra  # noqa: E402
from toolorchestra.integrations.verl.reward import compute_score, group_reward_scores  # noqa: E402
from toolorchestra.reward import group_rewards  # noqa: E402
from toolorchestra.train.config import RolloutConfig  # noqa: E402
from toolorchestra.train.rollout import RolloutEngine  # noqa: E402
from toolorchestra.train.sampler import TaskSampler, draw_from_record  # noqa: E402

ENV = "replay:routerbench"
SETTINGS = {"response_length": 128, "max_episode_tokens": 4096, "max_question_chars": 200,
            "orchestrator_latency": {"overhead_s": 0.05, "output_tokens_per_s": 50.0}}


class ScriptedModel(torch.nn.Module):
    """generate() writes scripted turns, each closed by the end-of-turn token (a test fake)."""

    def __init__(self, inner, tokenizer, turns: list[str]) -> None:
        super().__init__()
        self.inner, self.config, self.tokenizer, self.turns, self.calls = inner, inner.config, tokenizer, turns, 0

    @property
    def device(self):
        return self.inner.device

    def generate(self, input_ids, attention_mask, **kwargs):
        text = self.turns[self.calls % len(self.turns)]
        self.calls += 1
        new = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return torch.cat([input_ids, torch.tensor([new] * input_ids.shape[0])], dim=1)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture
def rows(shared_data):
    from toolorchestra.envs.registry import make_env

    env = make_env(ENV, shared_data)
    draws = TaskSampler(env, env.tasks("train")[:3], VerlConfig().sampler, seed=7).next_batch(3)
    return env, [verl_row(env, ENV, draw, index, SETTINGS["max_question_chars"]) for index, draw in enumerate(draws)]


def _verl_loop(model, tokenizer, shared_data, turns: int, response_length: int = 128):
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset

    import toolorchestra.integrations.verl.agent_loop  # noqa: F401  (registers the loop)
    from toolorchestra.integrations.verl.local_server import LocalTokenServer

    config = OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 8192,
                                          "multi_turn": {"max_assistant_turns": turns}}},
        "data": {}, "toolorchestra": {**SETTINGS, "response_length": response_length, "data_dir": str(shared_data)},
    })
    # as verl's AgentLoopWorker._run_agent_loop builds it
    return hydra.utils.instantiate(_agent_loop_registry[AGENT_NAME], trainer_config=DictConfigWrap(config),
                                   server_manager=LocalTokenServer(model, tokenizer), tokenizer=tokenizer,
                                   processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
                                   tools=ToolListWrap([]), hf_model_type=None)


def _engine_episode(model, tokenizer, env, row, turns: int, response_length: int = 128):
    record = row_extra(row["extra_info"])
    task = next(task for task in env.tasks("train") if task.id == record["draw"]["task_id"])
    draw = draw_from_record(env, task, record["draw"])
    config = RolloutConfig(n=1, response_length=response_length, max_assistant_turns=turns,
                           max_episode_tokens=SETTINGS["max_episode_tokens"], generation_batch_size=1,
                           share_prompt_prefill=False, orchestrator_latency=SETTINGS["orchestrator_latency"])
    engine = RolloutEngine(model, tokenizer, env, config, max_question_chars=SETTINGS["max_question_chars"])
    try:
        return engine.run([draw])[0]
    finally:
        engine.close()


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}


@pytest.mark.parametrize("seed", [0, 1])
def test_agent_loop_matches_the_rollout_engine_on_the_same_seed(tokenizer, shared_data, rows, seed) -> None:
    env, parquet_rows = rows
    model = tiny_llama(tokenizer, seed=3)
    loop = _verl_loop(model, tokenizer, shared_data, turns=3, response_length=16)
    for row in parquet_rows[:2]:
        torch.manual_seed(seed)
        output = asyncio.run(loop.run(dict(SAMPLING), extra_info=row["extra_info"], raw_prompt=row["prompt"]))
        torch.manual_seed(seed)
        episode = _engine_episode(model, tokenizer, env, row, turns=3, response_length=16)
        assert output.prompt_ids + output.response_ids == episode.token_ids
        assert [0] * len(output.prompt_ids) + output.response_mask == episode.loss_mask
        assert output.prompt_ids == episode.token_ids[:episode.prompt_length]
        assert 0 < sum(output.response_mask) < len(output.response_mask)  # policy turns and template text
        assert output.extra_fields[EXTRA_KEY]["features"] == episode.features()


def test_tool_outputs_are_masked_out_and_the_episode_scores_as_in_the_engine(tokenizer, shared_data, rows) -> None:
    env, parquet_rows = rows
    row = parquet_rows[0]
    draw = json.loads(row["extra_info"][EXTRA_KEY])["draw"]
    labels = {tool["name"]: next(iter(tool["labels"])) for tool in draw["tools"] if tool["labels"]}
    turns = []
    if "expert" in labels:
        turns.append('<tool_call>\n{"name": "expert", "arguments": {"model": "%s", "question": "which?"}}\n'
                     '</tool_call>' % labels["expert"])
    turns.append('<tool_call>\n{"name": "answer", "arguments": {"model": "%s"}}\n</tool_call>' % labels["answer"])
    inner = tiny_llama(tokenizer)
    output = asyncio.run(_verl_loop(ScriptedModel(inner, tokenizer, turns), tokenizer, shared_data, 3).run(
        dict(SAMPLING), extra_info=row["extra_info"], raw_prompt=row["prompt"]))
    episode = _engine_episode(ScriptedModel(inner, tokenizer, turns), tokenizer, env, row, turns=3)
    assert output.prompt_ids + output.response_ids == episode.token_ids
    assert [0] * len(output.prompt_ids) + output.response_mask == episode.loss_mask
    record = output.extra_fields[EXTRA_KEY]
    assert episode.trajectory.tool_steps, [step.error for step in episode.trajectory.steps]
    assert record["correct"] == episode.correct and record["features"] == episode.features()
    assert output.reward_score == float(episode.correct)
    # the tool response sits between policy turns, outside the loss
    masked = tokenizer.decode([t for t, m in zip(output.response_ids, output.response_mask) if m == 0])
    assert "<|im_start|>tool" in masked or "<|im_start|>user" in masked


def _random_groups(rng: random.Random, groups: int, size: int) -> tuple[list[dict], list[str]]:
    records, uids = [], []
    for group in range(groups):
        preference = rng.choice([{"accuracy": 1.0}, {"accuracy": 1.0, "cost": 1.0},
                                 {"accuracy": 1.0, "latency": 1.0, "calls:expert": 0.5}])
        for _ in range(size):
            features = {"accuracy": float(rng.random() < 0.6), "cost": rng.uniform(0, 0.01),
                        "latency": rng.uniform(0.1, 9.0)}
            if rng.random() < 0.5:
                features["calls:expert"] = float(rng.randint(0, 3))
            records.append({"features": features, "correct": bool(features["accuracy"]), "preference": preference})
            uids.append(f"uid-{group}")
    return records, uids


def test_group_reward_equals_toolorchestra_reward() -> None:
    rng = random.Random(0)
    records, uids = _random_groups(rng, groups=6, size=8)
    order = list(range(len(records)))
    rng.shuffle(order)  # verl's batch need not keep a group's rollouts together
    shuffled = group_reward_scores([records[i] for i in order], [uids[i] for i in order])
    expected = []
    for start in range(0, len(records), 8):
        group = records[start:start + 8]
        expected += group_rewards([r["features"] for r in group], [r["correct"] for r in group],
                                  group[0]["preference"])
    for position, index in enumerate(order):
        assert abs(shuffled[position] - expected[index]) < 1e-9
    batch = compute_score([ENV] * len(records), [""] * len(records), [None] * len(records),
                          [{EXTRA_KEY: r, "uid": u} for r, u in zip(records, uids)])
    assert max(abs(a - b) for a, b in zip(batch, expected)) < 1e-9


def test_the_manager_writes_group_rewards_into_verls_batch() -> None:
    import numpy as np
    from tensordict import TensorDict
    from verl.protocol import DataProto

    from toolorchestra.integrations.verl.agent_loop import apply_group_rewards

    records, uids = _random_groups(random.Random(1), groups=3, size=4)
    size, prompt, response = len(records), 5, 7
    lengths = [1 + (i * 3) % response for i in range(size)]
    attention = torch.zeros(size, prompt + response, dtype=torch.long)
    attention[:, :prompt] = 1
    for row, length in enumerate(lengths):
        attention[row, prompt:prompt + length] = 1
    batch = TensorDict({"prompts": torch.ones(size, prompt, dtype=torch.long),
                        "responses": torch.ones(size, response, dtype=torch.long),
                        "response_mask": attention[:, prompt:].clone(), "attention_mask": attention,
                        "rm_scores": torch.ones(size, response)}, batch_size=size)
    output = DataProto(batch=batch, non_tensor_batch={EXTRA_KEY: np.array(records, dtype=object)}, meta_info={})
    apply_group_rewards(output, np.array(uids, dtype=object))
    expected = group_reward_scores(records, uids)
    scores = output.batch["rm_scores"]
    for row, length in enumerate(lengths):
        assert abs(float(scores[row, length - 1]) - expected[row]) < 1e-6  # float32 tensor
        assert float(scores[row].abs().sum() - abs(scores[row, length - 1])) == 0.0
    assert max(abs(a - b) for a, b in zip(output.non_tensor_batch["group_reward"], expected)) < 1e-9


def test_verl_prepare_writes_parquet_that_rlhfdataset_loads(tmp_path, shared_data, tokenizer) -> None:
    from omegaconf import OmegaConf
    from typer.testing import CliRunner
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from toolorchestra.cli.main import app

    (tmp_path / "c.yaml").write_text("data: {max_tasks: 6, max_question_chars: 200}\nsampler: {tool_keep_prob: 0.5}\n")
    result = CliRunner().invoke(app, ["verl", "prepare", "--env", ENV, "--out", str(tmp_path / "d"), "--config",
                                      str(tmp_path / "c.yaml"), "--max-test-tasks", "4", "--epochs", "2",
                                      "--data-dir", str(shared_data)])
    assert result.exit_code == 0, result.output
    rows = read_rows(tmp_path / "d" / "train.parquet")
    assert len(rows) == 12 and len(read_rows(tmp_path / "d" / "test.parquet")) == 4
    config = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "max_prompt_length": 100000,
                               "filter_overlong_prompts": True, "return_raw_chat": True, "prompt_key": "prompt"})
    dataset = RLHFDataset(str(tmp_path / "d" / "train.parquet"), tokenizer, config)
    assert len(dataset) == 12
    item = dataset[3]
    assert item["agent_name"] == AGENT_NAME and item["data_source"] == f"toolorchestra/{ENV}"
    assert item["raw_prompt"][0]["role"] == "system" and item["raw_prompt"][1]["role"] == "user"
    record = row_extra(item["extra_info"])
    assert set(record["draw"]) >= {"task_id", "tools", "price_factors", "preference", "wording"}
    assert any(factor != 1.0 for factor in record["draw"]["price_factors"].values())
