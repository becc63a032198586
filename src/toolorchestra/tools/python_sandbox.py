"""The `python` tool: run orchestrator-written code in a sandboxed child process and report what it printed.

This module owns the tool side: argument checks, the asyncio subprocess, the wall-clock timeout (SIGKILL to
the whole process group), bounded capture of stdout/stderr, and turning how the run ended into a ToolResult
whose error names the limit that was hit. The isolation itself (namespaces, read-only filesystem, rlimits,
dedicated uid, the audit-hook fallback) lives in sandbox_launcher.py, a stdlib-only script run by the same
interpreter. docs/sandbox.md describes the layers and what they do not defend against.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import Tool, ToolContext, ToolResult
from toolorchestra.tools.sandbox_launcher import LAUNCHER_STUB

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
ISOLATION_MODES = ("auto", "namespaces", "fallback")
SETUP_FAILED_EXIT = 125
# Bytes kept from each end of a stream: enough for max_output_chars of 4-byte UTF-8 at either end.
BYTES_PER_CHAR = 4
# After the process is gone its pipes close at once; this only bounds a reader stuck on a leaked descriptor.
PIPE_GRACE_S = 2.0
# The launcher's own backstop (if this process dies mid-run) fires this long after the wall timeout.
WATCHDOG_GRACE_S = 5
# Room kept for the truncation markers and the stderr header, so truncated output stays within the limit.
MARKER_ROOM = 120
MIN_OUTPUT_CHARS = 200


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use. Validated on construction (ConfigError names the option)."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    max_file_mb: int = 64
    workspace_mb: int = 256
    max_procs: int = 32
    max_output_chars: int = 4000
    max_code_chars: int = 200_000

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s", "memory_mb", "max_file_mb", "workspace_mb", "max_procs",
                     "max_output_chars", "max_code_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"python tool option {name!r} must be a positive number; got {value!r}")
        if self.max_output_chars < MIN_OUTPUT_CHARS:
            raise ConfigError(f"python tool option 'max_output_chars' must be at least {MIN_OUTPUT_CHARS}; "
                              f"got {self.max_output_chars!r}")
        if self.max_procs < 2:
            raise ConfigError(f"python tool option 'max_procs' must be at least 2; got {self.max_procs!r}")


@dataclass
class Capture:
    """One output stream, kept bounded: the first and last `keep` bytes and the total seen."""

    keep: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail = (self.tail + chunk)[-self.keep:]

    def text(self) -> tuple[str, int]:
        """The kept text and how many bytes were dropped between head and tail."""
        dropped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {dropped} bytes not kept ...]\n" if dropped else ""
        decode = (lambda data: data.decode("utf-8", errors="replace"))
        return decode(bytes(self.head)) + middle + decode(bytes(self.tail)), dropped


@dataclass
class Execution:
    """How one run ended, as the tool observed it and the launcher reported it."""

    stdout: Capture
    stderr: Capture
    returncode: int | None = None
    timed_out: bool = False
    wall_s: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)


class PythonTool(Tool):
    """Runs a Python snippet in a fresh sandboxed process per call; nothing carries over between calls."""

    def __init__(self, name: str = "python", description: str | None = None, *, timeout_s: float = 10.0,
                 cpu_s: int = 10, memory_mb: int = 1024, max_file_mb: int = 64, workspace_mb: int = 256,
                 max_procs: int = 32, max_output_chars: int = 4000, max_code_chars: int = 200_000,
                 isolation: str = "auto") -> None:
        if isolation not in ISOLATION_MODES:
            raise ConfigError(f"python tool option 'isolation' must be one of {list(ISOLATION_MODES)}; "
                              f"got {isolation!r}")
        self.limits = SandboxLimits(timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                                    max_file_mb=max_file_mb, workspace_mb=workspace_mb, max_procs=max_procs,
                                    max_output_chars=max_output_chars, max_code_chars=max_code_chars)
        self.isolation = isolation
        self.name = name
        self.description = description or (
            f"Run Python 3 code in a sandbox and return what it prints (stdout, then stderr). Each call is a "
            f"fresh process in an empty working directory with no network: nothing carries over between calls, "
            f"so print() every result you need. Limits: {timeout_s:g} s wall, {cpu_s} s CPU, {memory_mb} MB "
            f"memory. numpy and the standard library are available."
        )
        self.parameters = {
            "type": "object",
            "properties": {"code": {"type": "string", "minLength": 1, "description": "the complete Python program to run"}},
            "required": ["code"],
        }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        code = self._code_argument(arguments)
        if isinstance(code, ToolResult):
            return code
        with tempfile.TemporaryDirectory(prefix="toolorchestra-py-", ignore_cleanup_errors=True) as workdir:
            execution = await self._execute(code, workdir)
        return self._result(execution)

    def _code_argument(self, arguments: Any) -> str | ToolResult:
        if not isinstance(arguments, dict) or "code" not in arguments:
            return ToolResult(error="missing required argument 'code' (a string of Python source)")
        code = arguments["code"]
        if not isinstance(code, str):
            return ToolResult(error=f"argument 'code' must be a string of Python source; got {type(code).__name__}")
        if not code.strip():
            return ToolResult(error="argument 'code' is empty; give the Python program to run")
        if len(code) > self.limits.max_code_chars:
            return ToolResult(error=f"argument 'code' has {len(code)} characters; the limit is "
                                    f"{self.limits.max_code_chars}")
        return code

    # ------------------------------------------------------------------------------------------- running

    async def _execute(self, code: str, workdir: str) -> Execution:
        keep = self.limits.max_output_chars * BYTES_PER_CHAR
        execution = Execution(stdout=Capture(keep), stderr=Capture(keep))
        status_read, status_write = os.pipe()
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-c", LAUNCHER_STUB, str(LAUNCHER.parent),
                json.dumps(self._launcher_config(workdir, status_write)),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=sandbox_environment(workdir), start_new_session=True, pass_fds=(status_write,),
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        try:
            await self._communicate(process, code.encode("utf-8", errors="surrogatepass"), execution)
        finally:
            execution.wall_s = time.monotonic() - started
            execution.report = read_status(status_read)
        return execution

    async def _communicate(self, process: asyncio.subprocess.Process, code: bytes, execution: Execution) -> None:
        readers = [asyncio.create_task(_drain(process.stdout, execution.stdout)),
                   asyncio.create_task(_drain(process.stderr, execution.stderr))]
        try:
            await asyncio.wait_for(_feed_and_wait(process, code), self.limits.timeout_s)
        except asyncio.TimeoutError:
            execution.timed_out = True
            kill_group(process)
            await process.wait()
        except BaseException:  # cancelled (episode aborted): never leave the code running
            kill_group(process)
            await asyncio.shield(process.wait())
            raise
        finally:
            _, pending = await asyncio.wait(readers, timeout=PIPE_GRACE_S)
            for reader in pending:
                reader.cancel()
        execution.returncode = process.returncode

    def _launcher_config(self, workdir: str, status_fd: int) -> dict[str, Any]:
        limits = self.limits
        return {
            "mode": self.isolation, "workdir": workdir, "python": sys.executable, "launcher": str(LAUNCHER),
            "status_fd": status_fd, "home": os.path.expanduser("~"), "needed_paths": interpreter_paths(),
            "watchdog_s": math.ceil(limits.timeout_s) + WATCHDOG_GRACE_S,
            "limits": {"cpu_s": math.ceil(limits.cpu_s), "memory_mb": limits.memory_mb,
                       "max_file_mb": limits.max_file_mb, "workspace_mb": limits.workspace_mb,
                       "max_procs": limits.max_procs},
        }

    # ------------------------------------------------------------------------------------------ reporting

    def _result(self, execution: Execution) -> ToolResult:
        output, truncated = combine_output(execution.stdout, execution.stderr, self.limits.max_output_chars)
        report = execution.report
        exit_code, signal_number = _how_it_ended(execution)
        meta: dict[str, Any] = {
            "exit_code": exit_code, "signal": signal_number, "timed_out": execution.timed_out,
            "truncated": truncated, "stdout_bytes": execution.stdout.total, "stderr_bytes": execution.stderr.total,
            "sandbox": report.get("layers", {}),
        }
        for key in ("uid", "cpu_s", "max_rss_mb", "namespace_error", "setup_error"):
            if key in report:
                meta[key] = report[key]
        problems = self._problems(execution, exit_code, signal_number)
        error = None
        if problems:
            error = "; ".join(problems) + (f"\n{output}" if output else "")
        return ToolResult(output=output, error=error, latency_s=round(execution.wall_s, 4), meta=meta)

    def _problems(self, execution: Execution, exit_code: int | None, signal_number: int | None) -> list[str]:
        """What went wrong, in words the orchestrator can act on; empty for a run that ended by itself."""
        limits = self.limits
        if "setup_error" in execution.report:
            return [f"sandbox setup failed: {execution.report['setup_error']}"]
        problems = []
        if execution.timed_out:
            problems.append(f"wall-clock timeout: killed after {limits.timeout_s:g} s")
        elif signal_number == signal.SIGXCPU or (signal_number == signal.SIGKILL and
                                                 execution.report.get("cpu_s", 0) >= limits.cpu_s):
            problems.append(f"CPU time limit exceeded (cpu_s={limits.cpu_s}): killed by signal "
                            f"{_signal_name(signal_number)}")
        elif signal_number is not None:
            problems.append(f"killed by signal {_signal_name(signal_number)}")
        if exit_code != 0 or execution.timed_out:
            stderr_text, _ = execution.stderr.text()
            problems += [describe.format(**vars(limits)) for pattern, describe in VIOLATION_PATTERNS
                         if pattern.search(stderr_text)]
        return problems


# Signs in stderr that the code ran into a sandbox limit rather than a bug of its own.
VIOLATION_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"MemoryError"), "memory limit exceeded (memory_mb={memory_mb})"),
    (re.compile(r"\[Errno 11\] Resource temporarily unavailable|BlockingIOError"),
     "process limit reached (max_procs={max_procs})"),
    (re.compile(r"\[Errno 27\] File too large"), "file size limit exceeded (max_file_mb={max_file_mb})"),
    (re.compile(r"\[Errno 28\] No space left on device"), "workspace full (workspace_mb={workspace_mb})"),
    (re.compile(r"Network is unreachable|sandbox: network access is disabled|Temporary failure in name "
                r"resolution|gaierror|\[Errno 99\] Cannot assign requested address"),
     "network access is disabled in the sandbox"),
    (re.compile(r"Read-only file system|Permission denied|sandbox: writing outside|sandbox: reading other"),
     "permission refused by the sandbox (it may write only in its working directory)"),
    (re.compile(r"sandbox: starting or signalling processes is disabled"),
     "starting processes is disabled in this sandbox (fallback isolation)"),
]


def _how_it_ended(execution: Execution) -> tuple[int | None, int | None]:
    """(exit code, signal): from the namespace init's report, else from the process the tool started."""
    report = execution.report
    if "signal" in report:
        return None, int(report["signal"])
    if "exit" in report:
        return int(report["exit"]), None
    code = execution.returncode
    if code is not None and code < 0:
        return None, -code
    return code, None


def _signal_name(number: int | None) -> str:
    try:
        return signal.Signals(number).name if number is not None else "?"
    except ValueError:
        return str(number)


def combine_output(stdout: Capture, stderr: Capture, limit: int) -> tuple[str, bool]:
    """stdout then stderr in at most `limit` characters, markers included: stdout keeps its head, stderr its
    tail (where the exception is). Returns (text, whether anything was cut)."""
    out_text, out_dropped = stdout.text()
    err_text, err_dropped = stderr.text()
    if not (out_dropped or err_dropped) and len(_join_streams(out_text, err_text)) <= limit:
        return _join_streams(out_text, err_text), False
    budget = limit - MARKER_ROOM
    err_budget = min(len(err_text), max(budget // 2, budget - len(out_text)))
    out_budget = budget - err_budget
    if len(out_text) > out_budget:
        out_text = out_text[:out_budget] + f"\n[... {len(out_text) - out_budget} characters of stdout cut ...]\n"
    if len(err_text) > err_budget:
        cut = len(err_text) - err_budget
        err_text = f"[... {cut} characters of stderr cut ...]\n" + err_text[cut:]
    return _join_streams(out_text, err_text), True


def _join_streams(out_text: str, err_text: str) -> str:
    if not err_text:
        return out_text
    separator = "" if not out_text or out_text.endswith("\n") else "\n"
    return f"{out_text}{separator}[stderr]\n{err_text}"


# ---------------------------------------------------------------------------------------------- process side


def sandbox_environment(workdir: str) -> dict[str, str]:
    """The whole environment the code sees: nothing inherited, so no API key or token can leak in."""
    interpreter_bin = os.path.dirname(sys.executable)
    return {
        "PATH": f"{interpreter_bin}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "HOME": workdir, "TMPDIR": workdir,
        "USER": "sandbox", "LOGNAME": "sandbox",  # getpass.getuser() works for a uid with no passwd entry
        # One thread per BLAS/OpenMP pool: threads count against max_procs and against the address space.
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


@cache
def interpreter_paths() -> list[str]:
    """Where the interpreter and its packages live: the sandbox must still reach these when it hides a
    directory that holds them (e.g. a pyenv under /root)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), str(LAUNCHER.parent)}
    paths.update(value for value in sysconfig.get_paths().values() if value)
    paths.update(entry for entry in sys.path if entry and os.path.isabs(entry))
    return sorted(path for path in paths if os.path.exists(path))


async def _feed_and_wait(process: asyncio.subprocess.Process, code: bytes) -> None:
    assert process.stdin is not None
    try:
        process.stdin.write(code)
        await process.stdin.drain()
        process.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the launcher failed before reading; its status report says why
    await process.wait()


async def _drain(stream: asyncio.StreamReader | None, capture: Capture) -> None:
    """Read until EOF, keeping a bounded part: a program printing without end cannot fill our memory."""
    if stream is None:
        return
    while chunk := await stream.read(65536):
        capture.add(chunk)


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the launcher's process group (the launcher, the namespace init and the code, unless it made a
    new session; the pid namespace ends those when its init dies)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.kill()
    except ProcessLookupError:
        pass


def read_status(fd: int) -> dict[str, Any]:
    """Merge the launcher's JSON-line reports (later lines win); closes fd."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass  # a leaked writer still holds the pipe; what is there is all there will be
    finally:
        os.close(fd)
    report: dict[str, Any] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            fields = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(fields, dict):
            report.update(fields)
    return report
