"""The model pool: model names -> specs and lazily built backends, with cost accounting."""

from __future__ import annotations

from typing import Any

from toolorchestra.backends.base import Backend, Completion, Message
from toolorchestra.catalog.schema import ModelSpec


def make_backend(spec: ModelSpec) -> Backend:
    """Build the backend a model spec describes. Heavy modules are imported only here."""
    backend = spec.backend
    if backend.type == "openai":
        from toolorchestra.backends.openai_compat import OpenAIBackend

        return OpenAIBackend(backend, name=spec.name)
    if backend.type == "local":
        from toolorchestra.backends.local import LocalBackend

        return LocalBackend.shared(backend)
    if backend.type == "replay":
        from toolorchestra.envs.replay import make_replay_backend

        return make_replay_backend(backend.world, backend.model, spec)
    raise ValueError(f"unknown backend type {backend.type!r}")


class ModelPool:
    """Models by name. Backends are created on first use, so an unused remote model needs no key."""

    def __init__(self, specs: list[ModelSpec], backends: dict[str, Backend] | None = None) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._backends: dict[str, Backend] = dict(backends or {})

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
            return completion.cost_usd
        return self._specs[name].price.cost(completion.usage.prompt_tokens, completion.usage.completion_tokens)

    async def complete(self, name: str, messages: list[Message], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> tuple[Completion, float]:
        """One completion from model `name` and its dollar cost at the model's price."""
        completion = await self.backend(name).complete(messages, tools, **sampling)
        completion.model = completion.model or name
        return completion, self.cost(name, completion)

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()
