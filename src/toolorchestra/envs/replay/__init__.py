"""Replay worlds: real models' recorded answers replayed at their recorded cost.

`replay:routerbench` (routerbench.py) and `replay:frames` (frames.py) share base.py (recorded
answers, the replay backend and env), judge.py (free-text judging) and tokens.py (token counts);
worlds.py names them. Importing this package registers the backend type `replay` with the model pool
(`backends.pool.register_backend`), so a catalog model `{type: replay, world, model}` builds through
`make_replay_backend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolorchestra.backends.pool import register_backend

if TYPE_CHECKING:
    from toolorchestra.backends.base import Backend
    from toolorchestra.catalog.schema import ModelSpec


def make_replay_backend(world: str, model: str, spec: ModelSpec) -> Backend:
    """A backend replaying `model`'s recorded answers in `world` (data dir: $TOOLORCHESTRA_DATA or ../shared/data)."""
    from toolorchestra.envs.replay.base import ReplayBackend, ReplayEnv
    from toolorchestra.envs.replay.worlds import REPLAY_PREFIX, make_world
    from toolorchestra.errors import ConfigError

    name = world if world.startswith(REPLAY_PREFIX) else f"{REPLAY_PREFIX}{world}"
    env = make_world(name)
    if not isinstance(env, ReplayEnv):
        raise ConfigError(f"model {spec.name!r}: {world!r} is not a replay world")
    if model not in env.models():
        raise ConfigError(
            f"model {spec.name!r}: replay world {world!r} has no model {model!r}; recorded models are {env.models()}"
        )
    return ReplayBackend(env, spec)


def _replay_backend(spec: ModelSpec) -> Backend:
    from toolorchestra.catalog.schema import ReplayBackendSpec

    assert isinstance(spec.backend, ReplayBackendSpec)
    return make_replay_backend(spec.backend.world, spec.backend.model, spec)


register_backend("replay", _replay_backend)

__all__ = ["make_replay_backend"]
