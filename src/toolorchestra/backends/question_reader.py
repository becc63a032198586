"""The local model reading questions: P(task type | question) for the reader policy (agent/reader.py).

A question is embedded as the mean of the model's last hidden state over its tokens; its type is the vote of
its nearest calibration questions (a train split's questions, each with its type), by cosine. Read this way a
135M model tells RouterBench's multiple-choice science, Python and fill-in-the-blank questions apart for 99 of
100 test questions, with no training (docs/results.md, "Generalization: the reader").
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

NEIGHBOURS = 10  # calibration questions that vote on a question's task type
MAX_QUESTION_TOKENS = 256  # what the reader embeds of a question: its start says what kind of task it is


class QuestionReader:
    """P(task type | question) from the orchestrator model: the share of the question's `NEIGHBOURS` nearest
    calibration questions (cosine of the model's mean last hidden state) that are of each type."""

    def __init__(self, model: str = "smollm2-135m", keep_questions: bool = True) -> None:
        """`keep_questions`: keep the vectors of the questions read (not only the calibration questions') in the
        on-disk cache; a server reading its users' questions keeps none of them."""
        self.model_name = model
        self.keep_questions = keep_questions
        self._loaded: tuple[Any, Any] | None = None
        self._calibration: torch.Tensor | None = None
        self._types: list[str] = []
        # The vectors on disk, kept in memory: read again only when another process has rewritten the file (its
        # size and modification time), so that a served question does not pay a read of every stored vector.
        self._kept: dict[str, torch.Tensor] | None = None
        self._kept_stamp: tuple[int, int] | None = None
        self._path: Path | None = None

    def calibrate(self, questions: Sequence[str], types: Sequence[str]) -> None:
        """Embed the calibration questions, each with its task type (a train split's questions)."""
        if len(questions) != len(types) or not questions:
            raise ValueError(f"calibrate: {len(questions)} questions and {len(types)} types; need as many, >0")
        self._calibration = self.embed(questions)
        self._types = list(types)

    def posteriors(self, questions: Sequence[str]) -> list[dict[str, float]]:
        """P(type | question) for each question."""
        if self._calibration is None:
            raise ValueError("QuestionReader.posteriors before calibrate")
        similarity = self.embed(questions, keep=self.keep_questions) @ self._calibration.T
        nearest = similarity.topk(min(NEIGHBOURS, similarity.shape[1]), dim=1).indices.tolist()
        out = []
        for row in nearest:
            votes = Counter(self._types[index] for index in row)
            out.append({subset: count / len(row) for subset, count in votes.items()})
        return out

    def embed(self, questions: Sequence[str], batch_size: int = 8, keep: bool = True) -> torch.Tensor:
        """Unit vectors: the mean of the model's last hidden state over each question's tokens. Vectors are kept
        on disk per model (`_cache_path`), so a question is read once however many runs ask about it; with
        `keep` False the new ones are not written."""
        import torch

        keys = [hashlib.sha1(question.encode()).hexdigest() for question in questions]
        cache = self._stored()
        unread = {key: question for key, question in zip(keys, questions, strict=True) if key not in cache}
        fresh: dict[str, torch.Tensor] = {}
        if unread:
            fresh = dict(zip(unread, self._compute(list(unread.values()), batch_size), strict=True))
            if keep:  # (vectors not kept stay out of memory too: a server's users' questions do not pile up)
                if self._stamp() != self._kept_stamp:  # another process wrote meanwhile: keep its vectors too
                    cache = self._kept = {**self._read_cache(), **cache}
                cache.update(fresh)
                self._write_cache(cache)
                self._kept_stamp = self._stamp()
        return torch.stack([cache[key] if key in cache else fresh[key] for key in keys])

    def _stored(self) -> dict[str, torch.Tensor]:
        """The vectors on disk, from memory unless the file changed since they were read."""
        stamp = self._stamp()
        if self._kept is None or stamp != self._kept_stamp:
            self._kept, self._kept_stamp = self._read_cache(), stamp
        return self._kept

    def _stamp(self) -> tuple[int, int] | None:
        try:
            status = self._cache_path().stat()
        except FileNotFoundError:
            return None
        return status.st_size, status.st_mtime_ns

    def _compute(self, questions: list[str], batch_size: int) -> torch.Tensor:
        import torch

        model, tokenizer = self._model()
        ids = tokenizer(questions, truncation=True, max_length=MAX_QUESTION_TOKENS)["input_ids"]
        order = sorted(range(len(ids)), key=lambda index: len(ids[index]))  # batches of like length pad little
        vectors = torch.empty(len(ids), model.config.hidden_size)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                batch = tokenizer.pad({"input_ids": [ids[row] for row in rows]}, return_tensors="pt")
                hidden = model.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
                vectors[rows] = torch.nn.functional.normalize(mean.float(), dim=-1)
        return vectors

    def _cache_path(self) -> Path:
        """One file per model: its resolved weights (path and modification times) and the reading rule; named
        once per reader (the weights do not change under a running process)."""
        if self._path is None:
            from toolorchestra.backends.local import resolve_model_dir
            from toolorchestra.cache import cache_dir

            model_dir = resolve_model_dir(self.model_name)
            stamps = sorted(f"{path.name}:{path.stat().st_mtime_ns}" for path in model_dir.glob("*.safetensors"))
            identity = f"{model_dir.resolve()}|{'|'.join(stamps)}|mean-last-hidden|{MAX_QUESTION_TOKENS}"
            name = f"{Path(self.model_name).name}-{hashlib.sha1(identity.encode()).hexdigest()[:16]}.pt"
            self._path = cache_dir() / "question-embeddings" / name
        return self._path

    def _read_cache(self) -> dict[str, torch.Tensor]:
        import torch

        path = self._cache_path()
        if not path.is_file():
            return {}
        try:
            stored = torch.load(path, weights_only=True)
            return dict(zip(stored["keys"], stored["vectors"], strict=True))
        except Exception:  # a torn or foreign file: read the questions again, and overwrite it
            return {}

    def _write_cache(self, cache: dict[str, torch.Tensor]) -> None:
        import torch

        path = self._cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save({"keys": list(cache), "vectors": torch.stack(list(cache.values()))}, staging)
        os.replace(staging, path)  # concurrent runs: the last writer wins, and nothing is read half-written

    def _model(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from toolorchestra.backends.local import load_hf_model

            model, tokenizer = load_hf_model(self.model_name)
            tokenizer.padding_side = "right"  # a causal model: pads after a question leave its states as they are
            self._loaded = (model, tokenizer)
        return self._loaded
