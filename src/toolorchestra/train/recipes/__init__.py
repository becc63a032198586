"""Training recipes: how one step turns drawn prompts into a policy update. `recipe:` in the YAML picks one.

- grpo: sampled episodes in a live env, group-normalized advantages (the paper's path).
- counterfactual: every answer label of a replay world scored exactly; `counterfactual.targets` recorded,
  outcome_model or escalation.
- sft: supervised steps on answer labels or gold actions, alone or as the warm start of the other two.
- verl (integrations/verl): the grpo recipe on a cluster, configured by configs/verl/*.yaml.

A step recipe has `step(draws) -> (metrics, episodes)` and `close()`; it reaches the model, optimizer and
logs through the trainer's public interface (train/trainer.py) and reads its own config section.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from toolorchestra.train.sampler import PromptDraw

if TYPE_CHECKING:
    from toolorchestra.train.trainer import Trainer


class Recipe(Protocol):
    def step(self, draws: list[PromptDraw]) -> tuple[dict[str, Any], list[Any]]: ...

    def close(self) -> None: ...


def make_recipe(trainer: Trainer) -> Recipe:
    """The step recipe `trainer.config.recipe` names (the sft recipe has no steps: Trainer.fit runs it)."""
    name = trainer.config.recipe
    if name == "grpo":
        from toolorchestra.train.recipes.grpo import GRPORecipe

        return GRPORecipe(trainer)
    if name == "counterfactual":
        from toolorchestra.train.recipes.counterfactual import CounterfactualRecipe

        return CounterfactualRecipe(trainer)
    from toolorchestra.errors import ConfigError

    raise ConfigError(f"recipe {name} has no steps: it runs once, in Trainer.fit")
