"""The rich console the commands print their results through."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

PIPED_WIDTH = 200  # columns when printing to a file or a pipe: every column of a results table fits


def console(*, stderr: bool = False) -> Any:
    """A rich Console: the terminal's width on a terminal; piped (CI logs, `| tee`, files) at least PIPED_WIDTH
    ($COLUMNS if wider), where rich would take 80 or an inherited $COLUMNS and cut a table's columns to
    ellipses."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(highlight=False, stderr=stderr)
    columns = os.environ.get("COLUMNS", "")
    width = max(PIPED_WIDTH, int(columns)) if columns.isdigit() else PIPED_WIDTH
    return Console(highlight=False, stderr=stderr, width=width)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]] = (), **column_options: Any) -> Any:
    """A rich Table titled `title` with these columns (each added with `column_options`) and rows."""
    from rich.table import Table

    result = Table(title=title)
    for column in columns:
        result.add_column(column, **column_options)
    for row in rows:
        result.add_row(*row)
    return result
