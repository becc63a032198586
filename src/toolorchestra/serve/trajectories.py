"""The episodes a server ran: the most recent kept in memory for `GET /v1/trajectories/{id}`, and every one
appended to a JSONL file (the format `toolorchestra run --save` writes) when the server was given one."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from toolorchestra.agent.trajectory import Trajectory, write_trajectory

DEFAULT_KEPT = 1000
"""Episodes kept in memory; older ones are dropped (a long-running server must not grow without end)."""


class TrajectoryLog:
    def __init__(self, path: Path | None = None, kept: int = DEFAULT_KEPT) -> None:
        self.path = path
        self.kept = kept
        self._recent: OrderedDict[str, Trajectory] = OrderedDict()

    def add(self, trajectory: Trajectory) -> None:
        self._recent[trajectory.task_id] = trajectory
        while len(self._recent) > self.kept:
            self._recent.popitem(last=False)
        if self.path is not None:
            # One short append per episode; flushed at once so a killed server keeps what it answered.
            write_trajectory(self.path, trajectory)

    def get(self, trajectory_id: str) -> Trajectory | None:
        return self._recent.get(trajectory_id)
