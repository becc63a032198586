"""The models one server answers for: the pool's models, passed through, and its orchestrators, each
answering with a whole episode.

Every backend call, whether a client's pass-through request or a call an episode makes (the
orchestrator's own turns and its LLM tools), waits on one shared semaphore, so `max_concurrency`
bounds the load on the backends however the requests are mixed. A slot is held for one call only,
never across an episode, so episodes cannot starve each other into a deadlock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.backends.base import Backend, Completion, Message, Usage
from toolorchestra.backends.pool import ModelPool
from toolorchestra.backends.schema_check import SchemaError
from toolorchestra.catalog.schema import Catalog
from toolorchestra.envs.base import Task
from toolorchestra.serve.limits import RETRY_AFTER_S, MemoryReleaser, ServeLimits
from toolorchestra.serve.protocol import Answer, ApiError, ChatRequest
from toolorchestra.serve.trajectories import TrajectoryLog
from toolorchestra.tools.base import Tool

if TYPE_CHECKING:
    from toolorchestra.bench.policies import ReaderPolicy

ORCHESTRATOR_PREFIX = "orchestrator:"
"""Served name of an orchestrator: `orchestrator:MODEL`, as `eval --policy orchestrator:MODEL` names it.
The prefix keeps the episode apart from the raw orchestrator model, which is served under its own name."""

DEFAULT_MAX_CONCURRENCY = 64
DEFAULT_MAX_TURNS = 6  # as `toolorchestra run`
DEFAULT_MAX_TOKENS = 512  # Backend.complete's default, used when the client sets no limit
TRAJECTORY_HEADER = "x-toolorchestra-trajectory-id"

log = logging.getLogger(__name__)


class ContextOverflow(RuntimeError):
    """A prompt longer than the model can take (within an episode, where no client field is to blame)."""


# Bytes of chat template and tool instructions a prompt may add to its messages' JSON. A byte-level BPE
# token covers at least one byte, so a prompt whose bytes plus this fit the limits needs no tokenizing.
TEMPLATE_BYTES = 4096


class BoundedBackend(Backend):
    """A backend whose calls each hold a slot of a shared semaphore, and whose prompts and `max_tokens`
    are held to the model's context when the backend can count tokens (the local backend)."""

    def __init__(
        self, inner: Backend, slots: asyncio.Semaphore, limits: ServeLimits | None = None, model: str | None = None
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = model or inner.name  # the pool's name for it, as clients know it
        self._slots = slots
        self.limits = limits or ServeLimits()

    @property
    def counts_tokens(self) -> bool:
        return callable(getattr(self.inner, "prompt_tokens", None))

    async def complete(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, **sampling: Any
    ) -> Completion:
        # Within an episode nothing a client sent is to blame: max_tokens is clamped to the room left,
        # and a prompt with no room at all fails the call.
        sampling = await self.fit(messages, tools, sampling, strict=False)
        return await self.complete_fitted(messages, tools, **sampling)

    async def complete_fitted(
        self, messages: list[Message], tools: list[dict[str, Any]] | None = None, **sampling: Any
    ) -> Completion:
        """`complete` for a call `fit` already checked."""
        async with self._slots:
            return await self.inner.complete(messages, tools, **sampling)

    async def fit(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        sampling: dict[str, Any],
        *,
        strict: bool,
        max_tokens_param: str = "max_tokens",
    ) -> dict[str, Any]:
        """`sampling` with max_tokens within the model's context. `strict` (a client's own request): a prompt
        over the limit, or a max_tokens the context cannot hold, is ApiError 400, as OpenAI answers; otherwise
        max_tokens is clamped and only a prompt with no room left fails (ContextOverflow)."""
        if not self.counts_tokens:
            return sampling
        context = await asyncio.to_thread(lambda: int(self.inner.context_length))  # type: ignore[attr-defined]
        prompt_limit = min(self.limits.max_prompt_tokens, context - 1)
        requested = sampling.get("max_tokens")
        if strict and requested is not None and requested >= context:
            raise ApiError(
                400,
                f"{max_tokens_param} is {requested}, but this model's context is {context} tokens, "
                f"prompt and completion together; ask for fewer than {context} minus the prompt",
                param=max_tokens_param,
                code="context_length_exceeded",
            )
        wanted = requested or DEFAULT_MAX_TOKENS
        upper = len(json.dumps([messages, tools], ensure_ascii=False).encode()) + TEMPLATE_BYTES
        if upper <= prompt_limit and upper + wanted <= context:
            return sampling  # cannot overflow, however it tokenizes
        prompt = await asyncio.to_thread(self.inner.prompt_tokens, messages, tools)  # type: ignore[attr-defined]
        if prompt > prompt_limit:
            message = (
                f"the prompt is {prompt} tokens; this server accepts at most {prompt_limit} for model "
                f"{self.model!r} (context {context} tokens, --max-prompt-tokens {self.limits.max_prompt_tokens})"
            )
            if strict:
                raise ApiError(400, message, param="messages", code="context_length_exceeded")
            raise ContextOverflow(message)
        room = context - prompt
        if wanted <= room:
            return sampling
        if strict and requested is not None:
            raise ApiError(
                400,
                f"{max_tokens_param} is {requested}, but the prompt takes {prompt} of this model's "
                f"{context} tokens of context; at most {room} are left for the completion",
                param=max_tokens_param,
                code="context_length_exceeded",
            )
        return {**sampling, "max_tokens": room}


class BoundedPool(ModelPool):
    """`pool` with every backend wrapped in a `BoundedBackend` on first use (backends stay lazily built)."""

    def __init__(self, pool: ModelPool, slots: asyncio.Semaphore, limits: ServeLimits | None = None) -> None:
        super().__init__([pool.spec(name) for name in pool.names()])
        self._inner = pool
        self._slots = slots
        self.limits = limits or ServeLimits()

    def backend(self, name: str) -> BoundedBackend:
        if name not in self._backends:
            self._backends[name] = BoundedBackend(self._inner.backend(name), self._slots, self.limits, name)
        backend = self._backends[name]
        assert isinstance(backend, BoundedBackend)
        return backend

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
            backend,
            self.tools,
            model_name=self.model_name,
            price=pool.spec(self.model_name).price,
            preference=self.preference,
            max_turns=self.max_turns,
            max_budget_usd=self.max_budget_usd,
            max_tokens=sampling.get("max_tokens", 512),
            temperature=sampling.get("temperature", 0.0),
        )
        trajectory = await orchestrator.run(episode_task(request))
        return episode_answer(self.served_name, trajectory, record)


@dataclass
class ReaderModel:
    """The reader (`--policy reader`, agent/reader.py) served as a model: each request's last user message is
    answered by the label whose price and profile give the highest expected reward, whatever its name."""

    reader: ReaderPolicy
    tools: list[Tool]

    @property
    def served_name(self) -> str:
        return ORCHESTRATOR_PREFIX + self.reader.name

    async def answer(self, pool: ModelPool, request: ChatRequest, record: Callable[[Trajectory], None]) -> Answer:
        """Run one episode and `record` its trajectory, failed or not; ApiError 502 if it failed."""
        return episode_answer(self.served_name, await self.reader.run(episode_task(request), self.tools), record)


def episode_task(request: ChatRequest) -> Task:
    # The trajectory id is the task id, so a logged trajectory and the response header match.
    return Task(id=f"traj-{uuid.uuid4().hex}", split="serve", prompt=request.last_user_text())


def episode_answer(served_name: str, trajectory: Trajectory, record: Callable[[Trajectory], None]) -> Answer:
    """An episode's answer as a completion of `served_name`, once `record` has its trajectory; ApiError 502 if
    it ended in an error."""
    trajectory.policy = served_name
    record(trajectory)
    if trajectory.stop_reason == "error":
        failure = next((step.error for step in reversed(trajectory.steps) if step.error), "unknown error")
        raise ApiError(
            502,
            f"{served_name}: {_PATH.sub('<path>', failure)[:300]}",
            type="server_error",
            code="backend_error",
            headers={TRAJECTORY_HEADER: trajectory.task_id},
        )
    completion = Completion(
        text=trajectory.final_answer or "",
        model=served_name,
        latency_s=trajectory.latency_s,
        usage=Usage(prompt_tokens=trajectory.prompt_tokens, completion_tokens=trajectory.completion_tokens),
    )
    # An episode cut off by its turn or dollar cap ran out of room, as a completion cut at max_tokens.
    finish: Literal["stop", "length"] = "stop" if trajectory.stop_reason == "answer" else "length"
    return Answer(completion, trajectory.cost_usd, finish, trajectory)


class ServedModels:
    """The pool's models and orchestrators by served name, with the one semaphore they all share."""

    def __init__(
        self,
        pool: ModelPool,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        episodes: TrajectoryLog | None = None,
        limits: ServeLimits | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1; got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self.limits = limits or ServeLimits()
        self.slots = asyncio.Semaphore(max_concurrency)
        self.pool: BoundedPool = BoundedPool(pool, self.slots, self.limits)
        self.orchestrators: dict[str, OrchestratorModel | ReaderModel] = {}
        self.episodes = episodes or TrajectoryLog()
        self.in_flight = 0  # requests admitted and not yet answered
        self.rejected = 0  # requests answered 429
        self._releaser = MemoryReleaser()
        self._heavy = False  # whether a request since the last release may have left freed heap behind

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        episodes: TrajectoryLog | None = None,
        prefer: str | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_budget_usd: float | None = None,
        limits: ServeLimits | None = None,
        reader: ReaderPolicy | None = None,
    ) -> ServedModels:
        """Every model of `catalog` plus its orchestrator over the catalog's tools, as `run` builds them, and
        with `reader` (`--policy reader`) the reader too, checked now: every answer label has a profile."""
        from toolorchestra.tools.factory import build_tools

        served = cls(ModelPool(catalog.models), max_concurrency, episodes, limits)
        tools = build_tools(catalog.tools, served.pool)  # over the bounded pool: tool calls take slots too
        local_tools = [spec.name for spec in catalog.tools if spec.type in ("python", "search")]
        served.add_orchestrator(
            OrchestratorModel(
                catalog.orchestrator, tools, Preference.parse(prefer, local_tools), max_turns, max_budget_usd
            )
        )
        if reader is not None:
            reader.check_pool(tools)
            served.add_orchestrator(ReaderModel(reader, tools))
        return served

    def add_orchestrator(self, orchestrator: OrchestratorModel | ReaderModel) -> None:
        if isinstance(orchestrator, OrchestratorModel) and orchestrator.model_name not in self.pool.names():
            raise ValueError(f"orchestrator model {orchestrator.model_name!r} is not in the pool")
        self.orchestrators[orchestrator.served_name] = orchestrator

    def names(self) -> list[str]:
        return self.pool.names() + list(self.orchestrators)

    def check_known(self, name: str) -> None:
        if name not in self.orchestrators and name not in self.pool.names():
            raise ApiError(
                404,
                f"The model `{name}` does not exist; GET /v1/models lists the served models",
                param="model",
                code="model_not_found",
            )

    @contextmanager
    def admitted(self, heavy: bool = False) -> Iterator[None]:
        """One request's place among those in flight; ApiError 429 (with Retry-After) when the slots and
        the queue behind them are full. When the last request in flight ends, freed memory is handed back."""
        if self.in_flight >= self.max_concurrency + self.limits.max_queued:
            self.rejected += 1
            raise ApiError(
                429,
                f"the server is at capacity ({self.in_flight} requests in flight: "
                f"--max-concurrency {self.max_concurrency} plus --max-queued "
                f"{self.limits.max_queued}); retry after {RETRY_AFTER_S} s",
                type="rate_limit_error",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.in_flight += 1
        self._heavy = self._heavy or heavy
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0 and self._heavy and self._releaser.due():
                self._heavy = False
                self._releaser.release()

    async def answer(self, request: ChatRequest) -> Answer:
        """The requested model's answer; ApiError 404 for an unknown model, 400 for a prompt or max_tokens
        the model's context cannot hold, 502 when its backend fails."""
        self.check_known(request.model)
        orchestrator = self.orchestrators.get(request.model)
        if orchestrator is not None:
            if isinstance(orchestrator, OrchestratorModel):
                # The task alone must fit the orchestrator's prompt limit; what the episode adds is clamped.
                task = [{"role": "user", "content": request.last_user_text()}]
                backend = self._backend(orchestrator.model_name, request.model)
                self._heavy = self._heavy or backend.counts_tokens
                await backend.fit(task, None, {}, strict=True)
            return await orchestrator.answer(self.pool, request, self.episodes.add)
        return await self._pass_through(request)

    def _backend(self, name: str, served_name: str) -> BoundedBackend:
        try:
            return self.pool.backend(name)
        except Exception as exc:  # e.g. a remote model whose API key is not set
            raise _backend_failure(served_name, exc) from exc

    async def _pass_through(self, request: ChatRequest) -> Answer:
        messages, tools, sampling = request.backend_messages(), request.offered_tools(), request.sampling()
        backend = self._backend(request.model, request.model)
        if backend.counts_tokens:
            self._heavy = True
        sampling = await backend.fit(
            messages, tools, sampling, strict=True, max_tokens_param=request.max_tokens_field()
        )
        try:
            completion = await backend.complete_fitted(messages, tools, **sampling)
        except SchemaError as exc:  # a tool definition the serve-side check let through
            raise ApiError(400, exc.message, param=exc.where) from None
        except Exception as exc:  # any other backend failure is the upstream's fault, reported as a 502
            raise _backend_failure(request.model, exc) from exc
        completion.model = completion.model or request.model
        cost = self.pool.cost(request.model, completion)
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
    # The backend's own words help a client (an upstream's 401, a connection refused), but only their first
    # line, and never a file path of this machine (xgrammar's messages name its C++ sources).
    log.warning("model %r failed", model, exc_info=exc)
    return ApiError(
        502,
        f"model {model!r} failed: {exc.__class__.__name__}: {public_reason(exc)}",
        type="server_error",
        code="backend_error",
    )


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.+@-]+){2,}(?::\d+)*")


def public_reason(exc: BaseException) -> str:
    """The first line of `exc`'s message, file paths replaced by `<path>`, at most 300 characters."""
    line = next((line.strip() for line in str(exc).splitlines() if line.strip()), "no reason given")
    return _PATH.sub("<path>", line)[:300]
