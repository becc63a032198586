"""toolorchestra: small orchestrator models that coordinate tools and other models.

The package follows the data flow task -> agent loop -> tools -> trajectory -> reward -> trainer;
see docs/architecture.md. Importing it is cheap: the public names below load their modules on first
access (module `__getattr__`), and torch and transformers load only when a local model is actually used.

    from toolorchestra import Orchestrator, ModelPool, load_catalog, make_env, run_eval, EvalRequest
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it; imported on first access, so `import toolorchestra` (every CLI
# start) pulls in neither pydantic models nor torch
_EXPORTS: dict[str, str] = {
    "Orchestrator": "toolorchestra.agent.loop",
    "Preference": "toolorchestra.agent.preference",
    "Trajectory": "toolorchestra.agent.trajectory",
    "Task": "toolorchestra.envs.base",
    "Score": "toolorchestra.envs.base",
    "Env": "toolorchestra.envs.base",
    "make_env": "toolorchestra.envs.registry",
    "env_names": "toolorchestra.envs.registry",
    "Catalog": "toolorchestra.catalog.schema",
    "load_catalog": "toolorchestra.catalog.load",
    "default_catalog": "toolorchestra.catalog.load",
    "ModelPool": "toolorchestra.backends.pool",
    "EvalRequest": "toolorchestra.bench.eval",
    "run_eval": "toolorchestra.bench.eval",
    "evaluate": "toolorchestra.bench.eval",
    "UserError": "toolorchestra.errors",
}

__all__ = [
    "Catalog",
    "Env",
    "EvalRequest",
    "ModelPool",
    "Orchestrator",
    "Preference",
    "Score",
    "Task",
    "Trajectory",
    "UserError",
    "__version__",
    "default_catalog",
    "env_names",
    "evaluate",
    "load_catalog",
    "make_env",
    "run_eval",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these resolve lazily in __getattr__
    from toolorchestra.agent.loop import Orchestrator
    from toolorchestra.agent.preference import Preference
    from toolorchestra.agent.trajectory import Trajectory
    from toolorchestra.backends.pool import ModelPool
    from toolorchestra.bench.eval import EvalRequest, evaluate, run_eval
    from toolorchestra.catalog.load import default_catalog, load_catalog
    from toolorchestra.catalog.schema import Catalog
    from toolorchestra.envs.base import Env, Score, Task
    from toolorchestra.envs.registry import env_names, make_env
    from toolorchestra.errors import UserError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolorchestra' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: later accesses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
