"""Environment names -> environments, and where their data lives.

`make_env("replay:routerbench")` builds an Env. The data dir is, in order: the `data_dir` argument
(the CLI's --data-dir), $TOOLORCHESTRA_DATA, or ../shared/data relative to the working directory.
`replay:DIR` (DIR a path: it contains '/' or names an existing directory, relative to the working
directory) is any directory in the replay format (docs/replay.md); registered names come first.
Env modules are imported only when their env is built, so listing names stays cheap.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolorchestra.envs.base import Env
from toolorchestra.errors import UserError

DEFAULT_DATA_DIR = Path("../shared/data")
DATA_ENV_VAR = "TOOLORCHESTRA_DATA"

# name -> (module, class); each class takes the data dir as its first argument.
ENVS: dict[str, tuple[str, str]] = {
    "replay:routerbench": ("toolorchestra.envs.replay.routerbench", "RouterBenchEnv"),
    "replay:frames": ("toolorchestra.envs.replay.frames", "FramesEnv"),
    "replay:frames-typed": ("toolorchestra.envs.replay.frames", "FramesTypedEnv"),
    "toolscale:all": ("toolorchestra.envs.toolscale.environment", "ToolScaleEnv"),
    **{f"toolscale:{domain}": ("toolorchestra.envs.toolscale.environment", f"ToolScale{domain.title()}Env")
       for domain in ("bank", "basketball", "ecommerce", "medicine", "movie", "railway", "restaurant", "school",
                      "travel", "weather")},
}


# Envs that are another env's world seen differently by the orchestrator (same tasks, records and costs):
# their results sit beside, and are checked against, that world's.
SAME_WORLD: dict[str, str] = {"replay:frames-typed": "replay:frames"}


def world_of(name: str) -> str:
    """The world an env's results belong to: `frames` for replay:frames and replay:frames-typed."""
    return SAME_WORLD.get(name, name).split(":", 1)[-1]


def env_names() -> list[str]:
    return sorted(ENVS)


def register_env(name: str, module: str, class_name: str) -> None:
    """Make another environment available by name (later environments register here)."""
    ENVS[name] = (module, class_name)


def resolve_data_dir(data_dir: Path | str | None = None) -> Path:
    chosen = data_dir or os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_DIR
    path = Path(chosen).expanduser()
    if not path.is_dir():
        source = "--data-dir" if data_dir else (DATA_ENV_VAR if os.environ.get(DATA_ENV_VAR) else "default data dir")
        raise UserError(f"{source} {path}: directory not found (set --data-dir or ${DATA_ENV_VAR} to the shared data)")
    return path.resolve()


REPLAY_PREFIX = "replay:"


def replay_dir(name: str) -> Path | None:
    """The directory of a `replay:DIR` name (not a registered one), else None."""
    if name in ENVS or not name.startswith(REPLAY_PREFIX):
        return None
    rest = name[len(REPLAY_PREFIX):]
    return Path(rest) if rest and ("/" in rest or Path(rest).is_dir()) else None


def env_class(name: str) -> Callable[..., Env]:
    if name not in ENVS:
        raise UserError(f"--env {name!r}: unknown environment; valid: {', '.join(env_names())}, or replay:DIR "
                        "for a directory in the replay format (docs/replay.md)")
    module, class_name = ENVS[name]
    return getattr(importlib.import_module(module), class_name)


def make_env(name: str, data_dir: Path | str | None = None, **options: Any) -> Env:
    """Build environment `name` over the data dir, or the replay directory it names (see module docstring)."""
    directory = replay_dir(name)
    if directory is not None:
        from toolorchestra.envs.replay.world import DirectoryWorldEnv

        return DirectoryWorldEnv(directory, name=name, **options)
    factory = env_class(name)
    return factory(resolve_data_dir(data_dir), **options)
