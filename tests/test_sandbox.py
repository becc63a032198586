"""The `python` tool's sandbox: normal runs, and each attack contained, reported, and harmless to this process.

Every attack runs under both isolation layers: "auto" (namespaces where the kernel allows them, which it does
on our machines and CI) and the forced audit-hook "fallback". After each attack the test checks that this
process is unharmed: it can still run a snippet, allocate, fork, keeps its rlimits, and has no leftover
sandbox processes below it.
"""

from __future__ import annotations

import os
import resource
import select
import shutil
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
from toolorchestra.errors import ConfigError
from toolorchestra.tools.base import ToolContext
from toolorchestra.tools.python_sandbox import PythonTool

REPO = Path(__file__).resolve().parents[1]
CONTEXT = ToolContext(task=Task(id="sandbox", prompt="q"))
LIMITS_AT_IMPORT = {name: resource.getrlimit(getattr(resource, name))
                    for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE")}


def fallback_refused_here() -> bool:
    """As root, the fallback refuses to run when its dedicated uid cannot use the interpreter (e.g. a pyenv under
    /root, mode 0700): it never runs code as root. tests/test_sandbox_adversarial.py tests that refusal."""
    from toolorchestra.tools.python_sandbox import interpreter_paths
    from toolorchestra.tools.sandbox_launcher import _open_to_others

    return os.geteuid() == 0 and not all(_open_to_others(path) for path in interpreter_paths())


FALLBACK_RUNS = pytest.mark.skipif(fallback_refused_here(), reason="the fallback refuses to run as root here: "
                                   "the interpreter lies in a directory other users cannot enter")
ISOLATIONS = ["auto", pytest.param("fallback", marks=FALLBACK_RUNS)]

# Independent of the code under test: can this process make the namespaces the sandbox asks for?
NAMESPACE_PROBE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
flags = 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000
if os.geteuid() != 0:
    flags |= 0x10000000
sys.exit(0 if libc.unshare(flags) == 0 else 1)
"""


def namespaces_available() -> bool:
    return subprocess.run([sys.executable, "-c", NAMESPACE_PROBE], timeout=30).returncode == 0


def tool(isolation: str, **options) -> PythonTool:
    options.setdefault("timeout_s", 10)
    return PythonTool(isolation=isolation, **options)


async def run(sandbox: PythonTool, code: str):
    return await sandbox.run({"code": code}, CONTEXT)


def descendants(pid: int) -> list[int]:
    """Every live process below pid, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited while we looked
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


async def assert_unharmed(isolation: str) -> None:
    """This process still works: a normal snippet, a big allocation, a fork, its limits, no leftovers."""
    result = await run(tool(isolation), "print(17*23)")
    assert (result.output, result.error) == ("391\n", None)
    block = bytearray(256 * 1024 * 1024)
    block[-1] = 1
    del block
    child = os.fork()
    if child == 0:
        os._exit(7)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7
    assert {name: resource.getrlimit(getattr(resource, name)) for name in LIMITS_AT_IMPORT} == LIMITS_AT_IMPORT
    assert descendants(os.getpid()) == []


# ------------------------------------------------------------------------------------------------ normal runs


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_normal_code_prints_its_result(isolation):
    result = await run(tool(isolation), "print(17*23)")
    assert result.error is None
    assert result.output == "391\n"
    assert result.meta["exit_code"] == 0
    assert result.meta["timed_out"] is False
    assert result.latency_s > 0


async def test_auto_isolation_uses_namespaces_where_the_kernel_allows_them():
    result = await run(tool("auto"), "print('hi')")
    layers = result.meta["sandbox"]
    if namespaces_available():
        assert layers["isolation"] == "namespaces"
        assert layers["network"] == "netns"
        assert layers["filesystem"] == "mountns-readonly"
        assert layers["kill"] == "pidns"
    else:
        assert layers["isolation"] == "fallback"
        assert "namespace_error" in result.meta
    assert result.output == "hi\n"


@FALLBACK_RUNS
async def test_forced_fallback_reports_its_layers():
    result = await run(tool("fallback"), "print('hi')")
    assert result.meta["sandbox"]["isolation"] == "fallback"
    assert result.meta["sandbox"]["network"] == "audit-hook+seccomp"


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_an_exception_shows_its_traceback_from_stderr(isolation):
    result = await run(tool(isolation), "print('before')\ndef f():\n    raise ValueError('boom 42')\nf()")
    assert result.error is None  # a bug in the code is an observation, not a sandbox violation
    assert result.meta["exit_code"] == 1
    assert result.output.startswith("before\n[stderr]\nTraceback (most recent call last):\n")
    assert 'main.py", line 3, in f' in result.output
    assert result.output.rstrip().endswith("ValueError: boom 42")
    assert "sandbox_launcher" not in result.output


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_the_working_dir_is_writable_empty_and_deleted_afterwards(isolation):
    code = ("import os\nprint(sorted(os.listdir('.')))\nopen('notes.txt', 'w').write('kept')\n"
            "print(open('notes.txt').read())\nprint(os.getcwd())")
    result = await run(tool(isolation), code)
    assert result.error is None
    listing, content, workdir = result.output.splitlines()
    assert listing == "['main.py']"
    assert content == "kept"
    assert Path(workdir).name.startswith("toolorchestra-py-")
    assert not Path(workdir).exists()


async def test_a_working_dir_below_a_closed_directory_still_works(tmp_path, monkeypatch):
    # pytest's tmp_path lies below /tmp/pytest-of-<user> (0700): the sandbox's own uid could not enter it.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    result = await run(tool("auto"), "import os\nopen('f.txt', 'w').write('ok')\nprint(os.getcwd())")
    assert result.error is None, result.error
    assert Path(result.output.strip()).parent == tmp_path
    assert list(tmp_path.iterdir()) == []  # removed afterwards


async def test_standard_packages_work_inside_the_limits():
    code = ("import numpy as np, multiprocessing as mp\nprint(int(np.arange(10).sum()))\n"
            "with mp.Pool(2) as pool:\n    print(pool.map(abs, [-1, -2]))")
    result = await run(tool("auto"), code)
    assert result.error is None, result.error
    assert result.output == "45\n[1, 2]\n"


async def test_concurrent_runs_each_get_their_own_output():
    import asyncio

    sandbox = tool("auto")
    results = await asyncio.gather(*(run(sandbox, f"print({n} * 3)") for n in range(6)))
    assert [result.output for result in results] == [f"{n * 3}\n" for n in range(6)]


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_output_is_truncated_to_max_output_chars(isolation):
    code = "import sys\nprint('x' * 100_000)\nprint('y' * 5_000, file=sys.stderr)\nraise KeyError('tail')"
    result = await run(tool(isolation, max_output_chars=600), code)
    assert len(result.output) <= 600
    assert result.meta["truncated"] is True
    assert result.meta["stdout_bytes"] == 100_001
    assert result.output.startswith("x" * 100)
    assert "[... 99" in result.output and " bytes of stdout cut ...]" in result.output
    assert result.output.rstrip().endswith("KeyError: 'tail'")  # stderr keeps its tail


async def test_short_output_is_not_marked_truncated():
    result = await run(tool("auto", max_output_chars=600), "print('z' * 500)")
    assert result.output == "z" * 500 + "\n"
    assert result.meta["truncated"] is False


@pytest.mark.parametrize("arguments, expected", [
    ({}, "missing required argument 'code'"),
    ({"program": "print(1)"}, "missing required argument 'code'"),
    ({"code": 5}, "argument 'code' must be a string of Python source; got int"),
    ({"code": ["print(1)"]}, "argument 'code' must be a string of Python source; got list"),
    ({"code": "   "}, "argument 'code' is empty"),
    ("print(1)", "missing required argument 'code'"),
])
async def test_bad_arguments_give_an_error_result(arguments, expected):
    result = await tool("auto").run(arguments, CONTEXT)
    assert expected in result.error
    assert result.output == ""


async def test_code_over_the_size_limit_is_refused():
    result = await run(tool("auto", max_code_chars=1000), "x = 1\n" * 500)
    assert "the limit is 1000" in result.error


@pytest.mark.parametrize("options, name", [
    ({"timeout_s": 0}, "timeout_s"), ({"memory_mb": -1}, "memory_mb"), ({"max_procs": "many"}, "max_procs"),
    ({"max_output_chars": 10}, "max_output_chars"), ({"isolation": "docker"}, "isolation"),
    ({"cpu_s": True}, "cpu_s"),
])
def test_bad_options_raise_a_config_error_naming_the_option(options, name):
    with pytest.raises(ConfigError, match=name):
        PythonTool(**options)


def test_schema_requires_code():
    spec = PythonTool().schema()["function"]
    assert spec["name"] == "python"
    assert spec["parameters"]["required"] == ["code"]
    assert spec["parameters"]["properties"]["code"]["type"] == "string"


# -------------------------------------------------------------------------------------------------- attacks


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_fork_bomb_is_contained_and_reported(isolation):
    result = await run(tool(isolation, timeout_s=5, max_procs=16), "import os\nwhile True:\n    os.fork()")
    assert result.error is not None
    if isolation == "fallback":
        assert "starting processes is disabled" in result.error
    else:
        assert "process limit reached (max_procs=16)" in result.error
    assert result.meta["timed_out"] is False  # the limit stopped it, not the clock
    await assert_unharmed(isolation)


async def test_process_limit_holds_even_though_we_run_as_root():
    # Children that stay alive: count how many forks succeed before the limit refuses one.
    code = ("import os, time\nforked = 0\ntry:\n    while forked < 200:\n        if os.fork() == 0:\n"
            "            time.sleep(20)\n            os._exit(0)\n        forked += 1\n"
            "except OSError as exc:\n    print('refused', type(exc).__name__)\nprint('forked', forked)")
    result = await run(tool("auto", timeout_s=8, max_procs=8), code)
    if result.meta["sandbox"]["isolation"] == "fallback":
        pytest.skip("no namespaces here: the fallback refuses every fork (tested above)")
    assert "refused BlockingIOError" in result.output
    assert int(result.output.split("forked ")[1]) <= 7  # the code's own process is the eighth
    assert result.meta["timed_out"] is False  # the sleeping children were killed with the namespace
    await assert_unharmed("auto")


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_fork_bomb_that_survives_its_errors_is_killed_at_the_wall_timeout(isolation):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    started = time.monotonic()
    result = await run(tool(isolation, timeout_s=3, cpu_s=30, max_procs=16), code)
    assert time.monotonic() - started < 8
    assert result.meta["timed_out"] is True
    assert result.error.startswith("wall-clock timeout: killed after 3 s")
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_4_gb_allocation_hits_the_memory_limit(isolation):
    result = await run(tool(isolation, memory_mb=512), "block = bytearray(4 * 1024**3)\nprint('allocated')")
    assert "memory limit exceeded (memory_mb=512)" in result.error
    assert "allocated" not in result.output
    assert "MemoryError" in result.output
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_busy_loop_is_stopped_by_the_cpu_limit(isolation):
    result = await run(tool(isolation, timeout_s=10, cpu_s=1), "while True:\n    pass")
    assert result.error.startswith("CPU time limit exceeded (cpu_s=1)")
    assert result.meta["signal"] in (signal.SIGXCPU, signal.SIGKILL)
    assert result.meta["timed_out"] is False
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_busy_loop_is_stopped_by_the_wall_timeout(isolation):
    started = time.monotonic()
    result = await run(tool(isolation, timeout_s=1.5, cpu_s=30), "print('started', flush=True)\nwhile True:\n"
                                                                 "    pass")
    assert time.monotonic() - started < 6
    assert result.meta["timed_out"] is True
    assert result.error.startswith("wall-clock timeout: killed after 1.5 s")
    assert "started" in result.error  # what it printed before is still shown
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_no_network_even_to_a_listener_on_localhost(isolation):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    try:
        port, udp_port = listener.getsockname()[1], udp.getsockname()[1]
        code = (f"import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"    s.sendto(b'leak', ('127.0.0.1', {udp_port}))\nexcept OSError as exc:\n"
                f"    print('udp refused:', exc)\n"
                f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\nprint('connected')")
        result = await run(tool(isolation), code)
        readable, _, _ = select.select([listener, udp], [], [], 0.5)
        assert readable == [], "the sandbox reached a socket on 127.0.0.1"
    finally:
        listener.close()
        udp.close()
    assert "network access is disabled in the sandbox" in result.error
    assert "udp refused" in result.output
    assert "connected" not in result.output
    if isolation == "auto" and namespaces_available():
        assert result.meta["sandbox"]["network"] == "netns"
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_writes_outside_the_working_dir_are_refused(isolation, tmp_path):
    # Targets: this test's tmp_path, the repository, /, and a world-writable dir (which only the
    # read-only mount or the audit hook can protect; file permissions alone would let any uid in).
    open_dir = Path(tempfile.mkdtemp(prefix="sandbox-open-"))
    open_dir.chmod(0o777)
    marker = uuid.uuid4().hex
    targets = [tmp_path / f"escape-{marker}.txt", REPO / f"escape-{marker}.txt", open_dir / f"escape-{marker}.txt",
               Path(f"/escape-{marker}.txt")]
    sandbox = tool(isolation)
    try:
        results = [await run(sandbox, f"open({str(target)!r}, 'w').write('escaped')\nprint('wrote')")
                   for target in targets]
        results.append(await run(sandbox, f"import os\nos.mkdir({str(open_dir / marker)!r})\nprint('made')"))
        assert [target for target in targets if target.exists()] == []
        assert not (open_dir / marker).exists()
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
        if (open_dir / marker).exists():
            (open_dir / marker).rmdir()
        open_dir.rmdir()
    for result in results:
        assert "permission refused by the sandbox" in result.error
        assert "wrote" not in result.output and "made" not in result.output
    await assert_unharmed(isolation)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_an_api_key_of_the_parent_does_not_reach_the_code(isolation, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    # A process that holds a key in its start-up environment, readable at /proc/<pid>/environ to its owner.
    holder = subprocess.Popen(["sleep", "30"], env={**os.environ, "ANTHROPIC_API_KEY": "sk-test-secret-holder"})
    code = ("import os\nprint(dict(os.environ))\nread = 0\nfor pid in os.listdir('/proc'):\n"
            "    if pid.isdigit() or pid == 'self':\n        try:\n"
            "            print(open(f'/proc/{pid}/environ', 'rb').read())\n            read += 1\n"
            "        except OSError:\n            pass\nprint('read', read)")
    try:
        result = await run(tool(isolation), code)
    finally:
        holder.kill()
        holder.wait()
    text = result.output + (result.error or "")
    assert "sk-test-secret" not in text
    assert "OPENAI_API_KEY" not in text
    assert "'HOME': " in result.output  # it did print its environment: the key is absent, not hidden
    assert int(result.output.rsplit("read ", 1)[1]) >= 1  # and it could read its own /proc environ
    await assert_unharmed(isolation)


async def test_cancelling_a_run_kills_the_code():
    import asyncio

    task = asyncio.create_task(run(tool("auto", timeout_s=30), "import time\ntime.sleep(30)"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not descendants(os.getpid()):
        await asyncio.sleep(0.05)
    assert descendants(os.getpid()), "the sandbox never started"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert descendants(os.getpid()) == []


async def test_sandbox_processes_die_with_the_tool_process(tmp_path):
    if not namespaces_available():
        pytest.skip("without namespaces there is no init to take the code down (see docs/sandbox.md)")
    # The tool's own process is SIGKILLed mid-run: the launcher's watchdog must still end the namespace.
    script = ("import asyncio, sys\nfrom toolorchestra.tools.python_sandbox import PythonTool\n"
              "asyncio.run(PythonTool(timeout_s=1, isolation='auto').run({'code': 'import time\\n"
              "time.sleep(120)'}, None))")
    # Its temp dir goes under tmp_path: a killed tool cannot remove its working dir, pytest will.
    host = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(descendants(host.pid)) < 3:  # launcher, init, code
            time.sleep(0.05)
        sandbox_pids = descendants(host.pid)
        assert sandbox_pids, "the sandbox never started"
        host.send_signal(signal.SIGKILL)
        host.wait()
        deadline = time.monotonic() + 12  # timeout (1 s) + watchdog grace (5 s), rounded up generously
        while time.monotonic() < deadline and any(_alive(pid) for pid in sandbox_pids):
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in sandbox_pids)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"



# ------------------------------------------------------------------------------------- launcher path helpers


def test_closed_directories_are_found_for_hiding_and_the_uid_drop():
    from toolorchestra.tools import sandbox_launcher as launcher

    base = Path(tempfile.mkdtemp(prefix="sandbox-paths-"))  # under the temp dir, which anyone may enter
    try:
        base.chmod(0o755)
        inner = base / "closed" / "pkg" / "lib"
        inner.mkdir(parents=True)
        (base / "closed").chmod(0o700)
        opened = base / "open" / "lib"
        opened.mkdir(parents=True)
        assert launcher._first_closed_ancestor(str(inner)) == str(base / "closed")
        assert launcher._first_closed_ancestor(str(opened)) is None
        assert launcher._open_to_others(str(inner)) is False
        assert launcher._open_to_others(str(opened)) is True
        assert launcher._open_to_others(str(base / "missing")) is True  # nothing there to need
    finally:
        (base / "closed").chmod(0o755)
        shutil.rmtree(base)
    assert launcher._outermost(["/a/b", "/a", "/c/d", "/c/de"]) == ["/a", "/c/d", "/c/de"]
    assert launcher._within("/a/b", "/a") and not launcher._within("/ab", "/a")
