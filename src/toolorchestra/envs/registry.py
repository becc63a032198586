"""Environment names -> environments, and where their data lives.

`make_env("replay:routerbench")` builds an Env. The data dir is, in order: the `data_dir` argument
(the CLI's --data-dir), $TOOLORCHESTRA_DATA, or ../shared/data relative to the working directory
(envs/datadir.py). `replay:DIR` (DIR a path: it contains '/' or names an existing directory, relative to the
working directory) is any directory in the replay format (docs/replay.md); registered names come first.
This module is the top of envs/: it maps names to factories and imports the env packages, none of which imports
it back (the replay worlds are named by envs/replay/worlds.py). Env modules are imported only when their env is
built, so listing names stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolorchestra.envs.base import Env
from toolorchestra.envs.datadir import DATA_ENV_VAR, DEFAULT_DATA_DIR, resolve_data_dir
from toolorchestra.envs.replay.worlds import REPLAY_PREFIX, WORLDS, directory_world
from toolorchestra.envs.replay.worlds import replay_dir as _world_dir
from toolorchestra.envs.toolscale.data import DOMAINS as TOOLSCALE_DOMAINS
from toolorchestra.errors import UserError

# factory(data_dir, **options) -> Env
EnvFactory = Callable[..., Env]


def _toolscale(domain: str | None) -> EnvFactory:
    """The factory of toolscale:DOMAIN (toolscale:all when `domain` is None)."""

    def build(data_dir: Path, **options: Any) -> Env:
        from toolorchestra.envs.toolscale.environment import DOMAIN_ENVS, ToolScaleEnv

        return (DOMAIN_ENVS[domain] if domain else ToolScaleEnv)(data_dir, **options)

    return build


def _live(kind: str) -> EnvFactory:
    """The factory of a live world (envs/live/): hle (options: file, catalog, judge, record_dir) or frames-live."""

    def build(data_dir: Path, **options: Any) -> Env:
        from toolorchestra.envs.live.env import make_live_env

        return make_live_env(kind, data_dir, **options)

    return build


LIVE_PREFIX = "hle:"  # hle:FILE, an HLE-format JSONL file of the user's

ENVS: dict[str, EnvFactory] = {
    **WORLDS,
    "hle": _live("hle"),
    "frames-live": _live("frames-live"),
    "toolscale:all": _toolscale(None),
    **{f"toolscale:{domain}": _toolscale(domain) for domain in TOOLSCALE_DOMAINS},
}


# Envs that are another env's world seen differently by the orchestrator (same tasks, records and costs):
# their results sit beside, and are checked against, that world's.
# (Not the dev worlds: their test split is the world's train questions, so their results stay apart.)
SAME_WORLD: dict[str, str] = {"replay:frames-typed": "replay:frames"}


def world_of(name: str) -> str:
    """The world an env's results belong to: `frames` for replay:frames and replay:frames-typed."""
    return SAME_WORLD.get(name, name).split(":", 1)[-1]


def env_names() -> list[str]:
    return sorted(ENVS)


def register_env(name: str, factory: EnvFactory) -> None:
    """Make another environment available by name: `factory(data_dir, **options)` builds it."""
    ENVS[name] = factory


def replay_dir(name: str) -> Path | None:
    """The directory of a `replay:DIR` name (not a registered one), else None."""
    return None if name in ENVS else _world_dir(name)


def env_factory(name: str) -> EnvFactory:
    if name not in ENVS:
        raise UserError(
            f"--env {name!r}: unknown environment; valid: {', '.join(env_names())}, replay:DIR "
            "for a directory in the replay format (docs/replay.md), or hle:FILE for an HLE-format JSONL file"
        )
    return ENVS[name]


def make_env(name: str, data_dir: Path | str | None = None, **options: Any) -> Env:
    """Build environment `name` over the data dir, or the replay directory it names (see module docstring)."""
    directory = replay_dir(name)
    if directory is not None:
        return directory_world(directory, name, **options)
    if name.startswith(LIVE_PREFIX) and name not in ENVS:
        return ENVS["hle"](resolve_data_dir(data_dir), file=name[len(LIVE_PREFIX) :], **options)
    return env_factory(name)(resolve_data_dir(data_dir), **options)


def is_live(name: str) -> bool:
    """Whether `name` is a live world (every call bought from a pool model, the paper's protocol)."""
    return name in ("hle", "frames-live") or name.startswith(LIVE_PREFIX)


__all__ = [
    "DATA_ENV_VAR",
    "DEFAULT_DATA_DIR",
    "ENVS",
    "LIVE_PREFIX",
    "REPLAY_PREFIX",
    "SAME_WORLD",
    "env_factory",
    "env_names",
    "is_live",
    "make_env",
    "register_env",
    "replay_dir",
    "resolve_data_dir",
    "world_of",
]
