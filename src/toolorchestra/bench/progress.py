"""The progress bar of long runs (`eval`, `replay record`): done of total, the running accuracy, time left."""

from __future__ import annotations

from typing import Any


class ProgressBar:
    """A rich progress bar named `label` that also shows the accuracy of what this run added; nothing is drawn
    unless `enabled`. `done` of `total` were finished by an earlier run."""

    def __init__(self, label: str, enabled: bool, total: int, done: int = 0) -> None:
        self.label, self.enabled = label, enabled
        self.total, self.done, self.correct, self.new = total, done, 0, 0
        self._progress: Any = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn(f"[bold]{self.label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[accuracy]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total, completed=self.done, accuracy="")
        return self

    def advance(self, correct: bool | None) -> None:
        self.new += 1
        self.correct += bool(correct)
        if self._progress is not None:
            self._progress.update(self._task, advance=1, accuracy=f"acc {self.correct / self.new:.3f} (this run)")

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


__all__ = ["ProgressBar"]
