"""Multi-turn training on the toolscale worlds: gold-episode SFT examples rendered as the rollout engine
renders episodes (tool outputs masked), the SFT-only stage, and a GRPO step with the prompt-prefix cache.
The policy is a tiny random llama over SmolLM2's tokenizer (ToolScale prompts are 3-6k tokens with it)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from toolorchestra.backends.toolcalls import parse_tool_calls  # noqa: E402
from toolorchestra.envs.registry import make_env  # noqa: E402
from toolorchestra.envs.toolscale.tasks import gold_answer  # noqa: E402
from toolorchestra.errors import ConfigError  # noqa: E402
from toolorchestra.train.checkpoint import latest_checkpoint  # noqa: E402
from toolorchestra.train.config import TrainConfig, load_train_config  # noqa: E402
from toolorchestra.train.recipes.sft import build_gold_examples  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from toolorchestra.backends.local import resolve_model_dir

    return AutoTokenizer.from_pretrained(str(resolve_model_dir("smollm2-135m")))


@pytest.fixture(scope="module")
def bank():
    import os

    from conftest import SHARED_DATA

    if not SHARED_DATA.exists():
        if os.environ.get("CI"):
            pytest.fail(f"CI needs the shared data beside the repo at {SHARED_DATA}")
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return make_env("toolscale:bank", SHARED_DATA)


def _tiny_llama(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         tie_word_embeddings=True)
    return LlamaForCausalLM(config).eval()


def _config(run_dir: Path, **overrides) -> TrainConfig:
    """The sft recipe on toolscale:bank, or (with a trainer.total_training_steps override) the grpo recipe with
    the rollout knobs only it reads."""
    grpo = "total_training_steps" in overrides.get("trainer", {})
    config: dict = {
        "recipe": "grpo" if grpo else "sft",
        "seed": 3,
        "data": {"env": "toolscale:bank"},
        "model": {"lora_rank": 4, "lora_alpha": 8},
        "actor": {"stop_gradient_prefix": True},
        "sampler": {"tool_keep_prob": 1.0, "preference_contrast": False, "preferences": {"accuracy": 1.0}},
        "sft": {"targets": "gold_actions", "steps": 1, "batch_size": 2, "max_tasks": 16, "lr": 1e-3},
        "trainer": {"default_local_dir": str(run_dir), "torch_threads": 1, "save_merged_model": False},
    }
    if grpo:
        config["data"]["train_batch_size"] = 2
        config["actor"].update({"ppo_mini_batch_size": 2, "ppo_micro_batch_size": 2})
        config["rollout"] = {"n": 2, "response_length": 8, "max_assistant_turns": 2, "generation_batch_size": 2,
                             "max_episode_tokens": 8000, "cache_prompt_prefix": True}
        config["grpo"] = {"filter_invalid": False}
    for section, values in overrides.items():
        config.setdefault(section, {}).update(values)
    return TrainConfig.model_validate(config)


def _trainer(run_dir: Path, tokenizer, env, **overrides) -> Trainer:
    return Trainer(_config(run_dir, **overrides), env=env,
                   model=_tiny_llama(tokenizer), tokenizer=tokenizer)


def _spans(ids: list[int], mask: list[int], value: int) -> list[list[int]]:
    spans, current = [], []
    for token, flag in zip(ids, mask):
        if flag == value:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    return spans + ([current] if current else [])


def test_gold_examples_are_the_gold_calls_with_tool_outputs_masked(tmp_path, bank, smollm2_tokenizer) -> None:
    trainer = _trainer(tmp_path / "run", smollm2_tokenizer, bank)
    errors: list[str] = []
    examples = build_gold_examples(trainer, errors)
    assert len(examples) == 16 and not errors
    by_prompt = {}
    for task in trainer.tasks:
        by_prompt.setdefault(task.prompt, task)
    families = set()
    for ids, mask in examples:
        assert len(ids) == len(mask)
        turns = [smollm2_tokenizer.decode(span, skip_special_tokens=True) for span in _spans(ids, mask, 1)]
        calls = [parse_tool_calls(turn)[1] for turn in turns]
        assert all(len(turn_calls) == 1 for turn_calls in calls)  # one call per policy turn
        calls = [turn_calls[0] for turn_calls in calls]
        hidden = smollm2_tokenizer.decode(ids, skip_special_tokens=False)
        task = next(task for prompt, task in by_prompt.items() if prompt in hidden)
        families.add(task.meta["family"])
        gold = [(action["name"], action["arguments"]) for action in task.meta["gold_actions"]]
        assert [(call.name, call.arguments) for call in calls] == gold + [("answer", {"answer": gold_answer(task)})]
        # Every policy turn ends with the end-of-turn token inside the loss; tool outputs are outside it.
        assert all(span[-1] == trainer.rollout.renderer.end_of_turn_id for span in _spans(ids, mask, 1))
        masked = smollm2_tokenizer.decode([t for t, m in zip(ids, mask) if not m])
        assert masked.count("<tool_response>") == len(gold)
    assert {"lookup", "single_write"} <= families


def test_sft_only_run_saves_step_zero_and_lowers_the_loss(tmp_path, bank, smollm2_tokenizer) -> None:
    trainer = _trainer(tmp_path / "run", smollm2_tokenizer, bank, sft={"steps": 6, "max_tasks": 8})
    trainer.fit(show_progress=False)
    checkpoint = latest_checkpoint(tmp_path / "run")
    assert checkpoint is not None and checkpoint.name == "step_0"
    import json

    [record] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["stage"] == "sft" and record["sft_examples"] == 8
    assert record["sft_loss_last"] < record["sft_loss_first"]
    # the curve: every step's loss in metrics.jsonl and in TensorBoard
    assert len(record["sft_losses"]) == 6 and record["sft_losses"][-1] == record["sft_loss_last"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [event.step for event in events.Scalars("sft/loss")] == [1, 2, 3, 4, 5, 6]


def test_grpo_step_keeps_the_prompt_cache_across_turns(tmp_path, bank, smollm2_tokenizer) -> None:
    trainer = _trainer(tmp_path / "run", smollm2_tokenizer, bank,
                       sft={"steps": 0}, trainer={"total_training_steps": 1})
    metrics = trainer.step()
    assert metrics["step"] == 1
    # Turn 1 of each group reads its prompt from the cache; later turns extend it.
    assert metrics["prefill_tokens_saved"] > 3000


def test_cached_prefix_rollouts_sample_what_full_prefill_samples(tmp_path, bank, smollm2_tokenizer) -> None:
    turns = []
    for cached in (False, True):
        trainer = _trainer(tmp_path / f"run{cached}", smollm2_tokenizer, bank,
                           sft={"steps": 0}, trainer={"total_training_steps": 1},
                           rollout={"cache_prompt_prefix": cached, "temperature": 1e-4})
        draws = trainer.sampler.next_batch(2)
        torch.manual_seed(5)
        turns.append([episode.policy_turns for episode in trainer.rollout.run(draws)])
    assert turns[0] == turns[1]


def test_nothing_to_train_is_a_config_error(tmp_path) -> None:
    path = tmp_path / "nothing.yaml"
    path.write_text("recipe: sft\n")
    with pytest.raises(ConfigError, match="recipe sft needs sft.steps > 0"):
        load_train_config(path)


@pytest.mark.parametrize("name", ["sft", "grpo"])
def test_shipped_toolscale_configs_validate(name) -> None:
    config = load_train_config(REPO / "configs" / "train" / "toolscale-smollm2" / f"{name}.yaml")
    assert config.data.env == "toolscale:all" and config.actor.stop_gradient_prefix


def test_gold_targets_on_an_env_without_gold_actions_stop_with_the_cause(tmp_path) -> None:
    from _tiny_policy import FakeRoutingEnv, tiny_llama, tiny_tokenizer

    from toolorchestra.errors import TrainingError

    tokenizer = tiny_tokenizer()
    config = TrainConfig.model_validate({
        "recipe": "sft",
        "data": {"env": "fake-routing"},
        "model": {"lora_rank": 4, "lora_alpha": 8},
        "sft": {"targets": "gold_actions", "steps": 1, "max_tasks": 4},
        "trainer": {"default_local_dir": str(tmp_path), "save_merged_model": False},
    })
    trainer = Trainer(config, env=FakeRoutingEnv(), model=tiny_llama(tokenizer), tokenizer=tokenizer)
    with pytest.raises(TrainingError, match="no task carries meta gold_actions"):
        trainer.fit(show_progress=False)
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_by_subtask_sample_gives_rare_families_an_equal_share() -> None:
    import random
    from collections import Counter

    from toolorchestra.envs.base import Task
    from toolorchestra.train.recipes.sft import sample_by_subtask

    tasks = [Task(id=f"l{i}", prompt="q", subtask="bank/lookup") for i in range(90)]
    tasks += [Task(id=f"w{i}", prompt="q", subtask="bank/multi_write") for i in range(3)]
    tasks += [Task(id=f"r{i}", prompt="q", subtask="bank/refusal") for i in range(7)]
    picked = sample_by_subtask(tasks, 15, random.Random(0))
    counts = Counter(task.subtask for task in picked)
    assert len(picked) == 15 and len({task.id for task in picked}) == 15
    # all 3 multi-step writes (the family runs out), then the other two share the rest equally
    assert counts == {"bank/multi_write": 3, "bank/refusal": 6, "bank/lookup": 6}
    assert len(sample_by_subtask(tasks, 100, random.Random(0))) == 100


def test_gold_answer_names_the_field_each_fact_was_read_from(bank) -> None:
    from toolorchestra.envs.toolscale.tasks import execute

    tasks = [task for task in bank.tasks("train") if task.meta["family"] in ("lookup", "error_first")][:20]
    assert {task.meta["family"] for task in tasks} >= {"lookup"}
    for task in tasks:
        [path], [fact] = task.meta["fact_paths"], task.meta["required_facts"]
        assert gold_answer(task) == f"{path}: {fact}"
        # the field's last key appears in the gold tool output, next to the value the answer copies
        outputs = "\n".join(result.output for result in execute(bank.domains["bank"], task.meta["gold_actions"])[0])
        assert f'"{path.split(".")[-1]}": ' in outputs
    writes = [task for task in bank.tasks("train") if task.meta["family"] == "single_write"][:3]
    assert all(gold_answer(task) == "Done." for task in writes)


def test_bfloat16_compute_dtype_gives_the_float32_logprobs_closely(tmp_path, bank, smollm2_tokenizer) -> None:
    from toolorchestra.train.grpo import pad_rows

    trainer = _trainer(tmp_path / "run", smollm2_tokenizer, bank, sft={"max_tasks": 2})
    ids, attention, mask = pad_rows(build_gold_examples(trainer)[:2], trainer.rollout.pad_id, trainer.policy.device)
    values = {}
    for dtype in ("float32", "bfloat16"):
        trainer.config.model.compute_dtype = dtype
        logprobs, _ = trainer.logprobs(ids, attention, mask, 1.0)
        assert logprobs.dtype == torch.float32  # the loss itself stays in float32
        values[dtype] = (logprobs * mask).sum() / mask.sum()
    assert abs(float(values["float32"]) - float(values["bfloat16"])) < 0.05 * abs(float(values["float32"]))
    assert float(values["float32"]) != float(values["bfloat16"])  # autocast did run the matmuls in bfloat16
