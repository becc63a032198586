"""The process side of the `python` tool's sandbox.

toolorchestra.tools.python_sandbox runs it as `python -I -S -c LAUNCHER_STUB TOOLS_DIR CONFIG_JSON`, with the
user's code on stdin and a pipe on the fd named in the config for status reports (JSON lines). It is stdlib-only
because it runs without site-packages, and it imports only what it uses (typing alone would cost 15 ms a call).
It owns the isolation; the tool owns timeouts, output and reporting. Layers, preferred first:

namespaces  unshare() new mount, net, pid, ipc and uts namespaces (plus a user namespace when not root).
            The net namespace has only a loopback that is down: no network at all. The mount namespace is made
            read-only recursively; the working dir is a fresh size-limited tmpfs, /dev/shm another; directories
            the sandbox must not see (root's home, any directory others cannot enter) are covered by an empty
            tmpfs with only the interpreter's own paths bound back. The code runs as pid 2 under a tiny init
            (pid 1): when the code's main process exits or the init is killed, the kernel kills every process
            left in the namespace. As root the code runs under a dedicated uid (so RLIMIT_NPROC applies to it,
            which it never does to root) with no capabilities and no_new_privs. A seccomp filter refuses
            AF_UNIX sockets (a host socket reachable by path) and io_uring. The init also watches memory: the
            call's processes together may hold at most memory_mb (summed resident anonymous memory, and the
            call's memory cgroup where the tool could make one); over it, the init kills them all.
fallback    when unshare() is refused: rlimits as above, the memory cgroup if any, the seccomp filter, plus an
            audit hook installed before the user code that refuses sockets, process creation, ctypes and writes
            outside the working dir. A best-effort guard against accidents, not a security boundary (see
            docs/sandbox.md). It never runs the code as root: as root it drops to a dedicated uid or refuses.

With `--guard WORKDIR` instead of the config, the same module is the fallback's wrapper of the user code.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # type checkers only: importing typing at run time costs more than the rest of the launcher
    import ctypes
    from collections.abc import Callable
    from typing import Any, NoReturn

# Run by the tool with `python -I -S -c LAUNCHER_STUB TOOLS_DIR ...`: importing (not running) this file lets
# Python reuse its cached bytecode; the tools dir leaves sys.path again before any user code runs.
LAUNCHER_STUB = (
    "import sys; sys.path.insert(0, sys.argv[1]); import sandbox_launcher; del sys.path[0]; "
    "sys.exit(sandbox_launcher.main(sys.argv[2:]))"
)

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# seccomp: (audit arch, socket(2) number) of the architectures we know; io_uring's three calls are numbered the
# same everywhere (it could open and connect a socket without passing through socket(2)).
SECCOMP_ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
IO_URING_CALLS = (425, 426, 427)
X32_SYSCALL_BIT = 0x40000000
AF_UNIX = 1
EAFNOSUPPORT = 97
ENOSYS = 38

# How often the namespace init checks the call's memory. A fast allocator can overshoot by what it touches in
# this time; the memory cgroup (where there is one) is the hard bound, this is the bound everywhere else.
MEMORY_POLL_S = 0.02

# mount_setattr(2) has the same number on every architecture that postdates the syscall table unification.
SYS_MOUNT_SETATTR = 442
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1

# A dedicated uid per run: far above any real account, offset by the launcher's (host) pid so concurrent runs
# never share a uid and so never share an RLIMIT_NPROC count. 65534 (nobody) is the fallback where the high
# range is not mapped (root inside a container's user namespace).
SANDBOX_UID_BASE = 1_500_000_000
NOBODY_UID = 65534

SETUP_FAILED_EXIT = 125

_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    """libc, loaded on first use (never in the fallback's guard, which must not hand the user a loaded CDLL)."""
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


class SetupError(Exception):
    """The sandbox could not be built; the message says which step failed."""


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    import ctypes

    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    import ctypes

    def encode(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    result = _libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount {fstype or source} on {target}")


def make_tree_readonly(path: str) -> None:
    """Every mount at and below path becomes read-only (in this mount namespace only)."""
    import ctypes

    class MountAttr(ctypes.Structure):  # struct mount_attr of <linux/mount.h>
        _fields_ = [
            ("attr_set", ctypes.c_uint64),
            ("attr_clr", ctypes.c_uint64),
            ("propagation", ctypes.c_uint64),
            ("userns_fd", ctypes.c_uint64),
        ]

    attr = MountAttr(attr_set=MOUNT_ATTR_RDONLY)
    result = _libc().syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(result, f"mount_setattr read-only {path}")


def prctl(option: int, value: int, pointer: Any = None, what: str = "") -> None:
    """prctl(2) with `value` and, when given, `pointer` (a ctypes reference) as its second and third arguments."""
    import ctypes

    third = ctypes.c_ulong(0) if pointer is None else pointer
    result = _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(value), third, ctypes.c_ulong(0), ctypes.c_ulong(0))
    _check(result, what or f"prctl {option}")


class Status:
    """JSON lines to the tool; each line is merged into one report by the reader."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_inheritable(fd, False)  # the user's program never gets it

    def send(self, **fields: Any) -> None:
        import json

        try:
            os.write(self.fd, (json.dumps(fields) + "\n").encode())
        except OSError:
            pass  # the tool has gone; nothing left to report to


# --------------------------------------------------------------------------------------------- entry point


def main(args: list[str]) -> int:
    """args: [CONFIG_JSON] to build a sandbox and run the code from stdin, or ["--guard", WORKDIR]."""
    if len(args) == 2 and args[0] == "--guard":
        return guard_and_run(args[1])
    import json

    config = json.loads(args[0])
    status = Status(int(config["status_fd"]))
    if config.get("cgroup"):
        _join_cgroup(config["cgroup"], status)
    code = sys.stdin.buffer.read()
    _stdin_from_devnull()
    os.umask(0o022)
    try:
        if config["mode"] != "fallback":
            identity = _enter_namespaces(config, status)
            if identity is not None:
                return _supervise(config, identity, code, status)
            if config["mode"] == "namespaces":
                raise SetupError("isolation='namespaces' was asked for but unshare() was refused")
        _exec_fallback(config, code, status)
    except SetupError as exc:
        status.send(setup_error=str(exc))
    return SETUP_FAILED_EXIT


def _join_cgroup(cgroup: dict[str, str], status: Status) -> None:
    """Move this launcher into the call's memory cgroup (made by the tool): every process it starts is in it."""
    try:
        _write_file(os.path.join(cgroup["path"], "cgroup.procs"), str(os.getpid()))
    except OSError as exc:  # the watch in the namespace init still bounds the call
        status.send(cgroup_error=f"joining {cgroup['path']}: {exc}")


def _stdin_from_devnull() -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _run_child(body: Callable[[], None], status: Status) -> NoReturn:
    """A forked child never returns into its parent's code; a failure is reported, not raised."""
    try:
        body()
        os._exit(0)
    except BaseException as exc:  # the report is all the tool gets; no traceback on the user's stderr
        status.send(setup_error=f"{type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED_EXIT)


# ------------------------------------------------------------------------------------------------ namespaces


def _enter_namespaces(config: dict[str, Any], status: Status) -> str | None:
    """'root' or 'userns' when the namespaces were entered; None (with the reason reported) when refused."""
    uid, gid = os.geteuid(), os.getegid()
    try:
        unshare(NAMESPACES if uid == 0 else CLONE_NEWUSER | NAMESPACES)
    except OSError as exc:
        config["namespace_error"] = str(exc)
        status.send(namespace_error=str(exc))
        return None
    if uid == 0:
        return "root"
    try:  # map our own ids only: inside, the code is the same unprivileged user and loses all caps at exec
        _write_file("/proc/self/setgroups", "deny")
        _write_file("/proc/self/uid_map", f"{uid} {uid} 1")
        _write_file("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        raise SetupError(f"user namespace id map: {exc}") from None
    return "userns"


def _write_file(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _supervise(config: dict[str, Any], identity: str, code: bytes, status: Status) -> int:
    """Outer process: start the namespace's init and wait for it, with a watchdog in case the tool died."""
    host_pid = os.getpid()
    init_pid = os.fork()
    if init_pid == 0:
        _run_child(lambda: _namespace_init(config, identity, host_pid, code, status), status)
    # Backstop for a tool that was itself killed: the init dies, and with it the whole namespace.
    signal.signal(signal.SIGALRM, lambda *_: os.kill(init_pid, signal.SIGKILL))
    signal.alarm(int(config["watchdog_s"]))
    _, wait_status = os.waitpid(init_pid, 0)
    signal.alarm(0)
    if os.WIFSIGNALED(wait_status):
        status.send(init_killed=os.WTERMSIG(wait_status))
        return 128 + os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def _namespace_init(config: dict[str, Any], identity: str, host_pid: int, code: bytes, status: Status) -> None:
    """pid 1 of the new pid namespace: build the filesystem, run the code as pid 2, watch the memory of all the
    call's processes, report how it ended."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    watch = MemoryWatch(int(config["limits"]["memory_mb"]), config.get("cgroup"))
    layers = _setup_filesystem(config, identity)
    layers["memory"] = watch.layer
    # SIGCHLD stays blocked here so the init can sleep in sigtimedwait and wake at once when a child ends;
    # the code's process unblocks it before exec.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    user_pid = os.fork()
    if user_pid == 0:
        _run_child(lambda: _exec_user_code(config, identity, host_pid, code, status, fallback=False), status)
    wait_status, over = _reap_and_watch(user_pid, watch)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    ended: dict[str, Any] = {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "layers": layers,
        "peak_memory_mb": round(watch.peak / 2**20, 1),
    }
    if over:
        ended["memory_exceeded"] = over
    if os.WIFSIGNALED(wait_status):
        status.send(signal=os.WTERMSIG(wait_status), **ended)
    else:
        status.send(exit=os.WEXITSTATUS(wait_status), **ended)
    # Returning kills whatever the code left running: the kernel ends a pid namespace with its init.


def _reap_and_watch(user_pid: int, watch: MemoryWatch) -> tuple[int, str | None]:
    """As pid 1 we inherit every orphan: reap them all until the code's main process ends. Between reaps,
    check the call's memory; over the limit, SIGKILL every process of the namespace (kill(-1) from its init)."""
    over: str | None = None
    while True:
        while True:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid == user_pid:
                return wait_status, over
        if over is None:
            over = watch.exceeded()
            if over is not None:
                os.kill(-1, signal.SIGKILL)
                continue
        signal.sigtimedwait({signal.SIGCHLD}, MEMORY_POLL_S)


class MemoryWatch:
    """The memory of all the call's processes together against one limit: the summed resident anonymous memory
    of every process in the pid namespace (our /proc shows only those), and the kernel's OOM count of the
    call's memory cgroup where there is one (its limit is the hard bound; this catches its OOM kills)."""

    def __init__(self, memory_mb: int, cgroup: dict[str, str] | None) -> None:
        self.limit = memory_mb * 2**20
        self.peak = 0
        self.oom_file: str | None = None
        self.layer = "rss-watch"
        if cgroup:
            self.oom_file = cgroup_oom_file(cgroup)
            self.layer = f"cgroup-{cgroup['version']}+rss-watch"

    def exceeded(self) -> str | None:
        total = sum(_anon_rss(pid) for pid in _namespace_pids())
        self.peak = max(self.peak, total)
        if total > self.limit:
            return f"the call's processes together held {total // 2**20} MB"
        if self.oom_file and cgroup_oom_kills(self.oom_file):
            return "the kernel's OOM killer fired in the call's memory cgroup"
        return None


def cgroup_oom_file(cgroup: dict[str, str]) -> str:
    return os.path.join(cgroup["path"], "memory.events" if cgroup["version"] == "v2" else "memory.oom_control")


def cgroup_oom_kills(path: str) -> int:
    """The oom_kill count of a memory cgroup (memory.events in v2, memory.oom_control in v1); 0 if unreadable."""
    try:
        with open(path) as handle:
            for line in handle:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _namespace_pids() -> list[int]:
    """Every process of this pid namespace but its init, from /proc: ours when it is private, else (a host
    /proc) the tree below this process, where every orphan of the namespace lands too."""
    if os.readlink("/proc/self") == "1":
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and entry != "1"]
    found, frontier = [], [os.getpid()]
    while frontier:
        pid = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    below = [int(child) for child in handle.read().split()]
            except OSError:
                continue
            found += below
            frontier += below
    return found


def _anon_rss(pid: int) -> int:
    """Resident anonymous memory of one process in bytes (0 if it is gone). Pages shared after a fork count
    once per process: an overestimate, which errs on the host's side."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _setup_filesystem(config: dict[str, Any], identity: str) -> dict[str, str]:
    workdir = config["workdir"]
    limits = config["limits"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do here propagates back to the host
    hidden = _hide_directories(config, identity)
    os.makedirs(workdir, mode=0o700, exist_ok=True)  # in case it lay under a hidden directory
    make_tree_readonly("/")
    size = f"size={int(limits['workspace_mb'])}m"
    mount("tmpfs", workdir, "tmpfs", MS_NOSUID | MS_NODEV, f"{size},mode=0700")
    if os.path.isdir("/dev/shm"):  # multiprocessing's semaphores live there
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"{size},mode=1777")
    layers = {
        "isolation": "namespaces",
        "network": "netns",
        "filesystem": "mountns-readonly",
        "processes": "rlimit-nproc-uid" if identity == "root" else "rlimit-nproc-userns",
        "kill": "pidns",
        "hidden": ",".join(hidden),
    }
    try:  # a /proc of our own pid namespace: no other process is visible
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
        layers["proc"] = "private"
    except OSError as exc:  # refused in some containers; other processes' /proc files stay owner-only
        layers["proc"] = f"host ({exc})"
    return layers


def _hide_directories(config: dict[str, Any], identity: str) -> list[str]:
    """Cover the directories the code must not see with an empty tmpfs, binding back the interpreter's paths.

    As root the code runs under a uid that cannot enter a directory like /root (0700) even when the interpreter
    or the working dir lies below it; as a normal user the code could read the user's home (keys, tokens). All
    are covered; the working dir is recreated inside the cover by the caller.
    """
    needed = _existing_dirs(config["needed_paths"])
    candidates = [config["home"]] if config.get("home") else []
    if identity == "root":
        candidates += [_first_closed_ancestor(path) for path in needed]
        candidates.append(_first_closed_ancestor(os.path.dirname(config["workdir"])))
    hidden = _outermost([path for path in candidates if path and path != "/" and os.path.isdir(path)])
    for top in hidden:
        inside = _outermost([path for path in needed if _within(path, top)])
        handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in inside}
        mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for path, handle in handles.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
            os.close(handle)
    return hidden


def _existing_dirs(paths: list[str]) -> list[str]:
    dirs = set()
    for path in paths:
        real = os.path.realpath(path)
        if os.path.isfile(real):
            real = os.path.dirname(real)
        if os.path.isdir(real):
            dirs.add(real)
    return sorted(dirs)


def _first_closed_ancestor(path: str) -> str | None:
    """The outermost directory on the way to path that others may not enter, if any."""
    current = "/"
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & 0o001:
            return current
    return None


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _outermost(paths: list[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_within(path, outer) for outer in kept):
            kept.append(path)
    return kept


# ------------------------------------------------------------------------------------------- the user's code


def _exec_user_code(
    config: dict[str, Any], identity: str | None, host_pid: int, code: bytes, status: Status, fallback: bool
) -> NoReturn:
    """Limits, identity, then exec the interpreter on main.py in the working dir. identity 'root' drops to a
    dedicated uid; otherwise the code keeps the launcher's uid (in a user namespace, without capabilities)."""
    workdir = config["workdir"]
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # the init's blocked SIGCHLD is not the code's business
    _set_limits(config["limits"])
    if identity == "root":
        uid = _become_sandbox_user(workdir, host_pid)
        status.send(uid=uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # no setuid binary or file capability can raise privileges again
    status.send(seccomp=install_seccomp_filter())
    os.chdir(workdir)
    with open("main.py", "wb") as script:
        script.write(code)
    python = config["python"]
    if fallback:
        argv = [python, "-I", "-c", LAUNCHER_STUB, os.path.dirname(config["launcher"]), "--guard", workdir]
    else:
        argv = [python, "-I", "main.py"]
    os.execve(python, argv, dict(os.environ))


def install_seccomp_filter() -> str:
    """Refuse socket(AF_UNIX, ...) with EAFNOSUPPORT, and io_uring and foreign-ABI system calls with ENOSYS, for this
    process and all it starts. The network namespace does not cover a Unix socket reached by a filesystem path
    (a host daemon's socket in /tmp or /run); without AF_UNIX sockets nothing can connect to one.
    socketpair() stays allowed (multiprocessing's pipes use it). Returns the layer's name for the report."""
    import ctypes

    known = SECCOMP_ARCHES.get(os.uname().machine)
    if known is None:
        return "none (unknown architecture)"
    arch, socket_nr = known
    allow, refuse_unix, no_such_call = 0x7FFF0000, 0x00050000 | EAFNOSUPPORT, 0x00050000 | ENOSYS
    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    # (code, jump if true, jump if false, k); jumps count instructions skipped after this one.
    program = [
        (load, 0, 0, 4),  # 0: arch
        (jump_eq, 1, 0, arch),  # 1: native ABI? go on : refuse
        (ret, 0, 0, no_such_call),  # 2
        (load, 0, 0, 0),  # 3: syscall number
        (jump_ge, 5, 0, X32_SYSCALL_BIT),  # 4: x32 ABI -> refuse (10)
        (jump_eq, 4, 0, IO_URING_CALLS[0]),  # 5
        (jump_eq, 3, 0, IO_URING_CALLS[1]),  # 6
        (jump_eq, 2, 0, IO_URING_CALLS[2]),  # 7
        (jump_eq, 2, 0, socket_nr),  # 8: socket() -> 11, else allow (9)
        (ret, 0, 0, allow),  # 9
        (ret, 0, 0, no_such_call),  # 10
        (load, 0, 0, 16),  # 11: low half of args[0], the address family
        (jump_eq, 0, 1, AF_UNIX),  # 12
        (ret, 0, 0, refuse_unix),  # 13
        (ret, 0, 0, allow),  # 14
    ]

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(program))(*[SockFilter(*instruction) for instruction in program])
    fprog = SockFprog(len(program), filters)
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), "seccomp filter")
    return "no-unix-sockets,no-io-uring"


def _set_limits(limits: dict[str, Any]) -> None:
    mib = 1024 * 1024
    cpu_s = int(limits["cpu_s"])
    # The soft CPU limit sends SIGXCPU (reported as such); the hard one a SIGKILL a second later.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    memory = int(limits["memory_mb"]) * mib
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    file_size = int(limits["max_file_mb"]) * mib
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    procs = int(limits["max_procs"])
    resource.setrlimit(resource.RLIMIT_NPROC, (procs, procs))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _become_sandbox_user(workdir: str, host_pid: int) -> int:
    """Give the working dir to a dedicated uid and become it; returns the uid."""
    last_error: OSError | None = None
    for uid in (SANDBOX_UID_BASE + host_pid, NOBODY_UID):
        try:
            os.chown(workdir, uid, uid)
        except OSError as exc:  # EINVAL: uid not mapped in this (container's) user namespace
            last_error = exc
            continue
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root to a non-zero uid: every capability is dropped
        return uid
    raise SetupError(f"no usable sandbox uid: {last_error}")


# -------------------------------------------------------------------------------------------------- fallback


def _exec_fallback(config: dict[str, Any], code: bytes, status: Status) -> NoReturn:
    """No namespaces: rlimits, the audit-hook guard, and never root: as root, a dedicated uid, which must be able
    to use the interpreter; where it cannot, the run is refused rather than run as root."""
    as_root = os.geteuid() == 0
    if as_root:
        closed = [path for path in config["needed_paths"] if not _open_to_others(path)]
        if closed:
            raise SetupError(fallback_refusal(config["python"], closed[0], config.get("namespace_error")))
    cgroup = config.get("cgroup")
    status.send(
        layers={
            "isolation": "fallback",
            "network": "audit-hook+seccomp",
            "filesystem": "uid+audit-hook" if as_root else "audit-hook",
            "processes": "audit-hook",
            "kill": "process-group",
            "memory": f"cgroup-{cgroup['version']}+rlimit-as" if cgroup else "rlimit-as",
        }
    )
    _exec_user_code(config, "root" if as_root else None, os.getpid(), code, status, fallback=True)


def fallback_refusal(python: str, closed: str, namespace_error: str | None) -> str:
    why = f" (unshare() was refused: {namespace_error})" if namespace_error else ""
    return (
        f"refusing to run the code as root: the fallback isolation{why} drops root to an unprivileged uid, "
        f"but that uid cannot use the interpreter {python} because {closed} (or a directory above it) is "
        f"closed to other users. Get namespaces instead (isolation 'auto' or 'namespaces': root may call "
        f"unshare() unless a container's seccomp profile forbids it, e.g. run the container with "
        f"--security-opt seccomp=unconfined or --privileged; a normal user needs unprivileged user "
        f"namespaces, sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0), or run "
        f"the tool with a Python installed where other users can read it (e.g. /usr or /opt), or as a "
        f"non-root user"
    )


def _open_to_others(path: str) -> bool:
    """Whether an unrelated uid can reach path (every directory on the way enterable, the path readable)."""
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return True
    current = "/"
    for part in real.strip("/").split("/"):
        current = os.path.join(current, part)
        mode = os.stat(current).st_mode
        needed = 0o005 if os.path.isdir(current) else 0o004
        if mode & needed != needed:
            return False
    return True


NETWORK_EVENTS = {
    "socket.connect",
    "socket.bind",
    "socket.sendto",
    "socket.sendmsg",
    "socket.getaddrinfo",
    "socket.gethostbyname",
    "socket.gethostbyaddr",
    "socket.getnameinfo",
}
PROCESS_EVENTS = {
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.exec",
    "os.system",
    "subprocess.Popen",
    "os.kill",
    "os.killpg",
    "ctypes.dlopen",
    "ctypes.dlsym",
}
PATH_WRITE_EVENTS = {
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "os.setxattr",
    "os.removexattr",
    "os.rename",
    "shutil.rmtree",
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def guard_and_run(workdir: str) -> int:
    """Fallback wrapper: install the audit hook, then run main.py as __main__ with launcher frames hidden."""
    import runpy

    workdir = os.path.realpath(workdir)
    sys.addaudithook(_make_audit_hook(workdir))  # cannot be removed once added
    sys.argv = ["main.py"]
    try:
        runpy.run_path("main.py", run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:
        import traceback

        # Show the traceback as a plain `python main.py` would: without runpy's and this guard's frames.
        frames = list(traceback.extract_tb(exc.__traceback__))
        first_user_frame = next((index for index, frame in enumerate(frames) if frame.filename == "main.py"), 0)
        frames = [frame for frame in frames[first_user_frame:] if frame.filename != __file__]
        sys.stderr.write(
            "Traceback (most recent call last):\n"
            + "".join(traceback.format_list(frames))
            + "".join(traceback.format_exception_only(type(exc), exc))
        )
        return 1
    return 0


def _make_audit_hook(workdir: str) -> Callable[[str, tuple[Any, ...]], None]:
    import socket

    allowed_files = {os.devnull, "/dev/stdout", "/dev/stderr"}

    def outside(path: Any) -> bool:
        if isinstance(path, int) or path is None:
            return False  # an fd the process already holds
        text = os.fsdecode(os.fspath(path))
        real = os.path.realpath(os.path.join(os.getcwd(), text))
        return real not in allowed_files and not _within(real, workdir)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event in NETWORK_EVENTS or (event == "socket.__new__" and args[1] != socket.AF_UNIX):
            raise PermissionError(f"sandbox: network access is disabled ({event})")
        if event in PROCESS_EVENTS and not (event == "os.kill" and args[0] == os.getpid()):
            raise PermissionError(f"sandbox: starting or signalling processes is disabled ({event})")
        if event == "open" and _other_process_file(args[0]):
            raise PermissionError(f"sandbox: reading other processes' files is disabled ({args[0]})")
        if event == "open" and _opens_for_write(args) and outside(args[0]):
            raise PermissionError(f"sandbox: writing outside the working directory is disabled ({args[0]})")
        if event in PATH_WRITE_EVENTS and any(outside(arg) for arg in _path_args(event, args)):
            raise PermissionError(f"sandbox: writing outside the working directory is disabled ({event})")

    return hook


def _other_process_file(path: Any) -> bool:
    """/proc/<pid>/... of another process: its environ may hold the tool's API keys (we may still be root)."""
    if isinstance(path, int) or path is None:
        return False
    parts = os.path.realpath(os.fsdecode(os.fspath(path))).split("/")
    return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and parts[2] != str(os.getpid())


def _opens_for_write(args: tuple[Any, ...]) -> bool:
    _, mode, flags = args
    if isinstance(flags, int) and flags & WRITE_FLAGS:
        return True
    return isinstance(mode, str) and any(letter in mode for letter in "wax+")


def _path_args(event: str, args: tuple[Any, ...]) -> list[Any]:
    if event in {"os.rename", "os.link", "os.symlink"}:
        return [args[0], args[1]] if event != "os.symlink" else [args[1]]
    return [args[0]]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
