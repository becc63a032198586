"""The orchestrator as a tau2-bench agent.

`OrchestratorAgent` is a tau2 `LocalAgent`: tau2's own `Orchestrator` hands it each user message or tool result
and takes back one `AssistantMessage` — a message to the user or domain tool calls. To produce it, our
orchestrator model (a pool model, through its `Backend`) sees a system prompt with the domain policy, the
price/latency table of the expert labels and the user's preference (if one was given), then the conversation
so far. Its tools are the domain's tools (tau2's JSON schemas) plus `call_expert(expert)`, the paper's
`expert-1..3` labels mapped to pool models. A `call_expert` call runs here: the expert model sees the policy,
the conversation and the domain tools and proposes the next step (a tool call or a message), and its proposal
comes back to the orchestrator as the call's result. The orchestrator goes on until it makes a domain tool
call or speaks to the user, at most `max_turns` model calls per agent message.

A model that cannot write plain text while tools are offered (a local model with schema-guided tool calls,
which always ends its turn in a call) is also offered `respond_to_user(message)`; a call to it is the message to
the user. Plain text without a call is a message to the user for any model.

Every orchestrator and expert call is recorded as a `Step` (tokens, dollars at the pool's price, seconds),
and each returned message carries its share in tau2's own `cost` and `usage` fields, so tau2's
`SimulationRun.agent_cost` is the orchestrator's plus the experts' dollars.

Importing this module imports tau2 (through `runtime.require_tau2`, offline and quiet).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from toolorchestra.agent.engine import run_calls, tool_message, tool_step
from toolorchestra.agent.preference import Preference
from toolorchestra.agent.prompt import price_table, wording_for
from toolorchestra.agent.trajectory import Step
from toolorchestra.backends.base import Completion, Message, ToolCall
from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import ModelSpec
from toolorchestra.envs.base import Task
from toolorchestra.errors import UserError
from toolorchestra.integrations.tau2.runtime import require_tau2
from toolorchestra.tools.base import ToolContext, ToolResult
from toolorchestra.tools.llm import LLMTool, answered

require_tau2()

from tau2.agent.base import LocalAgent, ValidAgentInputMessage  # noqa: E402
from tau2.data_model.message import AssistantMessage, MultiToolMessage, SystemMessage, ToolMessage, UserMessage  # noqa: E402
from tau2.data_model.message import ToolCall as Tau2ToolCall  # noqa: E402
from tau2.environment.tool import Tool as Tau2Tool  # noqa: E402
from tau2.registry import registry  # noqa: E402

AGENT_NAME = "toolorchestra_orchestrator"
"""The agent's name in tau2's registry and in a results file's `info.agent_info.implementation`."""

CALL_EXPERT = "call_expert"
RESPOND = "respond_to_user"

ROLE = (
    "You are an orchestrator serving as a customer service agent. Follow the policy below. Each turn, do "
    "exactly one of: call a domain tool to look up or change records, send the user a message, or consult an "
    f"expert with {CALL_EXPERT}. An expert is another model: it reads the conversation and proposes the next "
    "step, and its proposal comes back to you as the tool result; you decide what to do with it. Experts differ "
    "in price and skill (table below)."
)
RESPOND_HINT = f"To send the user a message, call {RESPOND}."
EXPERT_ROLE = (
    "You are an expert customer service agent advising a colleague. Follow the policy below. Propose the single "
    "next step of the conversation: one tool call, or one message to the user."
)
NOTHING_USABLE = f"No usable action found. Call a domain tool, call {CALL_EXPERT}, or send the user a message."
FALLBACK_MESSAGE = "Sorry, I could not work out the next step. Could you please repeat your request?"
"""Sent to the user when the orchestrator used all its model calls for one message without deciding."""

NO_TASK = Task(id="tau2", prompt="")  # a ToolContext needs a task; an expert reads only the conversation

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, T]], T]


# ---- message conversion -------------------------------------------------------------------------------


def openai_messages(message: Any) -> list[Message]:
    """One tau2 message (a MultiToolMessage counts as its parts) as OpenAI-style dict messages."""
    if isinstance(message, MultiToolMessage):
        return [converted for part in message.tool_messages for converted in openai_messages(part)]
    if isinstance(message, ToolMessage):
        return [{"role": "tool", "tool_call_id": message.id, "content": message.content or ""}]
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": message.content or ""}]
    if isinstance(message, (AssistantMessage, UserMessage)):
        converted: Message = {"role": message.role, "content": message.content or ""}
        if message.tool_calls:
            converted["tool_calls"] = [
                ToolCall(id=call.id, name=call.name, arguments=call.arguments).to_openai()
                for call in message.tool_calls
            ]
        return [converted]
    raise TypeError(f"not a tau2 message: {type(message).__name__}")


def tau2_tool_calls(calls: list[ToolCall]) -> list[Tau2ToolCall]:
    return [Tau2ToolCall(id=call.id, name=call.name, arguments=call.arguments, requestor="assistant") for call in calls]


def writes_text_with_tools(spec: ModelSpec) -> bool:
    """Whether the model can answer in plain text while tools are offered. A local model with guided tool
    calls cannot: its grammar ends every turn in a call."""
    from toolorchestra.backends.adapters import guided_tool_calls

    backend = spec.backend
    return not (backend.type == "local" and guided_tool_calls(backend.path, backend.guided_tool_calls))


def respond_schema() -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": RESPOND,
            "description": "Send a message to the user (the customer): ask for details, confirm, or answer.",
            "parameters": {
                "type": "object",
                "properties": {
                    "message": {
                        "type": "string",
                        "minLength": 1,
                        "description": "the message, as the user will read it",
                    }
                },
                "required": ["message"],
            },
        },
    }


# ---- the experts ---------------------------------------------------------------------------------------


class CallExpertTool(LLMTool):
    """`call_expert(expert)`: the expert model behind the label proposes the next step of the conversation.

    `run` takes the conversation (as the user and the environment saw it) in `context.messages`; the result's
    output is the proposal in words, which the orchestrator reads as the tool result."""

    def __init__(
        self,
        labels: dict[str, str],
        pool: ModelPool,
        domain_policy: str,
        domain_tools: list[dict[str, Any]],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
    ) -> None:
        super().__init__(
            CALL_EXPERT,
            "Ask an expert model to propose the next step (a tool call or a message to "
            "the user); its proposal comes back as the result.",
            labels,
            pool,
            max_tokens,
        )
        self.parameters = {
            "type": "object",
            "properties": {
                "expert": {"type": "string", "enum": list(labels), "description": "which expert (see the price table)"}
            },
            "required": ["expert"],
        }
        self.system = f"{EXPERT_ROLE}\n\n<policy>\n{domain_policy}\n</policy>"
        self.domain_tools = domain_tools
        self.temperature = temperature

    def tools_for(self, model: str) -> list[dict[str, Any]]:
        tools = list(self.domain_tools)
        if not writes_text_with_tools(self.pool.spec(model)):
            tools.append(respond_schema())
        return tools

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        label = arguments.get("expert")
        if label not in self.labels:
            return ToolResult(error=f"argument 'expert' must be one of {list(self.labels)}; got {label!r}")
        model = self.labels[label]
        messages = [{"role": "system", "content": self.system}, *context.messages]
        try:
            completion, cost = await self.pool.complete(
                model, messages, self.tools_for(model), max_tokens=self.max_tokens, temperature=self.temperature
            )
        except Exception as exc:  # a failed expert is an observation for the orchestrator, not a crash
            return ToolResult(error=f"expert {label} ({model}) failed: {exc}", model=model, label=label)
        return answered(completion, cost, model, label, proposal_text(completion))


def proposal_text(completion: Completion) -> str:
    """An expert's turn, told to the orchestrator: the tool calls or the message it proposes."""
    lines = []
    for call in completion.tool_calls:
        if call.name == RESPOND:
            lines.append(f"Proposed message to the user: {call.arguments.get('message', '')}")
        else:
            lines.append(f"Proposed tool call: {call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
    if not completion.tool_calls and completion.text.strip():
        lines.append(f"Proposed message to the user: {completion.text.strip()}")
    if not lines:
        problems = "; ".join(completion.call_errors) or "an empty reply"
        lines.append(f"The expert proposed nothing usable ({problems}).")
    return "\n".join(lines)


# ---- the agent -----------------------------------------------------------------------------------------


@dataclass
class AgentSettings:
    """How the orchestrator runs inside tau2: its model, its experts, its caps, and the user's preference."""

    model: str
    experts: dict[str, str]
    preference: Preference | None = None
    max_turns: int = 4
    max_tokens: int = 256
    temperature: float = 0.0


@dataclass
class OrchestratorAgentState:
    """`conversation`: what the user and the environment saw, from the agent's side (experts read it).
    `context`: the orchestrator's own view, the conversation with its expert consultations in between."""

    conversation: list[Message] = field(default_factory=list)
    context: list[Message] = field(default_factory=list)


@dataclass
class Decision:
    """The orchestrator's answer to one tau2 message: the message for tau2, and what it cost."""

    message: AssistantMessage
    steps: list[Step]
    latency_s: float


class OrchestratorAgent(LocalAgent[OrchestratorAgentState]):
    """tau2 agent whose every message is decided by our orchestrator model (see the module docstring).

    `steps` collects every orchestrator turn, expert consultation and domain tool call of the simulation, in
    order; `latency_s` their wall time (per orchestrator turn, its own time plus the slowest expert)."""

    def __init__(
        self,
        tools: list[Tau2Tool],
        domain_policy: str,
        *,
        pool: ModelPool,
        settings: AgentSettings,
        task_id: str = "",
        runner: Runner | None = None,
    ) -> None:
        super().__init__(tools=tools, domain_policy=domain_policy)
        self.pool = pool
        self.settings = settings
        self.run_coroutine: Runner = runner or asyncio.run
        self.domain_tools = [tool.openai_schema for tool in tools]
        self._check_names()
        self.expert = CallExpertTool(
            settings.experts,
            pool,
            domain_policy,
            self.domain_tools,
            max_tokens=settings.max_tokens,
            temperature=settings.temperature,
        )
        self.offers_respond = not writes_text_with_tools(pool.spec(settings.model))
        # Its own tools first, then the domain's (in tau2's order).
        self.offered = [self.expert.schema(), *([respond_schema()] if self.offers_respond else []), *self.domain_tools]
        self.system = self._system_prompt(task_id)
        self.steps: list[Step] = []
        self.latency_s = 0.0
        self.seed: int | None = None
        self._turns = 0  # orchestrator model calls so far in this simulation
        self._used_call_ids: set[str] = set()
        self._awaiting: dict[str, Step] = {}  # domain tool call id -> its step, until the environment answers

    def _check_names(self) -> None:
        clash = {CALL_EXPERT, RESPOND} & {tool["function"]["name"] for tool in self.domain_tools}
        if clash:
            raise UserError(
                f"the domain has a tool named {', '.join(sorted(clash))}, which the orchestrator agent "
                "uses for its own calls"
            )

    def _system_prompt(self, task_id: str) -> str:
        parts = [ROLE]
        if self.offers_respond:
            parts.append(RESPOND_HINT)
        parts.append(f"Prices and latency:\n{price_table([self.expert])}")
        parts.append(f"<policy>\n{self.domain_policy}\n</policy>")
        if self.settings.preference is not None:
            parts.append(f"Preference: {self.settings.preference.describe(wording_for(task_id))}")
        return "\n\n".join(parts)

    # -- tau2's agent interface ------------------------------------------------------------------------

    def get_init_state(self, message_history: list[Any] | None = None) -> OrchestratorAgentState:
        history = [converted for message in message_history or [] for converted in openai_messages(message)]
        for message in message_history or []:
            self._used_call_ids.update(call.id for call in getattr(message, "tool_calls", None) or [])
        return OrchestratorAgentState(conversation=list(history), context=list(history))

    def generate_next_message(
        self, message: ValidAgentInputMessage, state: OrchestratorAgentState
    ) -> tuple[AssistantMessage, OrchestratorAgentState]:
        incoming = openai_messages(message)
        self._note_tool_results(message)
        state.conversation.extend(incoming)
        state.context.extend(incoming)
        decision = self.run_coroutine(self.decide(state))
        self.steps.extend(decision.steps)
        self.latency_s += decision.latency_s
        visible = openai_messages(decision.message)
        state.conversation.extend(visible)
        state.context.extend(visible)
        return decision.message, state

    def set_seed(self, seed: int) -> None:
        self.seed = seed  # passed to sampled calls only; greedy decoding has no randomness to seed

    # -- one decision ------------------------------------------------------------------------------------

    async def decide(self, state: OrchestratorAgentState) -> Decision:
        """Orchestrator turns until a domain tool call or a message to the user, at most `max_turns`."""
        steps: list[Step] = []
        latency = 0.0
        for _ in range(self.settings.max_turns):
            completion, cost = await self._orchestrator_turn(state)
            steps.append(self._turn_step(completion, cost))
            latency += completion.latency_s
            # Precedence within one turn: domain calls act, then a message to the user, then expert advice.
            domain_calls = [call for call in completion.tool_calls if call.name in self._domain_names()]
            if domain_calls:
                return Decision(self._tool_call_message(domain_calls, steps), steps, latency)
            text = _message_for_user(completion)
            if text:
                return Decision(self._text_message(text, steps), steps, latency)
            expert_calls = [call for call in completion.tool_calls if call.name == CALL_EXPERT]
            if expert_calls:
                latency += await self._consult(expert_calls, state, steps)
                continue
            state.context.append(completion.assistant_message())
            state.context.append({"role": "user", "content": self._nothing_usable(completion)})
        return Decision(self._text_message(FALLBACK_MESSAGE, steps), steps, latency)

    async def _orchestrator_turn(self, state: OrchestratorAgentState) -> tuple[Completion, float]:
        sampling: dict[str, Any] = {"max_tokens": self.settings.max_tokens, "temperature": self.settings.temperature}
        if self.seed is not None and self.settings.temperature > 0:
            sampling["seed"] = self.seed
        messages = [{"role": "system", "content": self.system}, *state.context]
        return await self.pool.complete(self.settings.model, messages, self.offered, **sampling)

    async def _consult(self, calls: list[ToolCall], state: OrchestratorAgentState, steps: list[Step]) -> float:
        """Run the turn's expert calls concurrently; their proposals become tool results in the context.
        Returns the turn's expert wall time (the slowest call)."""
        calls = [self._unique_id(call) for call in calls]
        results = await run_calls({CALL_EXPERT: self.expert}, calls, NO_TASK, state.conversation)
        state.context.append({"role": "assistant", "content": "", "tool_calls": [call.to_openai() for call in calls]})
        turn = steps[-1].turn
        for call, result in zip(calls, results, strict=True):
            state.context.append(tool_message(call, result))
            steps.append(tool_step(turn, call, result))
        return max(result.latency_s for result in results)

    def _nothing_usable(self, completion: Completion) -> str:
        problems = list(completion.call_errors)
        unknown = [call.name for call in completion.tool_calls if call.name not in self._known_names()]
        if unknown:
            problems.append(f"unknown tool(s) {', '.join(unknown)}")
        return "\n".join([*problems, NOTHING_USABLE])

    # -- building the answer -----------------------------------------------------------------------------

    def _domain_names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.domain_tools}

    def _known_names(self) -> set[str]:
        return self._domain_names() | {CALL_EXPERT, RESPOND}

    def _turn_step(self, completion: Completion, cost: float) -> Step:
        usage = completion.usage
        self._turns += 1
        return Step.model_construct(
            turn=self._turns - 1,
            kind="orchestrator",
            name=self.settings.model,
            model=self.settings.model,
            output=completion.text,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=cost,
            latency_s=completion.latency_s,
            error="; ".join(completion.call_errors) or None,
        )

    def _tool_call_message(self, calls: list[ToolCall], steps: list[Step]) -> AssistantMessage:
        calls = [self._unique_id(call) for call in calls]
        for call in calls:
            step = Step.model_construct(turn=steps[-1].turn, kind="tool", name=call.name, arguments=call.arguments)
            self._awaiting[call.id] = step
            steps.append(step)
        return AssistantMessage(role="assistant", content=None, tool_calls=tau2_tool_calls(calls), **_accounting(steps))

    def _text_message(self, text: str, steps: list[Step]) -> AssistantMessage:
        return AssistantMessage(role="assistant", content=text, **_accounting(steps))

    def _unique_id(self, call: ToolCall) -> ToolCall:
        """The call with an id not used before in this simulation (tau2 pairs results with calls by id)."""
        call_id, suffix = call.id or "call", 1
        while call_id in self._used_call_ids:
            call_id, suffix = f"{call.id or 'call'}_{suffix}", suffix + 1
        self._used_call_ids.add(call_id)
        return call if call_id == call.id else call.model_copy(update={"id": call_id})

    def _note_tool_results(self, message: Any) -> None:
        """Copy the environment's answers into the domain tool steps that asked for them (for the trajectory)."""
        answers = message.tool_messages if isinstance(message, MultiToolMessage) else [message]
        for answer in answers:
            step = self._awaiting.pop(answer.id, None) if isinstance(answer, ToolMessage) else None
            if step is not None:
                step.output = answer.content or ""
                step.error = step.output if answer.error else None


def _message_for_user(completion: Completion) -> str:
    """The text the orchestrator sends to the user this turn, or "" when it sends none."""
    for call in completion.tool_calls:
        if call.name == RESPOND:
            text = call.arguments.get("message")
            return text.strip() if isinstance(text, str) else ""
    if not completion.tool_calls and not completion.call_errors:
        return completion.text.strip()
    return ""


def _accounting(steps: list[Step]) -> dict[str, Any]:
    """tau2's `cost` and `usage` of one agent message (orchestrator and experts together), with the split in
    `raw_data`."""
    orchestrator = [step for step in steps if step.kind == "orchestrator"]
    experts = [step for step in steps if step.name == CALL_EXPERT]

    def total(group: list[Step]) -> dict[str, Any]:
        return {
            "calls": len(group),
            "prompt_tokens": sum(step.prompt_tokens for step in group),
            "completion_tokens": sum(step.completion_tokens for step in group),
            "cost_usd": sum(step.cost_usd for step in group),
            "latency_s": sum(step.latency_s for step in group),
        }

    both = total(orchestrator + experts)
    return {
        "cost": both["cost_usd"],
        "usage": {"prompt_tokens": both["prompt_tokens"], "completion_tokens": both["completion_tokens"]},
        "raw_data": {"toolorchestra": {"orchestrator": total(orchestrator), "experts": total(experts)}},
    }


def register_agent() -> None:
    """Make the agent known to tau2's registry under AGENT_NAME (once per process)."""
    if AGENT_NAME not in registry.get_agents():
        registry.register_agent(OrchestratorAgent, AGENT_NAME)


register_agent()
