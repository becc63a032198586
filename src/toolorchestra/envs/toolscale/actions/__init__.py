"""Per-domain policy actions that the schema rules cannot derive, by domain name.

A domain's module `actions/<domain>.py` provides
- `specs(domain) -> list[ToolSpec]`: its action tools (validated like every derived tool; a broken rule
  of the policy is a ToolFailure naming the rule), appended after the derived tools;
- `drafts(generator) -> list[Draft]`: tasks using them (families `action_write`, `action_refusal`),
  drafted from the generator's own random stream and verified like every other task.
This package maps domain names to those modules and composes a domain's full tool list; the helpers the
modules share live in `actions/shared.py` and the draft type in `drafts.py`, so the generic derivation
(`tools.py`) and generation (`tasks.py`) sit below or above the domain modules, never beside them in a circle.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from toolorchestra.envs.toolscale.actions import (
    bank,
    basketball,
    ecommerce,
    medicine,
    movie,
    railway,
    restaurant,
    school,
    travel,
    weather,
)
from toolorchestra.envs.toolscale.tools import ToolSpec, derive_tools

if TYPE_CHECKING:
    from toolorchestra.envs.toolscale.data import Domain
    from toolorchestra.envs.toolscale.drafts import Draft
    from toolorchestra.envs.toolscale.tasks import Generator

# imported by name, not from data.DOMAINS, so the import graph (and the cycle test) sees every domain module
MODULES: dict[str, ModuleType] = {
    module.__name__.rpartition(".")[2]: module
    for module in (bank, basketball, ecommerce, medicine, movie, railway, restaurant, school, travel, weather)
}


def action_drafts(generator: Generator) -> list[Draft]:
    module = MODULES.get(generator.domain.name)
    return list(module.drafts(generator)) if module else []


def domain_specs(domain: Domain) -> list[ToolSpec]:
    """The derived tools, then the domain's policy actions (envs/toolscale/actions/<domain>.py, if any)."""
    module = MODULES.get(domain.name)
    return derive_tools(domain.shapes, domain.nested) + (list(module.specs(domain)) if module else [])


__all__ = ["MODULES", "action_drafts", "domain_specs"]
