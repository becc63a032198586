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
import logging
import math
import os
import re
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any

from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import Tool, ToolContext, ToolResult
from toolorchestra.tools.sandbox_launcher import LAUNCHER_STUB, cgroup_oom_file, cgroup_oom_kills

log = logging.getLogger(__name__)

LAUNCHER = Path(__file__).with_name("sandbox_launcher.py")
ISOLATION_MODES = ("auto", "namespaces", "fallback")
# Bytes kept from each end of a stream: enough for max_output_chars of 4-byte UTF-8 at either end.
BYTES_PER_CHAR = 4
# After the process is gone its pipes close at once; this only bounds a reader stuck on a leaked descriptor.
PIPE_GRACE_S = 2.0
# The launcher's own backstop (if this process dies mid-run) fires this long after the wall timeout.
WATCHDOG_GRACE_S = 5
# Room kept for the truncation markers and the stderr header, so truncated output stays within the limit.
MARKER_ROOM = 120
MIN_OUTPUT_CHARS = 200
# Working dirs and memory cgroups are named after the tool's pid, so that a later tool can tell which were left
# behind by a tool that was killed (kill -9 leaves them) and remove those.
RUN_PREFIX = "toolorchestra-py-"
STALE_NAME = re.compile(re.escape(RUN_PREFIX) + r"(\d+)-")


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
        for name in (option.name for option in fields(self)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"python tool option {name!r} must be a positive number; got {value!r}")
        if self.max_output_chars < MIN_OUTPUT_CHARS:
            raise ConfigError(
                f"python tool option 'max_output_chars' must be at least {MIN_OUTPUT_CHARS}; "
                f"got {self.max_output_chars!r}"
            )
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
            self.tail = (self.tail + chunk)[-self.keep :]

    @property
    def dropped(self) -> int:
        """Bytes seen but not kept (between head and tail)."""
        return self.total - len(self.head) - len(self.tail)

    def start(self) -> str:
        """The beginning of the stream as kept: all of it when nothing was dropped. Undecodable bytes become
        lone surrogates, one per byte, so that a prefix of the text maps back to an exact byte count."""
        data = bytes(self.head) + (bytes(self.tail) if not self.dropped else b"")
        return data.decode("utf-8", errors="surrogateescape")

    def end(self) -> str:
        """The end of the stream as kept: all of it when nothing was dropped (see start)."""
        data = (bytes(self.head) if not self.dropped else b"") + bytes(self.tail)
        return data.decode("utf-8", errors="surrogateescape")


def _byte_length(text: str) -> int:
    return len(text.encode("utf-8", errors="surrogateescape"))


def _printable(text: str) -> str:
    """Lone surrogates (undecodable bytes) shown as U+FFFD."""
    return text.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")


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

    def __init__(
        self,
        name: str = "python",
        description: str | None = None,
        *,
        timeout_s: float = 10.0,
        cpu_s: int = 10,
        memory_mb: int = 1024,
        max_file_mb: int = 64,
        workspace_mb: int = 256,
        max_procs: int = 32,
        max_output_chars: int = 4000,
        max_code_chars: int = 200_000,
        isolation: str = "auto",
    ) -> None:
        if isolation not in ISOLATION_MODES:
            raise ConfigError(
                f"python tool option 'isolation' must be one of {list(ISOLATION_MODES)}; got {isolation!r}"
            )
        self.limits = SandboxLimits(
            timeout_s, cpu_s, memory_mb, max_file_mb, workspace_mb, max_procs, max_output_chars, max_code_chars
        )
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
            "properties": {
                "code": {"type": "string", "minLength": 1, "description": "the complete Python program to run"}
            },
            "required": ["code"],
        }

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        code = self._code_argument(arguments)
        if isinstance(code, ToolResult):
            return code
        remove_stale_runs()
        cgroup = make_memory_cgroup(self.limits.memory_mb)
        oom_kills, peak = 0, ""
        try:
            with tempfile.TemporaryDirectory(
                prefix=f"{RUN_PREFIX}{os.getpid()}-", ignore_cleanup_errors=True
            ) as workdir:
                execution = await self._execute(code, workdir, cgroup)
        finally:
            if cgroup:
                oom_kills = cgroup_oom_kills(cgroup_oom_file(cgroup))
                peak = _read_text(
                    os.path.join(
                        cgroup["path"], "memory.peak" if cgroup["version"] == "v2" else "memory.max_usage_in_bytes"
                    )
                ).strip()
                await remove_cgroup(cgroup["path"])
        if cgroup and peak.isdigit():  # the kernel's count: every page charged to the call, tmpfs included
            execution.report["cgroup_peak_mb"] = round(int(peak) / 2**20, 1)
        if cgroup and oom_kills and "memory_exceeded" not in execution.report:
            # Fallback mode has no watching init: the kernel killed a process at the cgroup's limit.
            execution.report["memory_exceeded"] = "the kernel's OOM killer fired in the call's memory cgroup"
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
            return ToolResult(
                error=f"argument 'code' has {len(code)} characters; the limit is {self.limits.max_code_chars}"
            )
        return code

    # ------------------------------------------------------------------------------------------- running

    async def _execute(self, code: str, workdir: str, cgroup: dict[str, str] | None) -> Execution:
        keep = self.limits.max_output_chars * BYTES_PER_CHAR
        execution = Execution(stdout=Capture(keep), stderr=Capture(keep))
        status_read, status_write = os.pipe()
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                "-c",
                LAUNCHER_STUB,
                str(LAUNCHER.parent),
                json.dumps(self._launcher_config(workdir, status_write, cgroup)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=sandbox_environment(workdir),
                start_new_session=True,
                pass_fds=(status_write,),
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
        readers = [
            asyncio.create_task(_drain(process.stdout, execution.stdout)),
            asyncio.create_task(_drain(process.stderr, execution.stderr)),
        ]
        try:
            await asyncio.wait_for(_feed_and_wait(process, code), self.limits.timeout_s)
        except TimeoutError:
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

    def _launcher_config(self, workdir: str, status_fd: int, cgroup: dict[str, str] | None) -> dict[str, Any]:
        limits = self.limits
        return {
            "mode": self.isolation,
            "cgroup": cgroup,
            "workdir": workdir,
            "python": sys.executable,
            "launcher": str(LAUNCHER),
            "status_fd": status_fd,
            "home": os.path.expanduser("~"),
            "needed_paths": interpreter_paths(),
            "watchdog_s": math.ceil(limits.timeout_s) + WATCHDOG_GRACE_S,
            "limits": {
                "cpu_s": math.ceil(limits.cpu_s),
                "memory_mb": limits.memory_mb,
                "max_file_mb": limits.max_file_mb,
                "workspace_mb": limits.workspace_mb,
                "max_procs": limits.max_procs,
            },
        }

    # ------------------------------------------------------------------------------------------ reporting

    def _result(self, execution: Execution) -> ToolResult:
        output, truncated = combine_output(execution.stdout, execution.stderr, self.limits.max_output_chars)
        report = execution.report
        exit_code, signal_number = _how_it_ended(execution)
        meta: dict[str, Any] = {
            "exit_code": exit_code,
            "signal": signal_number,
            "timed_out": execution.timed_out,
            "truncated": truncated,
            "stdout_bytes": execution.stdout.total,
            "stderr_bytes": execution.stderr.total,
            "sandbox": report.get("layers", {}),
        }
        for key in (
            "uid",
            "cpu_s",
            "max_rss_mb",
            "peak_memory_mb",
            "cgroup_peak_mb",
            "memory_exceeded",
            "namespace_error",
            "setup_error",
            "cgroup_error",
            "seccomp",
        ):
            if key in report:
                meta[key] = report[key]
        if "namespace_error" in report and self.isolation == "auto":
            meta["isolation_warning"] = self._warn_fallback(report["namespace_error"])
        problems = self._problems(execution, exit_code, signal_number)
        error = None
        if problems:
            error = "; ".join(problems) + (f"\n{output}" if output else "")
        return ToolResult(output=output, error=error, latency_s=round(execution.wall_s, 4), meta=meta)

    def _warn_fallback(self, reason: str) -> str:
        """isolation 'auto' without namespaces: say so loudly, once per tool, and in every result's meta."""
        message = (
            f"python tool {self.name!r}: isolation 'auto' fell back from namespaces to the fallback "
            f"(audit hook, not a security boundary) because unshare() was refused: {reason}"
        )
        if not getattr(self, "_warned_fallback", False):
            log.warning(message)
            self._warned_fallback = True
        return message

    def _problems(self, execution: Execution, exit_code: int | None, signal_number: int | None) -> list[str]:
        """What went wrong, in words the orchestrator can act on; empty for a run that ended by itself."""
        limits = self.limits
        if "setup_error" in execution.report:
            return [f"sandbox setup failed: {execution.report['setup_error']}"]
        problems = []
        if "memory_exceeded" in execution.report:
            return [
                f"memory limit exceeded: all processes of this call together may use memory_mb="
                f"{limits.memory_mb} MB, and {execution.report['memory_exceeded']}; every process of the "
                f"call was killed"
            ]
        if execution.timed_out:
            problems.append(f"wall-clock timeout: killed after {limits.timeout_s:g} s")
        elif signal_number == signal.SIGXCPU or (
            signal_number == signal.SIGKILL and execution.report.get("cpu_s", 0) >= limits.cpu_s
        ):
            problems.append(
                f"CPU time limit exceeded (cpu_s={limits.cpu_s}): killed by signal {_signal_name(signal_number)}"
            )
        elif signal_number is not None:
            problems.append(f"killed by signal {_signal_name(signal_number)}")
        if exit_code != 0 or execution.timed_out:
            stderr_text = execution.stderr.end()
            problems += [
                describe.format(**vars(limits))
                for pattern, describe in VIOLATION_PATTERNS
                if pattern.search(stderr_text)
            ]
        return problems


# Signs in stderr that the code ran into a sandbox limit rather than a bug of its own.
VIOLATION_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"MemoryError"), "memory limit exceeded (memory_mb={memory_mb})"),
    (
        re.compile(r"\[Errno 11\] Resource temporarily unavailable|BlockingIOError"),
        "process limit reached (max_procs={max_procs})",
    ),
    (re.compile(r"\[Errno 27\] File too large"), "file size limit exceeded (max_file_mb={max_file_mb})"),
    (re.compile(r"\[Errno 28\] No space left on device"), "workspace full (workspace_mb={workspace_mb})"),
    (
        re.compile(
            r"Network is unreachable|sandbox: network access is disabled|Temporary failure in name "
            r"resolution|gaierror|\[Errno 99\] Cannot assign requested address"
        ),
        "network access is disabled in the sandbox",
    ),
    (
        re.compile(r"\[Errno 97\] Address family not supported"),
        "Unix sockets are disabled in the sandbox (socketpair() works)",
    ),
    (
        re.compile(r"Read-only file system|Permission denied|sandbox: writing outside|sandbox: reading other"),
        "permission refused by the sandbox (it may write only in its working directory)",
    ),
    (
        re.compile(r"sandbox: starting or signalling processes is disabled"),
        "starting processes is disabled in this sandbox (fallback isolation)",
    ),
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
    tail (where the exception is). A marker counts the bytes of that stream that are not shown, whether the
    capture dropped them while reading or they were cut here. Returns (text, whether anything was cut)."""
    out_text, err_text = stdout.start(), stderr.end()
    if not (stdout.dropped or stderr.dropped) and len(_join_streams(out_text, err_text)) <= limit:
        return _printable(_join_streams(out_text, err_text)), False
    budget = limit - MARKER_ROOM
    err_budget = min(len(err_text), max(budget // 2, budget - len(out_text)))
    out_budget = budget - err_budget
    if stdout.dropped or len(out_text) > out_budget:
        out_text = out_text[:out_budget]
        out_text += f"\n[... {stdout.total - _byte_length(out_text)} bytes of stdout cut ...]\n"
    if stderr.dropped or len(err_text) > err_budget:
        err_text = err_text[len(err_text) - err_budget :] if err_budget else ""
        err_text = f"[... {stderr.total - _byte_length(err_text)} bytes of stderr cut ...]\n" + err_text
    return _printable(_join_streams(out_text, err_text)), True


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
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
        "USER": "sandbox",
        "LOGNAME": "sandbox",  # getpass.getuser() works for a uid with no passwd entry
        # One thread per BLAS/OpenMP pool: threads count against max_procs and against the address space.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


@cache
def interpreter_paths() -> list[str]:
    """Where the interpreter and its packages live: the sandbox must still reach these when it hides a
    directory that holds them (e.g. a pyenv under /root)."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(LAUNCHER.parent),
    }
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
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(ProcessLookupError):
        process.kill()


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


# ------------------------------------------------------------------------------- memory cgroup and leftovers


@cache
def memory_cgroup_parent() -> tuple[str, str] | None:
    """(version, directory) where this process may make a memory cgroup per call, or None.

    cgroup v2: our own cgroup, if the memory controller is enabled for its children and we may write there
    (a delegated subtree). cgroup v1: our own cgroup in the memory hierarchy, if we may write there (root, or
    a delegated one). Elsewhere the namespace init's watch is the only bound on the call as a whole.
    """
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split(" - ")
        if len(fields) != 2:
            continue
        mount_point = fields[0].split()[4]
        fstype, _, options = fields[1].split()[:3]
        for entry in own:
            parts = entry.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, path = parts
            if fstype == "cgroup2" and hierarchy == "0" and not controllers:
                directory = os.path.join(mount_point, path.lstrip("/"))
                enabled = _read_text(os.path.join(directory, "cgroup.subtree_control")).split()
                if "memory" in enabled and os.access(directory, os.W_OK):
                    return "v2", directory
            elif fstype == "cgroup" and "memory" in options.split(",") and "memory" in controllers.split(","):
                for directory in (os.path.join(mount_point, path.lstrip("/")), mount_point):
                    if os.path.isfile(os.path.join(directory, "memory.limit_in_bytes")) and os.access(
                        directory, os.W_OK
                    ):
                        return "v1", directory
    return None


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def make_memory_cgroup(memory_mb: int) -> dict[str, str] | None:
    """A memory cgroup for one call, limited to memory_mb for all its processes together (memory and swap),
    or None where none can be made. The launcher moves itself into it before starting anything."""
    parent = memory_cgroup_parent()
    if parent is None:
        return None
    version, directory = parent
    path = os.path.join(directory, f"{RUN_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}")
    limit = str(memory_mb * 1024 * 1024)
    settings = (
        [("memory.max", limit), ("memory.swap.max", "0"), ("memory.oom.group", "1")]
        if version == "v2"
        else [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
    )
    try:
        os.mkdir(path)
    except OSError as exc:
        log.debug("no memory cgroup for the python tool (%s); the namespace init's watch bounds the call", exc)
        return None
    for index, (name, value) in enumerate(settings):
        try:
            Path(path, name).write_text(value)
        except OSError as exc:
            if index == 0:  # without the limit itself the cgroup is of no use
                log.debug("cannot limit memory cgroup %s: %s", path, exc)
                os.rmdir(path)
                return None  # the others (no swap accounting, no group kill) are optional
    return {"version": version, "path": path}


async def remove_cgroup(path: str) -> None:
    """rmdir the call's cgroup once its last process is gone (a killed namespace may take a moment)."""
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.02)
    log.warning("could not remove the python tool's memory cgroup %s; a later run removes it", path)


def remove_stale_runs() -> None:
    """Remove working dirs (and memory cgroups) left by a tool whose process is gone, e.g. killed with -9."""
    places = [tempfile.gettempdir()]
    parent = memory_cgroup_parent()
    if parent is not None:
        places.append(parent[1])
    for place in places:
        try:
            names = os.listdir(place)
        except OSError:
            continue
        for name in names:
            match = STALE_NAME.match(name)
            if match is None or _process_alive(int(match.group(1))):
                continue
            path = os.path.join(place, name)
            if place == tempfile.gettempdir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with suppress(OSError):
                    os.rmdir(path)  # refused while a process is still in it


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True
