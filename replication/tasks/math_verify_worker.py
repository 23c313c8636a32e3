"""The math-verify worker: a fresh interpreter that answers (job, pred, gold, whole_text)
requests with (job, ok), and ``_Worker``, the verifier's handle on one such process.

The worker runs this file by path (not ``-m``), so this file imports nothing from the package at
its top level: the worker loads neither the package's __init__ files nor the parent's __main__.
Why a worker process at all: replication/tasks/math_reward.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> Any:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    parsed = parse("\\boxed{" + gold + "}", [LatexExtractionConfig(boxed_match_priority=0)],
                   parsing_timeout=None)
    return parsed or parse(gold, [LatexExtractionConfig(), ExprExtractionConfig()],
                           parsing_timeout=None)


def _verify_in_worker(pred: str, gold: str, whole_text: bool) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    # math-verify's own alarms are off (None): the parent's kill is the limit, and it is not
    # restricted to whole seconds or to the main thread
    if whole_text:
        target = parse(pred, [LatexExtractionConfig(), ExprExtractionConfig()],
                       parsing_timeout=None)
    else:
        target = parse("\\boxed{" + pred + "}", [LatexExtractionConfig(boxed_match_priority=0)],
                       parsing_timeout=None) \
            or parse(pred, [LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=None)
    gold_parsed = _parse_gold(gold)
    if not target or not gold_parsed:
        return False
    return bool(verify(gold_parsed, target, timeout_seconds=None))


def _serve_stdio(memory_mb: int, parent_pid: int = 0) -> None:
    """Worker main: answer (job, pred, gold, whole_text) requests on stdin with (job, ok).

    The protocol uses the original stdout descriptor; fd 1 is pointed at stderr so that stray
    prints from sympy cannot corrupt it."""
    if parent_pid:
        # PDEATHSIG fires when the *thread* that started the worker exits; the verifier then sees
        # a dead worker, replaces it and retries the sample. The idle case is also covered by
        # stdin reaching EOF.
        from replication.interrupts import die_with_parent

        die_with_parent(parent_pid)
    proto_out = os.dup(1)
    os.dup2(2, 1)
    reader = Connection(0, writable=False)
    writer = Connection(proto_out, readable=False)
    import logging

    import math_verify  # noqa: F401 - import before saying ready

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # it logs every failed parse
    if memory_mb > 0:
        try:
            import resource

            limit = memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    writer.send(("ready", None))
    while True:
        try:
            job, pred, gold, whole_text = reader.recv()
        except (EOFError, OSError):
            return
        try:
            ok = _verify_in_worker(pred, gold, whole_text)
        except BaseException:  # noqa: BLE001 - MemoryError, RecursionError, sympy errors: wrong
            ok = False
        try:
            writer.send((job, ok))
        except (BrokenPipeError, OSError):
            return


# The worker runs this file by path (not ``-m``), so it imports neither the package's __init__
# files nor the parent's __main__: a fresh interpreter, no fork of a threaded trainer.
_WORKER_BOOT = ("import runpy, sys; "
                "runpy.run_path(sys.argv[1], run_name='__verify_worker__')"
                "['_serve_stdio'](int(sys.argv[2]), int(sys.argv[3]))")


class _Worker:
    """One verifier subprocess; ``ready`` once math-verify is imported."""

    def __init__(self, memory_mb: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, os.path.abspath(__file__), str(memory_mb),
             str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.writer = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.reader = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.ready = False
        self.started = time.monotonic()
        self.job: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        for conn in (self.writer, self.reader):
            try:
                conn.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
