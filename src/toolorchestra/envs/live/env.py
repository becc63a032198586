"""The live world over a question file and a catalog: tasks, the paper's tools over the catalog's pool, and
scoring by `LiveJudge` (match, then an LLM judge), with every bought answer recorded in the replay format."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.pool import ModelPool
from toolorchestra.catalog.schema import Catalog
from toolorchestra.envs.base import Env, Score, Task
from toolorchestra.envs.live.judge import LiveJudge
from toolorchestra.envs.live.questions import QuestionSet, read_frames, read_hle
from toolorchestra.envs.live.record import ReplayRecorder
from toolorchestra.errors import ConfigError, UserError
from toolorchestra.tools.base import Tool

if TYPE_CHECKING:
    from toolorchestra.agent.trajectory import Trajectory

PAPER_TOOLS = ("paper_search", "paper_reasoning", "paper_answer")
DEFAULT_HLE = Path("hle/hle_text_30.jsonl")
FRAMES_QUESTIONS = Path("frames/questions.jsonl")
CORPUS = Path("corpus/2wikimultihopqa_corpus.json")
PROTOCOL = "paper"  # the orchestrator's mode on these worlds unless --context says otherwise (agent/paper.py)


def embedded_catalog(data_dir: Path) -> Catalog:
    """The default pool of the live worlds, offline: the untrained SmolLM2 orchestrates (schema-guided calls),
    and the same SmolLM2 is the model behind search-1, reasoner-1 and answer-1 and the judge; BM25 over the
    shared Wikipedia passages. Budgets are small so that a question costs seconds on a CPU."""
    corpus = data_dir / CORPUS
    if not corpus.exists():
        raise UserError(f"{corpus}: search corpus not found (the shared data's corpus/; or give --config CATALOG)")
    model = "smollm2-135m"
    guided = {"label_enum": True}  # SmolLM2 writes valid labels only when the grammar lists them
    return Catalog.model_validate(
        {
            "orchestrator": model,
            "judge": model,
            "models": [
                {
                    "name": model,
                    "backend": {"type": "local", "path": model},
                    "latency": {"overhead_s": 0.05, "output_tokens_per_s": 25.0},
                    "description": "SmolLM2-135M-Instruct, in process on the CPU",
                }
            ],
            "tools": [
                {
                    "name": "search",
                    "type": "paper_search",
                    "models": {"search-1": model},
                    "options": {"corpus": str(corpus), "top_k": 3, "max_tokens": 24, "context_tokens": 1200, **guided},
                },
                {
                    "name": "enhance_reasoning",
                    "type": "paper_reasoning",
                    "models": {"reasoner-1": model},
                    "options": {"max_tokens": 96, "context_tokens": 1200, "timeout_s": 10, **guided},
                },
                {
                    "name": "answer",
                    "type": "paper_answer",
                    "models": {"answer-1": model},
                    "options": {"max_tokens": 48, "context_tokens": 1200, **guided},
                },
            ],
        }
    )


class LiveQAEnv(Env):
    """Questions answered through the paper's tools over `catalog`'s pool; `judge`: auto (the catalog's judge
    model), none (match only) or a model name; `record_dir`: where bought answers go (replay format)."""

    def __init__(
        self,
        name: str,
        questions: QuestionSet,
        catalog: Catalog,
        *,
        judge: str = "auto",
        record_dir: Path | None = None,
    ) -> None:
        self.name = name
        self.questions = questions
        self.catalog = catalog
        self.pool = ModelPool(catalog.models)
        specs = [tool for tool in catalog.tools if tool.type in PAPER_TOOLS]
        if not any(tool.type == "paper_answer" for tool in specs):
            raise ConfigError(
                f"{name} needs a catalog with the paper's tools (types {', '.join(PAPER_TOOLS)}), at least a "
                "paper_answer tool; see configs/pools/paper-hle.yaml"
            )
        from toolorchestra.tools.factory import build_tools

        self._tools = build_tools(specs, self.pool)
        self.judge = LiveJudge(self.pool, _judge_model(judge, catalog))
        self.recorder = ReplayRecorder(record_dir) if record_dir is not None else None

    def tasks(self, split: str) -> list[Task]:
        return [task for task in self.questions.tasks if task.split == split]

    def tools_for(self, task: Task) -> list[Tool]:
        return list(self._tools)

    def score(self, task: Task, trajectory: Trajectory) -> Score:
        """Match only (no model call): what `ascore` falls back to without a judge."""
        from toolorchestra.envs.live.judge import matched

        method = matched(task, trajectory.final_answer or "") if trajectory.final_answer else None
        return Score(correct=method is not None, details={"method": method or "no_match", "gold": task.gold})

    async def ascore(self, task: Task, trajectory: Trajectory) -> Score:
        verdict = await self.judge.grade(task, trajectory.final_answer)
        if self.recorder is not None:
            await self._record(task, trajectory, verdict.correct)
        details: dict[str, Any] = {
            "method": verdict.method,
            "judge": {**verdict.record(), "judged_by": self.judge.method},
            "gold": task.gold,
            "answer_type": task.meta.get("answer_type"),
        }
        if trajectory.final_answer is None:
            details["no_answer"] = True  # the answer tool never ran: counted as wrong, never a crash
        return Score(correct=verdict.correct, details=details)

    async def _record(self, task: Task, trajectory: Trajectory, final_correct: bool) -> None:
        assert self.recorder is not None
        for step in trajectory.tool_steps:
            attempt = step.meta.get("attempt")
            if not attempt or step.error:
                continue
            correct = (
                final_correct if attempt == trajectory.final_answer else (await self.judge.grade(task, attempt)).correct
            )
            self.recorder.record(task, step, correct)


def _judge_model(judge: str, catalog: Catalog) -> str | None:
    if judge == "none":
        return None
    if judge == "auto":
        return catalog.judge
    names = [model.name for model in catalog.models]
    if judge not in names:
        raise UserError(f"--judge {judge}: no such model in the pool; its models are {', '.join(names)} (or none)")
    return judge


def make_live_env(
    kind: str,
    data_dir: Path,
    *,
    file: str | None = None,
    catalog: Catalog | None = None,
    judge: str = "auto",
    record_dir: Path | None = None,
) -> LiveQAEnv:
    """`hle` (HLE-format file, default the shared 30 text questions) or `frames-live`."""
    if kind == "hle":
        questions = read_hle(Path(file) if file else data_dir / DEFAULT_HLE)
        name = f"hle:{file}" if file else "hle"
    else:
        questions = read_frames(data_dir / FRAMES_QUESTIONS)
        name = "frames-live"
    return LiveQAEnv(name, questions, catalog or embedded_catalog(data_dir), judge=judge, record_dir=record_dir)


__all__ = ["PROTOCOL", "LiveQAEnv", "embedded_catalog", "make_live_env"]
