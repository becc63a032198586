"""The `toolscale:<domain>` and `toolscale:all` environments.

Episode state: `tools_for(task)` binds the domain's derived tools to a new `Database` each call, so
every episode (one tools_for per task run, as the eval loop and sampler do) has its own copy and
concurrent episodes never share state. `score` does not trust that live copy: it replays the
trajectory's tool calls on a fresh database, which keeps scoring deterministic (the Env contract) and
independent of how the episode was run. Reward basis (as tau2): the episode ends with a reply, the final database
digest equals the gold one, every required fact is in that reply, and no forbidden write succeeded.

The domain policy, with the environment's own rules, is in `task.meta["system_prompt"]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.envs.base import Env, Score, Task
from toolorchestra.envs.toolscale.actions import domain_specs
from toolorchestra.envs.toolscale.data import DOMAINS, Domain, load_domain
from toolorchestra.envs.toolscale.tasks import contains_fact, generate_tasks
from toolorchestra.envs.toolscale.tools import DomainTool
from toolorchestra.errors import UserError
from toolorchestra.tools.base import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

SPLITS = ("train", "test")
ENV_RULES = (
    "Rules of this environment: authenticate the user by their email first; act only on the "
    "authenticated user's own records and refuse requests about anyone else's; end with the answer "
    "tool, stating the facts the user asked for."
)


class FinalAnswerTool(Tool):
    """Ends the episode with the agent's reply to the user."""

    name = "answer"
    description = "Reply to the user and end the conversation."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        answer = arguments.get("answer") if isinstance(arguments, dict) else None
        if not isinstance(answer, str):
            return ToolResult(error="answer: invalid argument answer: a string is required")
        return ToolResult(output=answer, final=True, answer=answer)


class ToolScaleEnv(Env):
    domain_names: tuple[str, ...] = DOMAINS
    gold_actions = True  # tasks carry meta gold_actions and required_facts: the gold and noop policies apply

    def __init__(self, data_dir: Path | str, seed: int = 0) -> None:
        self.data_dir, self.seed = Path(data_dir), seed
        self.domains: dict[str, Domain] = {name: load_domain(self.data_dir, name) for name in self.domain_names}
        self.name = f"toolscale:{self.domain_names[0] if len(self.domain_names) == 1 else 'all'}"
        self._tasks: list[Task] | None = None

    def all_tasks(self) -> list[Task]:
        if self._tasks is None:
            self._tasks = []
            for domain in self.domains.values():
                system_prompt = f"{domain.policy}\n\n{ENV_RULES}"
                for task in generate_tasks(domain, self.seed):
                    task.meta["system_prompt"] = system_prompt
                    self._tasks.append(task)
        return self._tasks

    def tasks(self, split: str) -> list[Task]:
        if split not in SPLITS:
            raise UserError(f"--split {split!r}: valid splits are {', '.join(SPLITS)}")
        return [task for task in self.all_tasks() if task.split == split]

    def domain_tools(self, task: Task) -> list[DomainTool]:
        domain = self.domains[task.meta["domain"]]
        database = domain.new_database()
        return [spec.bind(database) for spec in domain_specs(domain)]

    def tools_for(self, task: Task) -> list[Tool]:
        return [*self.domain_tools(task), FinalAnswerTool()]

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        tools = {tool.name: tool for tool in self.domain_tools(task)}
        forbidden = {(rule["name"], rule["argument"], rule["value"]) for rule in task.meta["forbidden_actions"]}
        violations = []
        for step in trajectory.tool_steps:
            tool = tools.get(step.name)
            if tool is None:
                continue
            result = tool.call(step.arguments or {})
            if not result.error and any(
                isinstance(value, str) and (step.name, arg, value) in forbidden
                for arg, value in (step.arguments or {}).items()
            ):
                violations.append(step.name)
        database = next(iter(tools.values())).database
        db_match = database.digest() == task.meta["expected_hash"]
        answer = trajectory.final_answer or ""
        missing = [fact for fact in task.meta["required_facts"] if not contains_fact(answer, fact)]
        # The episode must end with a reply: without it an agent that never acts would pass every refusal.
        answered = trajectory.final_answer is not None
        correct = answered and db_match and not missing and not violations
        return Score(
            correct=correct,
            details={
                "subtask": task.subtask,
                "family": task.meta["family"],
                "answered": answered,
                "db_match": db_match,
                "missing_facts": missing,
                "forbidden_taken": violations,
            },
        )


def _domain_env(domain: str) -> type[ToolScaleEnv]:
    return type(
        f"ToolScale{domain.title()}Env", (ToolScaleEnv,), {"domain_names": (domain,), "__doc__": f"toolscale:{domain}"}
    )


DOMAIN_ENVS = {domain: _domain_env(domain) for domain in DOMAINS}
globals().update({cls.__name__: cls for cls in DOMAIN_ENVS.values()})
