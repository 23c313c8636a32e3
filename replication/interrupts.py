"""Stopping a grid of subprocess runs promptly on Ctrl-C / SIGTERM.

A grid runs its training runs as subprocesses from a thread pool. Without care, Ctrl-C kills the
running runs (they share the terminal's process group) while the pool keeps starting the queued
ones, and SIGTERM (a notebook kernel stopped, ``kill``) leaves the children running. ``RunGuard``
fixes both:

    with RunGuard() as guard:                 # SIGINT and SIGTERM → GridInterrupted in the main thread
        ... pool.submit(job, guard) ...       # job: guard.run(cmd, ...) instead of subprocess.run
    # on the way out after a signal: queued jobs never start (guard.stopped), running children
    # get SIGTERM, then SIGKILL after ``grace_s``; finished runs and checkpoints stay on disk

A re-run of the grid then skips finished runs and resumes the killed ones from their checkpoints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any


class GridInterrupted(KeyboardInterrupt):
    """The grid was stopped by SIGINT/SIGTERM (a KeyboardInterrupt, so callers treat it as one)."""


class RunGuard:
    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self.stop = threading.Event()
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._previous: dict[int, Any] = {}

    # -- signals -----------------------------------------------------------------------------

    def __enter__(self) -> "RunGuard":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop.set()
        raise GridInterrupted(f"grid stopped by {signal.Signals(signum).name}")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None:
                self.terminate_all()
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            self._previous.clear()

    # -- children ----------------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    def run(self, cmd: list[str], **popen_kwargs: Any) -> int:
        """``subprocess.run`` that refuses to start after a stop and can be terminated."""
        with self._lock:
            if self.stop.is_set():
                raise GridInterrupted("grid stopped before this run started")
            proc = subprocess.Popen(cmd, **popen_kwargs)
            self._procs.add(proc)
        try:
            return proc.wait()
        finally:
            with self._lock:
                self._procs.discard(proc)

    def terminate_all(self) -> None:
        """Stop new starts; SIGTERM every running child, SIGKILL those alive after ``grace_s``."""
        with self._lock:
            self.stop.set()
            procs = list(self._procs)
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + self.grace_s
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def die_with_parent(parent_pid: int) -> None:
    """Exit when process ``parent_pid`` (our parent) dies, even if it was killed with -9: Linux
    sends us SIGKILL (PR_SET_PDEATHSIG via ctypes); a watchdog thread polling the parent pid
    covers other systems. Runs already written are safe: checkpoints are atomic."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watchdog").start()


# ----------------------------------------------------------------------------- stage process trees
#
# A DVC stage runs   dvc -> sh -c -> python -m replication stage -> papermill -> kernel -> trainers.
# DVC ignores SIGINT while a stage runs and, killed with -9, leaves its shell and everything below
# running (issue 18.1). The stage driver therefore (1) starts papermill in its own session with a
# parent-death signal, so papermill dies with the driver; the kernel exits when papermill goes (its
# parent poller, JPY_PARENT_PID) and the trainers when the kernel goes (``die_with_parent``);
# (2) watches the process that launched it — the nearest ancestor that is not a ``sh -c`` wrapper
# (for a DVC stage: dvc itself) — and takes the whole tree down when that process is gone.


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time in clock ticks, command name) from /proc, or None if gone/unknown."""
    try:
        raw = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")
    except OSError:
        return None
    comm = raw[raw.index("(") + 1: raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19]), comm


def _is_shell_wrapper(pid: int) -> bool:
    """``sh -c CMD`` / ``bash -c CMD``: a non-interactive shell that only runs our command."""
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        return False
    name = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
    return name.lstrip("-") in {"sh", "bash", "dash", "zsh", "ksh", "fish"} and b"-c" in argv[1:]


def launcher_pid() -> int:
    """The process this one works for: the parent, or, above ``sh -c`` wrappers, the first real one."""
    pid = os.getppid()
    for _ in range(8):
        info = _stat(pid)
        if info is None or pid <= 1 or not _is_shell_wrapper(pid):
            break
        pid = info[0]
    return pid


class ProcessIdentity:
    """A pid plus its start time, so a recycled pid is not mistaken for the same process."""

    def __init__(self, pid: int) -> None:
        info = _stat(pid)
        self.pid, self.start = pid, (info[1] if info else None)

    def alive(self) -> bool:
        if self.start is None:  # no /proc: fall back to signal 0
            try:
                os.kill(self.pid, 0)
                return True
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
        info = _stat(self.pid)
        return info is not None and info[1] == self.start and not _zombie(self.pid)


def _zombie(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")
    except OSError:
        return True
    return state[state.rindex(")") + 2:].split()[0] in ("Z", "X")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first), from /proc; empty where /proc is missing."""
    children: dict[int, list[int]] = {}
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for p in entries:
        info = _stat(p)
        if info is not None:
            children.setdefault(info[0], []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(root: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM ``root`` and every process below it (snapshot taken first: a child whose parent dies
    is re-parented and would drop out of the tree), then SIGKILL whatever is alive after ``grace_s``."""
    procs = [ProcessIdentity(p) for p in [root.pid, *descendants(root.pid)]]
    for p in procs:
        if p.alive():
            with _quiet():
                os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.alive() for p in procs):
        root.poll()
        time.sleep(0.1)
    for p in procs:
        if p.alive():
            with _quiet():
                os.kill(p.pid, signal.SIGKILL)
    with _quiet():
        root.wait(timeout=5)


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return exc_type is not None and issubclass(exc_type, (ProcessLookupError, PermissionError,
                                                              subprocess.TimeoutExpired))


def _pdeathsig_kill() -> None:  # preexec_fn: runs in the child between fork and exec
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def spawn_bound(cmd: list[str], **popen_kwargs: Any) -> subprocess.Popen:
    """Start ``cmd`` in its own session (the terminal's Ctrl-C reaches only us; we stop it) and
    SIGKILLed by the kernel if this process dies (Linux; elsewhere the watchdog below covers it).
    Call before starting threads: preexec_fn after fork is only safe in a single-threaded parent."""
    kw: dict[str, Any] = {"start_new_session": True}
    if sys.platform.startswith("linux"):
        kw["preexec_fn"] = _pdeathsig_kill
    return subprocess.Popen(cmd, **kw, **popen_kwargs)


def watch_launcher(on_gone: Any, interval_s: float = 0.5) -> ProcessIdentity:
    """Call ``on_gone()`` (from a daemon thread) once the launcher (``launcher_pid``) has died."""
    launcher = ProcessIdentity(launcher_pid())

    def watch() -> None:
        while launcher.alive():
            time.sleep(interval_s)
        on_gone()

    threading.Thread(target=watch, daemon=True, name="launcher-watchdog").start()
    return launcher
