"""Replay worlds: real models' recorded answers replayed at their recorded cost.

`replay:routerbench` (routerbench.py) and `replay:frames` (frames.py) share base.py (recorded
answers, the replay backend and env), judge.py (free-text judging) and tokens.py (token counts).
`make_replay_backend` is what `backends.pool.make_backend` calls for a catalog model of type replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolorchestra.backends.base import Backend
    from toolorchestra.catalog.schema import ModelSpec


def make_replay_backend(world: str, model: str, spec: ModelSpec) -> Backend:
    """A backend replaying `model`'s recorded answers in `world` (data dir: $TOOLORCHESTRA_DATA or ../shared/data)."""
    from toolorchestra.envs.registry import make_env
    from toolorchestra.envs.replay.base import ReplayBackend, ReplayEnv
    from toolorchestra.errors import ConfigError

    env = make_env(world if world.startswith("replay:") else f"replay:{world}")
    if not isinstance(env, ReplayEnv):
        raise ConfigError(f"model {spec.name!r}: {world!r} is not a replay world")
    if model not in env.models():
        raise ConfigError(f"model {spec.name!r}: replay world {world!r} has no model {model!r}; "
                          f"recorded models are {env.models()}")
    return ReplayBackend(env, spec)


__all__ = ["make_replay_backend"]
