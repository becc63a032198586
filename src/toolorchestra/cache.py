"""Where toolorchestra keeps derived files (converted models, search indexes): $TOOLORCHESTRA_CACHE,
default ~/.cache/toolorchestra."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("TOOLORCHESTRA_CACHE") or Path.home() / ".cache" / "toolorchestra").expanduser()
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
