"""The replay worlds by name: `replay:routerbench`, `replay:frames`, `replay:frames-typed`, their dev worlds
`replay:routerbench-dev` and `replay:frames-dev` (the train split cut in two, for choosing without test; `-dev1`
and `-dev2` cut it with other seeds), and
`replay:DIR` (DIR a path: it contains '/' or names an existing directory) for any directory in the replay format
(docs/replay.md). The replay package owns its names, so its backend can build a world without the env registry
(which lists these among all envs). World modules are imported when their world is built: listing stays cheap."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.datadir import resolve_data_dir

if TYPE_CHECKING:
    from toolorchestra.envs.replay.base import ReplayEnv

REPLAY_PREFIX = "replay:"


def _routerbench(data_dir: Path, **options: Any) -> ReplayEnv:
    from toolorchestra.envs.replay.routerbench import RouterBenchEnv

    return RouterBenchEnv(data_dir, **options)


def _frames(data_dir: Path, **options: Any) -> ReplayEnv:
    from toolorchestra.envs.replay.frames import FramesEnv

    return FramesEnv(data_dir, **options)


def _frames_typed(data_dir: Path, **options: Any) -> ReplayEnv:
    from toolorchestra.envs.replay.frames import FramesTypedEnv

    return FramesTypedEnv(data_dir, **options)


def _dev(factory: Callable[..., ReplayEnv], seed: int = 0) -> Callable[..., ReplayEnv]:
    """The factory of a world's dev world: its train split cut in two (`ReplayEnv.as_dev_world`); seeds 1 and 2
    cut it other ways (`replay:NAME-dev1`, `-dev2`), to see how much a choice made on one cut depends on it."""

    def build(data_dir: Path, **options: Any) -> ReplayEnv:
        env = factory(data_dir, **options)
        env.as_dev_world(seed)
        return env

    return build


# name -> factory(data_dir, **options)
WORLDS: dict[str, Callable[..., ReplayEnv]] = {
    "replay:routerbench": _routerbench,
    "replay:frames": _frames,
    "replay:frames-typed": _frames_typed,
    "replay:routerbench-dev": _dev(_routerbench),
    "replay:frames-dev": _dev(_frames),
    **{f"replay:routerbench-dev{seed}": _dev(_routerbench, seed) for seed in (1, 2)},
    **{f"replay:frames-dev{seed}": _dev(_frames, seed) for seed in (1, 2)},
}


def replay_dir(name: str) -> Path | None:
    """The directory of a `replay:DIR` name (not a named world), else None."""
    if name in WORLDS or not name.startswith(REPLAY_PREFIX):
        return None
    rest = name[len(REPLAY_PREFIX) :]
    return Path(rest) if rest and ("/" in rest or Path(rest).is_dir()) else None


def directory_world(directory: Path, name: str, **options: Any) -> ReplayEnv:
    from toolorchestra.envs.replay.world import DirectoryWorldEnv

    return DirectoryWorldEnv(directory, name=name, **options)


def make_world(name: str, data_dir: Path | str | None = None, **options: Any) -> ReplayEnv | None:
    """The replay world `name` (a named world over the data dir, or a replay directory), else None."""
    directory = replay_dir(name)
    if directory is not None:
        return directory_world(directory, name, **options)
    factory = WORLDS.get(name)
    return factory(resolve_data_dir(data_dir), **options) if factory else None


__all__ = ["REPLAY_PREFIX", "WORLDS", "directory_world", "make_world", "replay_dir"]
