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
