"""Where environment data lives: the `data_dir` argument (the CLI's --data-dir), $TOOLORCHESTRA_DATA, or
../shared/data relative to the working directory. A leaf: the registry and every env that finds its own data
(a replay backend building its world) read the same rule from here."""

from __future__ import annotations

import os
from pathlib import Path

from toolorchestra.errors import UserError

DEFAULT_DATA_DIR = Path("../shared/data")
DATA_ENV_VAR = "TOOLORCHESTRA_DATA"


def resolve_data_dir(data_dir: Path | str | None = None) -> Path:
    chosen = data_dir or os.environ.get(DATA_ENV_VAR) or DEFAULT_DATA_DIR
    path = Path(chosen).expanduser()
    if not path.is_dir():
        source = "--data-dir" if data_dir else (DATA_ENV_VAR if os.environ.get(DATA_ENV_VAR) else "default data dir")
        raise UserError(f"{source} {path}: directory not found (set --data-dir or ${DATA_ENV_VAR} to the shared data)")
    return path.resolve()


__all__ = ["DATA_ENV_VAR", "DEFAULT_DATA_DIR", "resolve_data_dir"]
