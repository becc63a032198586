"""User preferences: weights over accuracy, cost, latency and tool use, stated to the orchestrator.

The same weights are the preference vector P of the training reward (toolorchestra.reward).
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, Field

from toolorchestra.errors import UserError

# Wordings of the named preferences. Number 0 is the original phrasing; the trainer samples among all of
# them and evaluation picks one per task (agent/prompt.py), so a policy learns the meaning, not a phrase.
_ACCURACY_WORDINGS = (
    "The user wants the most accurate answer.",
    "Accuracy matters most here; the price does not.",
    "Give the answer that is most likely to be correct, whatever it costs.",
    "Priority: a correct answer. Money and waiting time are no concern.",
)
_COST_WORDINGS = (
    "The user wants a correct answer and asks you to keep the dollar cost low (important).",
    "Be frugal: a correct answer at the lowest price you can.",
    "Money matters: prefer cheap models that still get this right.",
    "Priority: low cost, while staying correct.",
)
_LATENCY_WORDINGS = (
    "The user wants a correct answer and asks you to keep the answer fast.",
    "Speed matters: a correct answer with the least waiting.",
    "Answer quickly: prefer fast models that still get this right.",
    "Priority: low latency, while staying correct.",
)
_TOOL_WORDINGS = (
    "The user wants a correct answer and asks you to {verb} {name}.",
    "Please {verb} {name} for this task.",
    "The user asks: {verb} {name} where you can, and stay correct.",
    "Priority: {verb} {name}, while staying correct.",
)
WORDINGS = len(_ACCURACY_WORDINGS)

_NAMED = {
    "accuracy": {"accuracy": 1.0},
    "cost": {"accuracy": 1.0, "cost": 1.0},
    "latency": {"accuracy": 1.0, "latency": 1.0},
}


class Preference(BaseModel):
    accuracy: float = 1.0
    cost: float = 0.0
    latency: float = 0.0
    tools: dict[str, float] = Field(default_factory=dict, description="tool or label -> weight; >0 prefer, <0 avoid")
    prefer_local: bool = False

    @classmethod
    def parse(cls, spec: str | None, local_tools: list[str] | None = None) -> Preference:
        """Read a --prefer value: `accuracy`, `cost`, `latency`, `local`, `tool:NAME`, or
        comma-separated `key=weight` pairs such as `accuracy=1,cost=0.5,tool:python=1`."""
        if not spec:
            return cls()
        weights: dict[str, float] = {"accuracy": 1.0}
        tools: dict[str, float] = {}
        prefer_local = False
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            key, _, value = part.partition("=")
            key = key.strip()
            try:
                weight = float(value) if value else 1.0
            except ValueError:
                raise UserError(f"--prefer {spec!r}: weight {value!r} of {key!r} is not a number") from None
            if key in _NAMED and not value:
                weights.update(_NAMED[key])
            elif key in ("accuracy", "cost", "latency"):
                weights[key] = weight
            elif key == "local":
                prefer_local = True
                for name in local_tools or []:
                    tools[name] = weight
            elif key.startswith("tool:") and len(key) > 5:
                tools[key[5:]] = weight
            else:
                raise UserError(
                    f"--prefer {spec!r}: unknown preference {key!r}; expected accuracy, cost, latency, local, "
                    "tool:NAME, or KEY=WEIGHT pairs"
                )
        return cls(tools=tools, prefer_local=prefer_local, **weights)

    def check_tools(self, offered: Collection[str]) -> None:
        """UserError naming a `tool:NAME` that no tool or label on offer is called: it would weigh nothing."""
        unknown = sorted(set(self.tools) - set(offered))
        if unknown:
            raise UserError(
                f"--prefer tool:{unknown[0]}: no tool or label of that name is offered; expected one of "
                f"{sorted(set(offered))}"
            )

    def weights(self) -> dict[str, float]:
        """The preference vector over reward features (see toolorchestra.reward.group_rewards)."""
        vector = {"accuracy": self.accuracy, "cost": self.cost, "latency": self.latency}
        vector.update({f"calls:{name}": weight for name, weight in self.tools.items()})
        return vector

    def describe(self, wording: int = 0) -> str:
        """The preference in words for the orchestrator's prompt; `wording` picks one of `WORDINGS`
        phrasings of the named preferences (accuracy, cost, latency, one tool); mixed weights get one
        generic sentence."""
        index = wording % WORDINGS
        if not self.prefer_local and self.accuracy > 0:
            if not self.tools and self.latency == 0 and self.cost == 0:
                return _ACCURACY_WORDINGS[index]
            if not self.tools and self.latency == 0 and self.cost >= self.accuracy:
                return _COST_WORDINGS[index]
            if not self.tools and self.cost == 0 and self.latency >= self.accuracy:
                return _LATENCY_WORDINGS[index]
            if len(self.tools) == 1 and self.cost == 0 and self.latency == 0:
                name, weight = next(iter(self.tools.items()))
                return _TOOL_WORDINGS[index].format(verb="use" if weight > 0 else "avoid", name=name)
        parts = []
        if self.cost > 0:
            parts.append("keep the dollar cost low" + (" (important)" if self.cost >= self.accuracy else ""))
        if self.latency > 0:
            parts.append("keep the answer fast")
        if self.prefer_local:
            parts.append("prefer local tools")
        for name, weight in self.tools.items():
            if not self.prefer_local:
                parts.append(f"{'use' if weight > 0 else 'avoid'} {name}")
        if not parts:
            return "The user wants the most accurate answer."
        return "The user wants a correct answer and asks you to " + ", ".join(parts) + "."
