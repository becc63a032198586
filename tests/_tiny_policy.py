"""Test helpers for the trainer tests: a tiny randomly initialized llama with a ChatML tokenizer built in
process (no download), and a fake routing env (FakeRoutingEnv) whose answer tool is a labelled model pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, Completion, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import LatencyPrior, ModelSpec, Price
from toolorchestra.envs.base import Env, Score, Task
from toolorchestra.tools.base import Tool
from toolorchestra.tools.llm import AnswerTool, ExpertTool

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tiny_tokenizer(extra_corpus: tuple[str, ...] = ()) -> Any:
    """A byte-level BPE tokenizer trained on a few lines of tool-call text (and `extra_corpus`), with ChatML
    specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [
        '<tool_call>\n{"name": "answer", "arguments": {"model": "answer-1"}}\n</tool_call>',
        '<tool_response>\nthe answer is B\n</tool_response>',
        "You are an orchestrator. Solve the user's task by calling tools. Prices and latency table.",
        "Which option is correct? A) one B) two C) three D) four",
        *extra_corpus,
    ] * 20
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token="<|im_start|>")
    fast.chat_template = CHATML
    return fast


def tiny_llama(tokenizer: Any, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.eval()
    return model


def save_tiny_policy(folder: Path, seed: int = 0) -> Path:
    tokenizer = tiny_tokenizer()
    tiny_llama(tokenizer, seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class FakeAnswerBackend(Backend):
    """Answers from a table: model name -> the answer it gives to every task (a test fake)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    async def complete(self, messages, tools=None, *, max_tokens=512, temperature=0.0, top_p=1.0, seed=None):
        return Completion(text=self.answer, usage=Usage(prompt_tokens=100, completion_tokens=2), latency_s=0.5)


class FakeRoutingEnv(Env):
    """A fake env: four models behind expert/answer labels, two of which answer correctly ('B')."""

    name = "fake-routing"

    def __init__(self, tasks: int = 6) -> None:
        answers = {"good-cheap": "B", "good-dear": "B", "bad-a": "A", "bad-c": "C"}
        prices = {"good-cheap": 1.0, "good-dear": 10.0, "bad-a": 0.5, "bad-c": 2.0}
        specs = [ModelSpec(name=name, backend={"type": "replay", "world": "fake", "model": name},
                           price=Price(input_per_m=prices[name], output_per_m=prices[name]),
                           latency=LatencyPrior(overhead_s=prices[name] / 10)) for name in answers]
        backends = {name: FakeAnswerBackend(answer) for name, answer in answers.items()}
        self.pool = ModelPool(specs, backends)
        self.labels = {f"answer-{index + 1}": name for index, name in enumerate(answers)}
        self._tasks = [Task(id=f"t{index}", split="train", prompt=f"Question {index}: which option? A) B) C)",
                            gold="B") for index in range(tasks)]

    def tasks(self, split: str) -> list[Task]:
        return [task.model_copy(update={"split": split}) for task in self._tasks]

    def tools_for(self, task: Task) -> list[Tool]:
        expert_labels = {label.replace("answer", "expert"): model for label, model in self.labels.items()}
        return [ExpertTool("expert", "", expert_labels, self.pool), AnswerTool("answer", "", self.labels, self.pool)]

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        answer = (trajectory.final_answer or "").strip()
        return Score(correct=answer == task.gold, details={"answer": answer})

    # recorded outcomes, as a replay world has them (what train/outcome_model.py reads)
    def models(self) -> list[str]:
        return list(self.labels.values())

    def record(self, task_id: str, model: str) -> Any:
        from toolorchestra.envs.replay.base import Recorded

        backend = self.pool.backend(model)
        return Recorded(response=backend.answer, correct=backend.answer == "B")
