"""User preferences: weights over accuracy, cost, latency and tool use, stated to the orchestrator.

The same weights are the preference vector P of the training reward (toolorchestra.reward).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from toolorchestra.errors import UserError

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
    def parse(cls, spec: str | None, local_tools: list[str] | None = None) -> "Preference":
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

    def weights(self) -> dict[str, float]:
        """The preference vector over reward features (see toolorchestra.reward.group_rewards)."""
        vector = {"accuracy": self.accuracy, "cost": self.cost, "latency": self.latency}
        vector.update({f"calls:{name}": weight for name, weight in self.tools.items()})
        return vector

    def describe(self) -> str:
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
