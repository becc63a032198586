"""The `python` tool's sandbox against the attacks of issue 26: memory taken by many processes together, the
fallback run as root, a silent fall back from namespaces, a host Unix socket, a huge output's cut marker, and
the working dirs a kill -9 leaves behind. Every test runs real sandboxes; none allocates more than ~1.2 GB.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from toolorchestra.envs.base import Task
from toolorchestra.tools import python_sandbox
from toolorchestra.tools.base import ToolContext
from toolorchestra.tools.python_sandbox import Capture, PythonTool, combine_output, interpreter_paths
from toolorchestra.tools.sandbox_launcher import _open_to_others

CONTEXT = ToolContext(task=Task(id="sandbox-adversarial", prompt="q"))
REFUSES_AS_ROOT = os.geteuid() == 0 and not all(_open_to_others(path) for path in interpreter_paths())
FALLBACK_RUNS = pytest.mark.skipif(REFUSES_AS_ROOT, reason="the fallback refuses to run as root here (tested below)")
ISOLATIONS = ["auto", pytest.param("fallback", marks=FALLBACK_RUNS)]

# Four children of 300 MB each (1.2 GB asked) against one limit of 700 MB for the whole call.
CHILDREN_CODE = """
import os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (300 * 1024 * 1024)
        print("child holds 300 MB", flush=True)
        time.sleep(3)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
print("all children done")
"""


async def run(sandbox: PythonTool, code: str):
    return await sandbox.run({"code": code}, CONTEXT)


NAMESPACE_PROBE = """
import ctypes, os, sys
flags = 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000 | (0 if os.geteuid() == 0 else 0x10000000)
sys.exit(0 if ctypes.CDLL(None, use_errno=True).unshare(flags) == 0 else 1)
"""
NEEDS_NAMESPACES = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", NAMESPACE_PROBE], timeout=30).returncode != 0,
    reason="no namespaces here: the whole-call memory watch lives in the namespace init")


# ------------------------------------------------------------------------------------ memory of the whole call


def _assert_whole_call_killed(result, limit_mb: int) -> None:
    assert result.error.startswith(f"memory limit exceeded: all processes of this call together may use "
                                   f"memory_mb={limit_mb} MB"), result.error
    assert "every process of the call was killed" in result.error
    assert "all children done" not in result.output
    assert result.meta["memory_exceeded"]
    # The call never held what it asked for (4 x 300 MB), so the host did not lose it.
    assert result.meta["peak_memory_mb"] < 4 * 300


@NEEDS_NAMESPACES
async def test_processes_that_together_exceed_the_limit_are_all_killed():
    result = await run(PythonTool(isolation="namespaces", memory_mb=700, timeout_s=20), CHILDREN_CODE)
    _assert_whole_call_killed(result, 700)
    if python_sandbox.memory_cgroup_parent() is not None:
        # The kernel's own count of every page charged to the call: it never went over the limit.
        assert result.meta["sandbox"]["memory"].startswith("cgroup-")
        assert result.meta["cgroup_peak_mb"] <= 700


@NEEDS_NAMESPACES
async def test_without_a_cgroup_the_init_watch_still_kills_the_whole_call(monkeypatch):
    monkeypatch.setattr(python_sandbox, "memory_cgroup_parent", lambda: None)
    result = await run(PythonTool(isolation="namespaces", memory_mb=700, timeout_s=20), CHILDREN_CODE)
    assert result.meta["sandbox"]["memory"] == "rss-watch"
    assert "cgroup_peak_mb" not in result.meta
    _assert_whole_call_killed(result, 700)


@NEEDS_NAMESPACES
async def test_processes_within_the_limit_together_run_to_the_end():
    code = CHILDREN_CODE.replace("300 * 1024 * 1024", "50 * 1024 * 1024").replace("time.sleep(3)", "")
    result = await run(PythonTool(isolation="namespaces", memory_mb=700, timeout_s=20), code)
    assert result.error is None, result.error
    assert result.output.count("child holds") == 4 and "all children done" in result.output


def test_default_limits_fit_a_24_gb_machine():
    limits = PythonTool().limits
    assert limits.memory_mb <= 1024  # now for the call as a whole, whatever max_procs is


# ------------------------------------------------------------------------------------------- fallback as root


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can be run as root")
async def test_fallback_refuses_to_run_as_root_when_the_interpreter_is_closed_to_other_users(monkeypatch, tmp_path):
    closed = Path(tempfile.mkdtemp(prefix="closed-interpreter-"))
    closed.chmod(0o700)  # as a pyenv under /root: the sandbox uid cannot enter it
    marker = Path(tempfile.gettempdir()) / f"sandbox-ran-as-root-{uuid.uuid4().hex}"
    paths = interpreter_paths() + [str(closed)]
    monkeypatch.setattr(python_sandbox, "interpreter_paths", lambda: paths)
    try:
        result = await run(PythonTool(isolation="fallback"), f"open({str(marker)!r}, 'w').write('root')")
        assert not marker.exists(), "the code ran"
        assert "refusing to run the code as root" in result.error
        assert "closed to other users" in result.error and "namespaces" in result.error
        assert result.meta["exit_code"] == 125
    finally:
        closed.rmdir()
        marker.unlink(missing_ok=True)


@FALLBACK_RUNS
async def test_fallback_code_never_runs_as_root():
    result = await run(PythonTool(isolation="fallback"), "import os\nprint(os.getuid(), os.geteuid())")
    assert result.error is None, result.error
    assert "0" not in result.output.split()


# A process that cannot unshare(): a seccomp filter of the test's own (not the sandbox's) refuses it with EPERM.
NO_UNSHARE_SCRIPT = """
import asyncio, ctypes, json, logging, os, sys
arch, unshare_nr = {"x86_64": (0xC000003E, 272), "aarch64": (0xC00000B7, 97)}[os.uname().machine]
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(F))]
prog = [F(0x20, 0, 0, 0), F(0x15, 0, 1, unshare_nr), F(0x06, 0, 0, 0x00050000 | 1), F(0x06, 0, 0, 0x7FFF0000)]
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0
filters = (F * len(prog))(*prog)
assert libc.prctl(22, 2, ctypes.byref(P(len(prog), filters)), 0, 0) == 0, ctypes.get_errno()
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from toolorchestra.tools.python_sandbox import PythonTool
result = asyncio.run(PythonTool(isolation="auto").run({"code": "print('ran')"}, None))
print(json.dumps({"error": result.error, "output": result.output, "meta": result.meta}))
"""


def test_auto_says_loudly_when_it_falls_back_from_namespaces():
    done = subprocess.run([sys.executable, "-c", NO_UNSHARE_SCRIPT], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(python_sandbox.__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert "Operation not permitted" in result["meta"]["namespace_error"]
    assert "fell back from namespaces" in result["meta"]["isolation_warning"]
    assert "WARNING" in done.stderr and "fell back from namespaces" in done.stderr
    if REFUSES_AS_ROOT:  # the fallback it fell into refuses rather than run as root
        assert "refusing to run the code as root" in result["error"]
        assert "unshare() was refused" in result["error"]
    else:
        assert result["output"] == "ran\n"


# ------------------------------------------------------------------------------------------ host Unix sockets


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_world_writable_host_unix_socket_is_unreachable(isolation):
    folder = Path(tempfile.mkdtemp(prefix="host-socket-"))
    folder.chmod(0o755)  # a directory the sandbox can see
    path = folder / "daemon.sock"
    abstract = f"\0toolorchestra-test-{uuid.uuid4().hex}"
    listeners = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    try:
        listeners[0].bind(str(path))
        path.chmod(0o777)
        listeners[1].bind(abstract)
        for listener in listeners:
            listener.listen()
        code = (f"import socket\nfor address in ({str(path)!r}, {abstract!r}):\n    try:\n"
                "        s = socket.socket(socket.AF_UNIX)\n        s.connect(address)\n"
                "        print('CONNECTED', repr(address))\n    except OSError as exc:\n"
                "        print('refused:', exc)\n")
        result = await run(PythonTool(isolation=isolation), code)
        assert "CONNECTED" not in result.output
        assert result.output.count("refused:") == 2
        readable, _, _ = select.select(listeners, [], [], 0.2)
        assert readable == [], "a connection reached the host's socket"
        # And the sandbox says what is refused when the code does not catch it.
        uncaught = await run(PythonTool(isolation=isolation),
                             f"import socket\nsocket.socket(socket.AF_UNIX).connect({str(path)!r})")
        assert "Unix sockets are disabled in the sandbox" in uncaught.error
    finally:
        for listener in listeners:
            listener.close()
        path.unlink(missing_ok=True)
        folder.rmdir()


async def test_socketpair_still_works_for_multiprocessing_pipes():
    result = await run(PythonTool(isolation="auto"),
                       "import multiprocessing as mp\na, b = mp.Pipe()\na.send(41)\nprint(b.recv() + 1)")
    assert (result.output, result.error) == ("42\n", None)


# ---------------------------------------------------------------------------------------------- cut markers


def _marker_bytes(text: str, stream: str) -> int:
    match = re.search(r"\[\.\.\. (\d+) bytes of " + stream + r" cut \.\.\.\]", text)
    assert match, text
    return int(match.group(1))


async def test_the_cut_marker_counts_the_bytes_that_were_cut():
    # 3 MB of two-byte characters: the capture drops most of it while reading, the marker counts all of it.
    result = await run(PythonTool(isolation="auto", max_output_chars=600),
                       "import sys\nsys.stdout.write('é' * 1_500_000)\nsys.stderr.write('ü' * 10_000)")
    assert result.meta["stdout_bytes"] == 3_000_000 and result.meta["stderr_bytes"] == 20_000
    shown_out = len(re.match("é*", result.output).group(0))
    assert _marker_bytes(result.output, "stdout") == 3_000_000 - 2 * shown_out
    shown_err = len(re.search("ü*$", result.output).group(0))
    assert _marker_bytes(result.output, "stderr") == 20_000 - 2 * shown_err
    assert len(result.output) <= 600


def test_the_cut_marker_counts_undecodable_bytes_one_each():
    stdout, stderr = Capture(keep=800), Capture(keep=800)
    for _ in range(100):
        stdout.add(b"\xff" * 1000)
    text, truncated = combine_output(stdout, stderr, 300)
    shown = text.count("\ufffd")
    assert truncated and _marker_bytes(text, "stdout") == 100_000 - shown


# ------------------------------------------------------------------------------------ leftovers of a kill -9


async def test_a_working_dir_left_by_a_killed_tool_is_removed_by_the_next_run(tmp_path, monkeypatch):
    script = ("import asyncio\nfrom toolorchestra.tools.python_sandbox import PythonTool\n"
              "asyncio.run(PythonTool(timeout_s=1, isolation='auto').run({'code': 'import time\\n"
              "time.sleep(60)'}, None))")
    host = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not list(tmp_path.glob("toolorchestra-py-*")):
            time.sleep(0.05)
        left = list(tmp_path.glob(f"toolorchestra-py-{host.pid}-*"))
        assert left, "the killed tool never made its working dir"
        host.send_signal(signal.SIGKILL)
        host.wait()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert all(path.exists() for path in left)  # what kill -9 leaves behind
    ours = tmp_path / f"toolorchestra-py-{os.getpid()}-inuse"  # a live tool's dir is never touched
    ours.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = await run(PythonTool(isolation="auto"), "print('next run')")
    assert result.output == "next run\n"
    assert not any(path.exists() for path in left)
    assert ours.exists()
    assert [path.name for path in tmp_path.iterdir()] == [ours.name]
