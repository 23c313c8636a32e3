"""The verifier's pool of math-verify worker processes: scheduling samples onto workers under a
per-sample deadline, killing a worker past it, replacing dead workers (a warm spare makes a
restart cheap) and retrying a dead worker's sample once. ``MathVerifier`` (math_reward.py)
decides which samples need a worker at all."""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from multiprocessing.connection import wait
from typing import Any

from replication.tasks.math_verify_worker import _Worker


class VerifierWorkerPool:
    """Workers for the samples that need math-verify, sized by ``config.num_workers`` and limited
    by ``config.time_limit_s`` per sample and ``config.worker_memory_mb`` per process.

    ``close()`` (or a ``with`` block) stops the workers; they also exit when this process dies,
    busy or idle (``replication.interrupts.die_with_parent``). Dead workers are replaced at any
    time and their sample retried once (``_after_death``).
    """

    startup_timeout_s = 120.0
    """A worker that has not imported math-verify by then is an installation problem."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._spare: _Worker | None = None
        self.stats = {"fast": 0, "worker": 0, "timeouts": 0, "crashes": 0, "retries": 0,
                      "crash_wrong": 0}

    def close(self) -> None:
        with self._lock:
            for w in self._workers + ([self._spare] if self._spare else []):
                w.kill()
            self._workers, self._spare = [], None

    def __enter__(self) -> "VerifierWorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            for w in self._workers + ([self._spare] if self._spare else []):
                w.kill()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- scheduling ----------------------------------------------------------------------------

    def _run(self, jobs: list[tuple[int, str, str, bool]]) -> dict[int, bool]:
        """Run jobs on the workers; a job past its deadline kills its worker (result: False).

        A worker that dies (at start-up, idle or busy: OOM killer, segfault, kill -9) is replaced
        and its sample retried once on a fresh worker; a sample that kills two workers in a row is
        scored incorrect with a warning naming it (never silently)."""
        limit = self.config.time_limit_s
        while len(self._workers) < min(self.config.num_workers, len(jobs)):
            self._workers.append(_Worker(self.config.worker_memory_mb))
        by_index = {job[0]: job for job in jobs}
        attempts: dict[int, int] = {}
        pending = deque(jobs)
        results: dict[int, bool] = {}
        while pending or any(w.job is not None for w in self._workers):
            now = time.monotonic()
            for w in self._workers:
                if w.ready and w.job is None and pending:
                    job = pending.popleft()
                    w.job, w.deadline = job[0], now + limit
                    self.stats["worker"] += 1
                    try:
                        w.writer.send(job)
                    except OSError:
                        pass  # a dead worker shows up as EOF below
            waits = [w.deadline if w.ready else w.started + self.startup_timeout_s
                     for w in self._workers if w.job is not None or not w.ready]
            timeout = max(0.0, min(waits) - time.monotonic()) if waits else 0.0
            ready = wait([w.reader for w in self._workers], timeout=timeout)
            for k, w in enumerate(self._workers):
                if w.reader in ready:
                    try:
                        job, ok = w.reader.recv()
                    except (EOFError, OSError):  # died: segfault, OOM kill, failed start
                        self._workers[k] = self._after_death(w, by_index, attempts, pending, results)
                        continue
                    if job == "ready":
                        w.ready = True
                        self._startup_failures = 0
                    elif job == w.job:
                        results[job], w.job = bool(ok), None
                elif w.job is not None and time.monotonic() >= w.deadline:
                    results[w.job] = False
                    self._workers[k] = self._replace(w, crashed=False)
                elif not w.ready and time.monotonic() >= w.started + self.startup_timeout_s:
                    raise RuntimeError(f"a math-verify worker did not start within "
                                       f"{self.startup_timeout_s:.0f} s")
        return results

    max_startup_failures = 3
    """Consecutive workers dying before they are ready: then it is the installation, not bad luck."""
    _startup_failures = 0

    def _after_death(self, w: _Worker, by_index: dict, attempts: dict[int, int], pending: deque,
                     results: dict[int, bool]) -> _Worker:
        """Replace a dead worker; retry its sample once (front of the queue)."""
        code = w.proc.poll()
        if not w.ready:
            self._startup_failures += 1
            if self._startup_failures >= self.max_startup_failures:
                w.kill()
                raise RuntimeError(
                    f"{self._startup_failures} math-verify workers in a row exited during start-up "
                    f"(last exit code {code}); check that `python -c 'import math_verify'` works")
        if w.job is not None:
            i = w.job
            attempts[i] = attempts.get(i, 0) + 1
            if attempts[i] <= 1:
                pending.appendleft(by_index[i])
                self.stats["retries"] = self.stats.get("retries", 0) + 1
            else:
                results[i] = False
                self.stats["crash_wrong"] = self.stats.get("crash_wrong", 0) + 1
                warnings.warn(f"math-verify worker died twice on the same sample (exit code {code}); "
                              f"scored incorrect: answer {by_index[i][1][:80]!r} vs gold "
                              f"{by_index[i][2][:80]!r}", RuntimeWarning, stacklevel=3)
            w.job = None
        return self._replace(w, crashed=True)

    def _replace(self, worker: _Worker, crashed: bool) -> _Worker:
        """Kill a worker; its successor is the warm spare (a restart then costs no import). A dead
        spare is dropped, never handed out."""
        self.stats["crashes" if crashed else "timeouts"] += 1
        worker.kill()
        successor = self._spare
        if successor is None or successor.proc.poll() is not None:
            if successor is not None:
                successor.kill()
            successor = _Worker(self.config.worker_memory_mb)
        self._spare = _Worker(self.config.worker_memory_mb)
        return successor
