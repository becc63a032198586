"""The models one server answers for: the pool's models, passed through, and its orchestrators, each
answering with a whole episode.

Every backend call, whether a client's pass-through request or a call an episode makes (the
orchestrator's own turns and its LLM tools), waits on one shared semaphore, so `max_concurrency`
bounds the load on the backends however the requests are mixed. A slot is held for one call only,
never across an episode, so episodes cannot starve each other into a deadlock.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, Completion, Message, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import Catalog
from toolorchestra.envs.base import Task
from toolorchestra.serve.protocol import Answer, ApiError, ChatRequest
from toolorchestra.serve.trajectories import TrajectoryLog
from toolorchestra.tools.base import Tool

ORCHESTRATOR_PREFIX = "orchestrator:"
"""Served name of an orchestrator: `orchestrator:MODEL`, as `eval --policy orchestrator:MODEL` names it.
The prefix keeps the episode apart from the raw orchestrator model, which is served under its own name."""

DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_MAX_TURNS = 6  # as `toolorchestra run`
DEFAULT_MAX_TOKENS = 512  # Backend.complete's default, used when the client sets no limit
TRAJECTORY_HEADER = "x-toolorchestra-trajectory-id"


class BoundedBackend(Backend):
    """A backend whose calls each hold a slot of a shared semaphore."""

    def __init__(self, inner: Backend, slots: asyncio.Semaphore) -> None:
        self.inner = inner
        self.name = inner.name
        self._slots = slots

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]] | None = None,
                       **sampling: Any) -> Completion:
        async with self._slots:
            return await self.inner.complete(messages, tools, **sampling)


class BoundedPool(ModelPool):
    """`pool` with every backend wrapped in a `BoundedBackend` on first use (backends stay lazily built)."""

    def __init__(self, pool: ModelPool, slots: asyncio.Semaphore) -> None:
        super().__init__([pool.spec(name) for name in pool.names()])
        self._inner = pool
        self._slots = slots

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = BoundedBackend(self._inner.backend(name), self._slots)
        return self._backends[name]

    async def aclose(self) -> None:
        await self._inner.aclose()  # the wrappers hold nothing of their own


@dataclass
class OrchestratorModel:
    """An orchestrator served as a model: each request runs one episode on the last user message."""

    model_name: str
    tools: list[Tool]
    preference: Preference = field(default_factory=Preference)
    max_turns: int = DEFAULT_MAX_TURNS
    max_budget_usd: float | None = None

    @property
    def served_name(self) -> str:
        return ORCHESTRATOR_PREFIX + self.model_name

    async def answer(self, pool: ModelPool, request: ChatRequest, record: Callable[[Trajectory], None]) -> Answer:
        """Run one episode and `record` its trajectory, failed or not; ApiError 502 if it failed."""
        sampling = request.sampling()
        try:
            backend = pool.backend(self.model_name)
        except Exception as exc:  # e.g. a remote model whose API key is not set
            raise _backend_failure(self.served_name, exc) from exc
        orchestrator = Orchestrator(
            backend, self.tools, model_name=self.model_name,
            price=pool.spec(self.model_name).price, preference=self.preference, max_turns=self.max_turns,
            max_budget_usd=self.max_budget_usd, max_tokens=sampling.get("max_tokens", 512),
            temperature=sampling.get("temperature", 0.0),
        )
        # The trajectory id is the task id, so a logged trajectory and the response header match.
        task = Task(id=f"traj-{uuid.uuid4().hex}", split="serve", prompt=request.last_user_text())
        trajectory = await orchestrator.run(task)
        trajectory.policy = self.served_name
        record(trajectory)
        if trajectory.stop_reason == "error":
            failure = next((step.error for step in reversed(trajectory.steps) if step.error), "unknown error")
            raise ApiError(502, f"{self.served_name}: {failure}", type="server_error", code="backend_error",
                           headers={TRAJECTORY_HEADER: trajectory.task_id})
        completion = Completion(
            text=trajectory.final_answer or "", model=self.served_name, latency_s=trajectory.latency_s,
            usage=Usage(prompt_tokens=trajectory.prompt_tokens, completion_tokens=trajectory.completion_tokens),
        )
        # An episode cut off by its turn or dollar cap ran out of room, as a completion cut at max_tokens.
        finish = "stop" if trajectory.stop_reason == "answer" else "length"
        return Answer(completion, trajectory.cost_usd, finish, trajectory)


class ServedModels:
    """The pool's models and orchestrators by served name, with the one semaphore they all share."""

    def __init__(self, pool: ModelPool, max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                 episodes: TrajectoryLog | None = None) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {max_concurrency}")
        self.slots = asyncio.Semaphore(max_concurrency)
        self.pool: ModelPool = BoundedPool(pool, self.slots)
        self.orchestrators: dict[str, OrchestratorModel] = {}
        self.episodes = episodes or TrajectoryLog()

    @classmethod
    def from_catalog(cls, catalog: Catalog, *, max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                     episodes: TrajectoryLog | None = None, prefer: str | None = None,
                     max_turns: int = DEFAULT_MAX_TURNS, max_budget_usd: float | None = None) -> "ServedModels":
        """Every model of `catalog` plus its orchestrator over the catalog's tools, as `run` builds them."""
        from toolorchestra.tools.factory import build_tools

        served = cls(ModelPool(catalog.models), max_concurrency, episodes)
        tools = build_tools(catalog.tools, served.pool)  # over the bounded pool: tool calls take slots too
        local_tools = [spec.name for spec in catalog.tools if spec.type in ("python", "search")]
        served.add_orchestrator(OrchestratorModel(catalog.orchestrator, tools, Preference.parse(prefer, local_tools),
                                                  max_turns, max_budget_usd))
        return served

    def add_orchestrator(self, orchestrator: OrchestratorModel) -> None:
        if orchestrator.model_name not in self.pool.names():
            raise ValueError(f"orchestrator model {orchestrator.model_name!r} is not in the pool")
        self.orchestrators[orchestrator.served_name] = orchestrator

    def names(self) -> list[str]:
        return self.pool.names() + list(self.orchestrators)

    def check_known(self, name: str) -> None:
        if name not in self.orchestrators and name not in self.pool.names():
            raise ApiError(404, f"The model `{name}` does not exist; GET /v1/models lists the served models",
                           param="model", code="model_not_found")

    async def answer(self, request: ChatRequest) -> Answer:
        """The requested model's answer; ApiError 404 for an unknown model, 502 when its backend fails."""
        self.check_known(request.model)
        orchestrator = self.orchestrators.get(request.model)
        if orchestrator is not None:
            return await orchestrator.answer(self.pool, request, self.episodes.add)
        return await self._pass_through(request)

    async def _pass_through(self, request: ChatRequest) -> Answer:
        messages, tools, sampling = request.backend_messages(), request.offered_tools(), request.sampling()
        try:
            completion, cost = await self.pool.complete(request.model, messages, tools, **sampling)
        except Exception as exc:  # any backend failure is the upstream's fault, reported as a 502
            raise _backend_failure(request.model, exc) from exc
        return Answer(completion, cost, _finish_reason(completion, sampling.get("max_tokens", DEFAULT_MAX_TOKENS)))

    async def aclose(self) -> None:
        await self.pool.aclose()


def _finish_reason(completion: Completion, max_tokens: int) -> Literal["stop", "tool_calls", "length"]:
    # A Completion does not say why generation stopped; a reply that used every token it was allowed was
    # most likely cut off there.
    if completion.tool_calls:
        return "tool_calls"
    return "length" if completion.usage.completion_tokens >= max_tokens else "stop"


def _backend_failure(model: str, exc: Exception) -> ApiError:
    return ApiError(502, f"model {model!r} failed: {exc.__class__.__name__}: {exc}", type="server_error",
                    code="backend_error")
