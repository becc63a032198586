"""The catalog: which models and tools a pool offers, their backends, prices and latency priors.

Loaded from YAML and validated with pydantic; a bad file is reported as one `ConfigError` naming
the file, the field and what was expected.
"""

from toolorchestra.catalog.load import catalog_from_options, default_catalog, load_catalog
from toolorchestra.catalog.schema import (
    Catalog,
    LatencyPrior,
    LocalBackendSpec,
    ModelSpec,
    OpenAIBackendSpec,
    Price,
    ReplayBackendSpec,
    ToolSpec,
)

__all__ = [
    "Catalog",
    "LatencyPrior",
    "LocalBackendSpec",
    "ModelSpec",
    "OpenAIBackendSpec",
    "Price",
    "ReplayBackendSpec",
    "ToolSpec",
    "catalog_from_options",
    "default_catalog",
    "load_catalog",
]
