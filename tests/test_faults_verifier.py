"""Fault injection on the math-verify worker processes (issue 11, point 4): workers killed at
start-up, while idle and while busy; workers whose parent is killed; a sample that kills every
worker. A worker fault never silently scores an answer wrong."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("math_verify")

from replication.tasks import math_reward as mr  # noqa: E402
from replication.tasks.math_reward import MathRewardConfig, MathVerifier  # noqa: E402

from proc_helpers import alive, wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Needs a worker (no exact-string match): 2/4 == 0.5 only after parsing.
NEEDS_WORKER = (["\\boxed{\\frac{2}{4}}"], ["0.5"])
CFG = MathRewardConfig(time_limit_s=30.0)  # generous: these tests are about crashes, not time


def _wait_dead(pid: int, timeout: float = 20.0) -> bool:
    return wait_until(lambda: not alive(pid), timeout, poll=0.1)


def test_idle_worker_killed_is_replaced_and_answer_still_right():
    with MathVerifier(CFG) as v:
        assert v.is_correct(*NEEDS_WORKER).tolist() == [True]
        w = v._workers[0]
        os.kill(w.proc.pid, signal.SIGKILL)  # e.g. the OOM killer, while idle
        w.proc.wait()
        assert v.is_correct(*NEEDS_WORKER).tolist() == [True]
        assert v.stats["crashes"] >= 1


class _KillOnSend:
    """Wraps a worker's writer: after the job is sent, SIGKILL the worker (busy death)."""

    def __init__(self, worker, every: bool) -> None:
        self.worker, self.inner, self.every, self.fired = worker, worker.writer, every, False

    def send(self, obj) -> None:
        self.inner.send(obj)
        if self.every or not self.fired:
            self.fired = True
            os.kill(self.worker.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        self.inner.close()


def _patch_workers(monkeypatch, first_n: int | None, mode: str) -> None:
    """The first ``first_n`` workers (all if None) die: at start-up or when handed a job."""
    real_init = mr._Worker.__init__
    made = {"n": 0}

    def init(self, memory_mb):
        real_init(self, memory_mb)
        made["n"] += 1
        if first_n is None or made["n"] <= first_n:
            if mode == "startup":
                os.kill(self.proc.pid, signal.SIGKILL)
            else:
                self.writer = _KillOnSend(self, every=True)

    monkeypatch.setattr(mr._Worker, "__init__", init)


def test_worker_dying_at_startup_is_replaced(monkeypatch):
    _patch_workers(monkeypatch, 1, "startup")
    with MathVerifier(CFG) as v:
        assert v.is_correct(*NEEDS_WORKER).tolist() == [True]
        assert v.stats["crashes"] == 1


def test_every_worker_dying_at_startup_is_a_clear_error(monkeypatch):
    _patch_workers(monkeypatch, None, "startup")
    with MathVerifier(CFG) as v:
        with pytest.raises(RuntimeError, match="in a row exited during start-up"):
            v.is_correct(*NEEDS_WORKER)


def test_busy_worker_killed_sample_is_retried(monkeypatch):
    _patch_workers(monkeypatch, 1, "busy")
    with MathVerifier(CFG) as v:
        assert v.is_correct(*NEEDS_WORKER).tolist() == [True]
        assert v.stats["retries"] == 1 and v.stats["crash_wrong"] == 0


def test_sample_killing_two_workers_is_wrong_loudly(monkeypatch):
    _patch_workers(monkeypatch, None, "busy")
    with MathVerifier(CFG) as v:
        with pytest.warns(RuntimeWarning, match="died twice on the same sample"):
            assert v.is_correct(*NEEDS_WORKER).tolist() == [False]
        assert v.stats["crash_wrong"] == 1


PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from replication.tasks.math_reward import MathRewardConfig, MathVerifier
    v = MathVerifier(MathRewardConfig(time_limit_s=600.0))
    v.is_correct(["\\\\boxed{\\\\frac{2}{4}}"], ["0.5"])          # start the worker
    print(v._workers[0].proc.pid, flush=True)
    if sys.argv[2] == "busy":
        v.is_correct(["\\\\boxed{9^{9^{9^{9}}}}"], ["1"])         # minutes of big-integer work
    else:
        time.sleep(600)
""")


@pytest.mark.parametrize("state", ["idle", "busy"])
def test_workers_die_with_their_parent(state):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(ROOT), state],
                              stdout=subprocess.PIPE, text=True)
    try:
        worker_pid = int(parent.stdout.readline())
        time.sleep(1.0)  # the busy worker is now deep in a C call
        assert alive(worker_pid)
    finally:
        parent.kill()  # kill -9: no cleanup code runs in the parent
        parent.wait()
    assert _wait_dead(worker_pid), f"worker {worker_pid} outlived its parent ({state})"
