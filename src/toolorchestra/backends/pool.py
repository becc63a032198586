"""The model pool: model names -> specs and lazily built backends, with cost accounting; backend factories by type."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from toolorchestra.backends.base import Backend, Completion, Message
from toolorchestra.catalog.schema import LocalBackendSpec, ModelSpec, OpenAIBackendSpec
from toolorchestra.errors import ConfigError

BackendFactory = Callable[[ModelSpec], Backend]

# backend type (the catalog's `backend.type`) -> what builds it. A package that provides a backend type registers
# it when imported (envs/replay/__init__.py registers `replay`), so this module imports nothing above backends/.
_FACTORIES: dict[str, BackendFactory] = {}


def register_backend(backend_type: str, factory: BackendFactory) -> None:
    """Make catalog models of `backend_type` buildable by `factory(spec)` (a later registration replaces one)."""
    _FACTORIES[backend_type] = factory


def backend_types() -> list[str]:
    return sorted(_FACTORIES)


def make_backend(spec: ModelSpec) -> Backend:
    """Build the backend a model spec describes, through the factory registered for its type."""
    factory = _FACTORIES.get(spec.backend.type)
    if factory is None:
        raise ConfigError(
            f"model {spec.name!r}: backend type {spec.backend.type!r} is not registered (registered: "
            f"{', '.join(backend_types())}); replay models need toolorchestra.envs.replay imported"
        )
    return factory(spec)


def _openai_backend(spec: ModelSpec) -> Backend:
    # imported when first built: an HTTP client nobody uses costs nothing
    from toolorchestra.backends.openai_compat import OpenAIBackend

    assert isinstance(spec.backend, OpenAIBackendSpec)
    backend_spec = spec.backend
    if backend_spec.base_url_env and os.environ.get(backend_spec.base_url_env):
        # the endpoint comes from the environment (configs/pools/paper-hle.yaml): one file for every deployment
        backend_spec = backend_spec.model_copy(update={"base_url": os.environ[backend_spec.base_url_env]})
    return OpenAIBackend(backend_spec, name=spec.name)


def _local_backend(spec: ModelSpec) -> Backend:
    # imported when first built: torch and transformers load only for a local model
    from toolorchestra.backends.local import LocalBackend

    assert isinstance(spec.backend, LocalBackendSpec)
    return LocalBackend.shared(spec.backend)


register_backend("openai", _openai_backend)
register_backend("local", _local_backend)


class ModelPool:
    """Models by name. Backends are created on first use, so an unused remote model needs no key."""

    def __init__(self, specs: list[ModelSpec], backends: dict[str, Backend] | None = None) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._backends: dict[str, Backend] = dict(backends or {})
        self._cost_factors: dict[str, float] = {}  # model -> factor on the costs its backend reports itself

    def repriced(self, factors: dict[str, float]) -> ModelPool:
        """The same models and backends where each model in `factors` costs that factor times its price, a
        cost its backend reports itself (a replay world's recorded dollars) included; other models unchanged."""
        specs = [
            spec.model_copy(update={"price": spec.price.scaled(factors[name])}) if name in factors else spec
            for name, spec in self._specs.items()
        ]
        pool = ModelPool(specs, self._backends)
        pool._cost_factors = {
            name: self._cost_factors.get(name, 1.0) * factors.get(name, 1.0)
            for name in self._specs
            if name in factors or name in self._cost_factors
        }
        return pool

    def names(self) -> list[str]:
        return list(self._specs)

    def spec(self, name: str) -> ModelSpec:
        return self._specs[name]

    def add(self, spec: ModelSpec, backend: Backend | None = None) -> None:
        self._specs[spec.name] = spec
        if backend is not None:
            self._backends[spec.name] = backend

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = make_backend(self._specs[name])
        return self._backends[name]

    def cost(self, name: str, completion: Completion) -> float:
        if completion.cost_usd is not None:
            return completion.cost_usd * self._cost_factors.get(name, 1.0)
        return self._specs[name].price.cost(completion.usage.prompt_tokens, completion.usage.completion_tokens)

    async def complete(
        self, name: str, messages: list[Message], tools: list[dict[str, Any]] | None = None, **sampling: Any
    ) -> tuple[Completion, float]:
        """One completion from model `name` and its dollar cost at the model's price."""
        completion = await self.backend(name).complete(messages, tools, **sampling)
        completion.model = completion.model or name
        return completion, self.cost(name, completion)

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()
