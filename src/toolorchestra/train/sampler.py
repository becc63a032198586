"""The task sampler: what each training prompt offers and asks for (the paper's generalization mechanism).

For every prompt it draws, from one seeded `random.Random`:
- the subset of models offered behind the LLM tools' labels, and which label names which model;
- a price factor per model (uniform in `price_scale`), applied to that model's token and call prices;
- which non-answer tools are offered;
- the preference: most accurate, minimize cost, minimize latency, or "use label X".
Models named in `hold_out_models` are never offered (the unseen-models test: evaluation keeps them).
The preference is stated in the system prompt (agent/prompt.py), the same text evaluation uses.
The sampler's whole state (RNG, epoch order, position) is a JSON-able dict for checkpoints, and one draw is
a JSON-able record (`draw_record` / `draw_from_record`) that other trainers' data files carry (verl's parquet).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from typing import Any

from toolorchestra.agent.preference import WORDINGS, Preference
from toolorchestra.backends.pool import ModelPool
from toolorchestra.envs.base import Env, Task
from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import Tool
from toolorchestra.tools.llm import AnswerTool, LLMTool, random_labels
from toolorchestra.train.config import SamplerConfig

_LABEL_NUMBER = re.compile(r"^(.*?)[-_]?\d+$")


@dataclass
class PromptDraw:
    """One training prompt: the task, the tools offered for it and the user's preference."""

    task: Task
    tools: list[Tool]
    preference: Preference
    price_factors: dict[str, float]
    wording: int = 0  # which phrasing of the preference the prompt uses (agent/prompt.py)


class TaskSampler:
    def __init__(self, env: Env, tasks: list[Task], config: SamplerConfig, seed: int) -> None:
        if not tasks:
            raise ValueError("the sampler needs at least one task")
        self.env = env
        self.tasks = tasks
        self.config = config
        self.held_out = held_out_models(env, tasks[0], config.hold_out_models)
        self.rng = random.Random(seed)
        self.epoch = 0
        self.position = 0
        self.order = self._shuffled_order()

    def _shuffled_order(self) -> list[int]:
        order = list(range(len(self.tasks)))
        self.rng.shuffle(order)
        return order

    def next_batch(self, size: int) -> list[PromptDraw]:
        draws = [self.draw(self._next_task()) for _ in range(size)]
        if self.config.preference_contrast:
            draws = [variant for draw in draws for variant in self.preference_variants(draw)]
        return draws

    def preference_variants(self, draw: PromptDraw) -> list[PromptDraw]:
        """`draw` once per preference kind the config names (same task, tools and prices; a fresh wording)."""
        variants = []
        for kind in self._kinds():
            preference = self._preference_of(kind, draw.tools)
            if kind == "tool" and not preference.tools:
                continue  # no label to prefer among the offered tools
            wording = self.rng.randrange(WORDINGS) if self.config.random_wording else 0
            variants.append(replace(draw, preference=preference, wording=wording))
        return variants

    def _kinds(self) -> list[str]:
        return [kind for kind, weight in self.config.preferences.items() if weight > 0]

    def _next_task(self) -> Task:
        if self.position >= len(self.order):
            self.epoch += 1
            self.position = 0
            self.order = self._shuffled_order()
        task = self.tasks[self.order[self.position]]
        self.position += 1
        return task

    def draw(self, task: Task) -> PromptDraw:
        """Tools, prices and preference for `task` (advances the RNG)."""
        base_tools = self.env.tools_for(task)
        models = _models_behind(base_tools)
        offered = self._offered_models(models)
        factors = {model: self._price_factor() for model in offered}
        names = self._label_names(offered)
        repriced: dict[int, ModelPool] = {}
        tools: list[Tool] = []
        for tool in base_tools:
            if not isinstance(tool, AnswerTool) and self.rng.random() >= self.config.tool_keep_prob:
                continue
            if isinstance(tool, LLMTool) and tool.labels:
                rebuilt = _relabel(tool, offered, names, factors, repriced)
                if rebuilt is not None:
                    tools.append(rebuilt)
            else:
                tools.append(tool)
        preference = self._preference(tools)
        wording = self.rng.randrange(WORDINGS) if self.config.random_wording else 0
        return PromptDraw(task=task, tools=tools, preference=preference, price_factors=factors, wording=wording)

    def _price_factor(self) -> float:
        low, high = self.config.price_scale
        if self.config.price_draw == "log_uniform":
            return math.exp(self.rng.uniform(math.log(low), math.log(high)))
        return self.rng.uniform(low, high)

    def _label_names(self, offered: list[str]) -> dict[str, str] | None:
        """model -> the label every tool shows it under in this prompt; None: the env's labels."""
        if self.config.label_style == "numbered":
            return {model: str(index + 1) for index, model in enumerate(offered)}
        if self.config.label_style == "random":
            return random_labels(offered, self.rng)
        return None

    def _offered_models(self, models: list[str]) -> list[str]:
        models = [model for model in models if model not in self.held_out]
        if not models:
            return []
        high = min(self.config.max_labels, len(models))
        low = min(self.config.min_labels, high)
        chosen = self.rng.sample(models, self.rng.randint(low, high))
        if not self.config.shuffle_labels:
            chosen.sort(key=models.index)
        return chosen

    def _preference(self, tools: list[Tool]) -> Preference:
        kinds = self._kinds()
        kind = self.rng.choices(kinds, weights=[self.config.preferences[k] for k in kinds])[0]
        return self._preference_of(kind, tools)

    def _preference_of(self, kind: str, tools: list[Tool]) -> Preference:
        if kind == "cost":
            return Preference(accuracy=1.0, cost=1.0)
        if kind == "latency":
            return Preference(accuracy=1.0, latency=1.0)
        if kind == "tool":
            names = _preferable_names(tools)
            if names:
                return Preference(accuracy=1.0, tools={self.rng.choice(names): 1.0})
        return Preference()

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {
            "rng": [version, list(internal), gauss],
            "epoch": self.epoch,
            "position": self.position,
            "order": list(self.order),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.order = [int(index) for index in state["order"]]


def held_out_models(env: Env, task: Task, names: list[str]) -> set[str]:
    """The model names behind `names` (model names or the env's tool labels); an unknown name, or holding out
    every model, is a config error."""
    if not names:
        return set()
    tools = env.tools_for(task)
    models = _models_behind(tools)
    by_label = {label: model for tool in tools if isinstance(tool, LLMTool) for label, model in tool.labels.items()}
    unknown = [name for name in names if name not in models and name not in by_label]
    if unknown:
        raise ConfigError(
            f"sampler.hold_out_models: env {env.name!r} has no model {', '.join(map(repr, unknown))}; "
            f"its models are {', '.join(models)}"
        )
    held = {by_label.get(name, name) for name in names}
    if not set(models) - held:
        raise ConfigError("sampler.hold_out_models: holds out every model of the pool; training needs at least one")
    return held


def draw_record(draw: PromptDraw) -> dict[str, Any]:
    """What `draw` offers and asks for, as JSON-able data: the task, the tools in order (an LLM tool with the
    labels it shows and the model behind each), the price factor of each offered model, the preference and
    its wording. `draw_from_record` rebuilds the same draw from it and the env."""
    tools = [
        {"name": tool.name, "labels": dict(tool.labels) if isinstance(tool, LLMTool) and tool.labels else None}
        for tool in draw.tools
    ]
    return {
        "task_id": draw.task.id,
        "split": draw.task.split,
        "tools": tools,
        "price_factors": dict(draw.price_factors),
        "preference": draw.preference.model_dump(mode="json"),
        "wording": draw.wording,
    }


def draw_from_record(env: Env, task: Task, record: dict[str, Any]) -> PromptDraw:
    """The draw `draw_record` wrote for `task`: the env's tools, relabelled and repriced as recorded."""
    base = {tool.name: tool for tool in env.tools_for(task)}
    factors = {str(model): float(factor) for model, factor in record["price_factors"].items()}
    repriced: dict[int, ModelPool] = {}
    tools: list[Tool] = []
    for entry in record["tools"]:
        tool = base.get(entry["name"])
        if tool is None:
            raise ValueError(
                f"tools: env {env.name!r} offers no tool {entry['name']!r} for task {task.id!r}; "
                f"it offers {sorted(base)}"
            )
        labels = entry.get("labels")
        if labels and isinstance(tool, LLMTool):
            pool = repriced.get(id(tool.pool))
            if pool is None:
                pool = repriced[id(tool.pool)] = tool.pool.repriced(factors)
            tool = type(tool)(
                tool.name, tool.description, {str(k): str(v) for k, v in labels.items()}, pool, tool.max_tokens
            )
        tools.append(tool)
    return PromptDraw(
        task=task,
        tools=tools,
        preference=Preference.model_validate(record["preference"]),
        price_factors=factors,
        wording=int(record.get("wording", 0)),
    )


def _models_behind(tools: list[Tool]) -> list[str]:
    """Every model behind any LLM tool's labels, in first-seen order."""
    seen: dict[str, None] = {}
    for tool in tools:
        if isinstance(tool, LLMTool):
            for model in tool.labels.values():
                seen.setdefault(model, None)
    return list(seen)


def _relabel(
    tool: LLMTool,
    offered: list[str],
    names: dict[str, str] | None,
    factors: dict[str, float],
    repriced: dict[int, ModelPool],
) -> Tool | None:
    """A copy of `tool` offering only `offered` models (in that order) at scaled prices, labelled as the env
    labels them, or by `names` (the same model gets the same name in every tool; a number N becomes TOOL-N)."""
    env_label = {model: label for label, model in tool.labels.items()}
    prefix = _label_prefix(tool)

    def label_of(model: str) -> str:
        if names is None:
            return env_label[model]
        return f"{prefix}-{names[model]}" if names[model].isdigit() else names[model]

    labels = {label_of(model): model for model in offered if model in env_label}
    if not labels:
        return None
    pool = repriced.get(id(tool.pool))
    if pool is None:
        pool = tool.pool.repriced(factors)
        repriced[id(tool.pool)] = pool
    return type(tool)(tool.name, tool.description, labels, pool, tool.max_tokens)


def _label_prefix(tool: LLMTool) -> str:
    """`expert` for labels such as expert-3; the tool's name when its labels are not numbered."""
    first = next(iter(tool.labels))
    match = _LABEL_NUMBER.match(first)
    if match is None or not match.group(1) or not all(_LABEL_NUMBER.match(label) for label in tool.labels):
        return tool.name
    return match.group(1) if match.group(1) in (tool.name, "expert", "answer") else tool.name


def _preferable_names(tools: list[Tool]) -> list[str]:
    """Labels of LLM tools that are not the answer tool, else any non-answer tool name, else the answer
    tool's labels."""
    labels = [
        label
        for tool in tools
        if isinstance(tool, LLMTool) and not isinstance(tool, AnswerTool)
        for label in tool.labels
    ]
    if labels:
        return labels
    names = [tool.name for tool in tools if not isinstance(tool, AnswerTool)]
    if names:
        return names
    # Only the answer tool is offered: "use X" names one of its labels (the model to answer with).
    return [label for tool in tools if isinstance(tool, AnswerTool) for label in tool.labels]
