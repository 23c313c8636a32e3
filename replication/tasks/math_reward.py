"""Math answer verification with math-verify, under a hard per-sample wall-clock limit.

The verifier decides correct / incorrect; the trainer turns that into rewards with
``rl.reward_positive`` / ``rl.reward_negative`` (DynaMO and GDRO train on ±1 — math-verify / the
DAPO verifier —, VIP's variance formulas assume R ∈ {-1, +1}; allocators count a success as
reward > 0, so ±1 and 1/0 both work downstream).

Why a worker process. math-verify has its own ``parsing_timeout``/``timeout_seconds``, but they use
``signal.alarm``: whole seconds, main thread only (it raises ValueError in any other thread), and
an alarm cannot interrupt a long C call — sympy/gmpy big-integer arithmetic such as
``10^{10^{10}}`` or a deep recursion in the LaTeX parser can run for minutes. So every sample that
needs math-verify runs in a worker subprocess; when it overruns ``time_limit_s`` the worker is
SIGKILLed and the sample counts as incorrect (a worker that *dies* is replaced and the sample
retried once instead: a crash is not an answer). Workers are fresh interpreters (``python -c`` running
this file by path): no fork of a multi-threaded trainer, no re-import of the caller's ``__main__``.
After the first kill a warm spare is kept, so a later restart costs no math-verify import. Workers
run under an address-space limit, so a huge number fails fast with MemoryError instead of swapping.

Cheap cases never leave the main process: extraction (a linear scan for the last ``\\boxed{}`` or
``Answer:`` line), answers longer than ``max_answer_chars`` (wrong), exact string matches (right),
and single-letter multiple-choice golds (GPQA: letter comparison).

    verifier = MathVerifier(MathRewardConfig(extraction="auto"))
    ok = verifier.is_correct(completions, answers)      # bool array
    rewards = verifier.rewards(completions, answers)    # np.float32 array, ±1
    verifier.close()
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from functools import lru_cache
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class MathRewardConfig:
    """How completions are scored against reference answers."""

    extraction: str = "auto"
    """Where the answer is read: ``boxed`` (last \\boxed{...}; GDRO's prompt asks for it),
    ``answer_line`` (last "Answer: ..." line; DAPO/VIP prompts), ``auto`` (boxed, else Answer line),
    ``math_verify`` (math-verify's own extraction on the last ``tail_chars`` characters)."""
    time_limit_s: float = 5.0
    """Hard wall-clock limit for one sample's parse + verify (the worker is killed past it)."""
    max_answer_chars: int = 1000
    """Extracted answers longer than this are scored incorrect without parsing."""
    tail_chars: int = 4000
    """Only the last ``tail_chars`` characters are searched for an ``Answer:`` line or given to
    math-verify's extraction (the DAPO verifier reads the last 300)."""
    num_workers: int = 1
    """Verifier processes (each sample gets its own limit; batches run in parallel)."""
    worker_memory_mb: int = 4096
    """Address-space limit of each worker process (RLIMIT_AS); 0 = none."""

    def __post_init__(self) -> None:
        if self.extraction not in ("auto", "boxed", "answer_line", "math_verify"):
            raise ValueError(f"extraction must be auto/boxed/answer_line/math_verify, "
                             f"got {self.extraction!r}")
        if not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0, got {self.time_limit_s}")
        if self.num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {self.num_workers}")



# ---------------------------------------------------------------------------------------------
# Extraction (pure, linear time, never raises)
# ---------------------------------------------------------------------------------------------

_BOX_TOKENS = re.compile(r"\\(?:boxed|fbox)\s*\{|[{}]")
_ANSWER_LINE = re.compile(r"(?im)^[ \t*#>_]*answer[ \t]*[*_]*[ \t]*[:：][ \t]*[*_]*[ \t]*(\S.*?)[ \t]*$")


def extract_last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` (or ``\\fbox{...}``); None if there is none
    or none is closed (an unclosed last box falls back to the previous closed one).

    One pass over the braces with a stack: linear even for 10^5 unclosed ``\\boxed{`` (a rescan
    from every opener would be quadratic and hang on exactly that input)."""
    if not isinstance(text, str):
        return None
    stack: list[int] = []  # content start of a box opener, or -1 for a plain "{"
    best: tuple[int, int] | None = None
    for m in _BOX_TOKENS.finditer(text):
        tok = m.group()
        if tok == "}":
            if stack:
                start = stack.pop()
                if start >= 0 and (best is None or start > best[0]):
                    best = (start, m.start())
        else:
            stack.append(m.end() if len(tok) > 1 else -1)
    return text[best[0]:best[1]].strip() if best else None


def extract_answer_line(text: str, tail_chars: int = 4000) -> str | None:
    """The last ``Answer: ...`` line (DAPO / VIP output format), with a trailing period and
    surrounding ``$`` removed."""
    if not isinstance(text, str):
        return None
    matches = _ANSWER_LINE.findall(text[-tail_chars:])
    if not matches:
        return None
    ans = matches[-1].strip().rstrip(".").strip()
    if len(ans) >= 2 and ans.startswith("$") and ans.endswith("$"):
        ans = ans.strip("$").strip()
    return ans or None


def extract_answer(text: str, mode: str = "auto", tail_chars: int = 4000) -> str | None:
    """Extracted answer string for the modes of ``MathRewardConfig.extraction`` (math_verify mode
    returns the tail itself: math-verify extracts in the worker)."""
    if mode == "boxed":
        return extract_last_boxed(text)
    if mode == "answer_line":
        return extract_answer_line(text, tail_chars)
    if mode == "auto":
        boxed = extract_last_boxed(text)
        return boxed if boxed is not None else extract_answer_line(text, tail_chars)
    if mode == "math_verify":
        return text[-tail_chars:] if isinstance(text, str) and text.strip() else None
    raise ValueError(f"unknown extraction mode {mode!r}")


_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")
_GOLD_CHOICE = re.compile(r"^\(?([A-E])\)?$")  # upper case only: a gold "e" is Euler's number
_TEXT_WRAP = re.compile(r"^\\(?:text|textbf|mathrm|mathbf)\{(.*)\}$")


_WORD_ANSWERS = frozenset({"yes", "no", "true", "false"})  # compared as words, case-insensitive


def _normalise(s: str) -> str:
    s = s.strip().strip("$").strip()
    while True:
        m = _TEXT_WRAP.match(s)
        if not m:
            break
        s = m.group(1).strip()
    return re.sub(r"\s+", "", s).rstrip(".")


def choice_letter(s: str, gold: bool = False) -> str | None:
    """'C', '(C)', '\\text{(C)}' -> 'C'; anything else -> None. A gold answer counts as a choice
    only in upper case (A-E)."""
    m = (_GOLD_CHOICE if gold else _CHOICE).match(_normalise(s))
    return m.group(1).upper() if m else None


# ---------------------------------------------------------------------------------------------
# Worker process (runs math-verify)
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# The verifier
# ---------------------------------------------------------------------------------------------


class MathVerifier:
    """Scores completions against reference answers; safe on hostile model outputs.

    Thread-safe (one lock around a batch). ``close()`` (or a ``with`` block) stops the workers;
    they also exit when this process dies, busy or idle (``replication.interrupts.die_with_parent``). Dead workers are
    replaced at any time and their sample retried once (``_after_death``).
    """

    startup_timeout_s = 120.0
    """A worker that has not imported math-verify by then is an installation problem."""

    def __init__(self, config: MathRewardConfig | None = None) -> None:
        self.config = config or MathRewardConfig()
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("MathVerifier needs math-verify: pip install -e '.[math]' "
                              "(math-verify>=0.7)")
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._spare: _Worker | None = None
        self.stats = {"fast": 0, "worker": 0, "timeouts": 0, "crashes": 0, "retries": 0,
                      "crash_wrong": 0}

    # -- public API ----------------------------------------------------------------------------

    def rewards(self, completions: Sequence[str], answers: Sequence[str], correct: float = 1.0,
                incorrect: float = -1.0) -> np.ndarray:
        """float32 rewards, one per completion (±1 by default: DynaMO, GDRO; VIP's R ∈ {-1, +1})."""
        ok = self.is_correct(completions, answers)
        return np.where(ok, correct, incorrect).astype(np.float32)

    def is_correct(self, completions: Sequence[str], answers: Sequence[str],
                   sources: Sequence[str] | None = None) -> np.ndarray:
        """bool array: is each completion's extracted answer equivalent to its reference?
        (``sources`` is accepted for the trainer's verifier interface and ignored: every math
        dataset uses the same checker.)"""
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions for {len(answers)} answers")
        cfg = self.config
        out = np.zeros(len(completions), dtype=bool)
        jobs: list[tuple[int, str, str, bool]] = []
        whole_text = cfg.extraction == "math_verify"
        for i, (text, gold) in enumerate(zip(completions, answers)):
            gold = "" if gold is None else str(gold).strip()
            pred = extract_answer(text, cfg.extraction, cfg.tail_chars)
            if pred is None or not gold:
                continue
            letter = choice_letter(gold, gold=True)
            if letter is not None and not whole_text:
                out[i] = choice_letter(pred) == letter
                self.stats["fast"] += 1
                continue
            if gold.lower() in _WORD_ANSWERS and not whole_text:
                out[i] = _normalise(pred).lower() == gold.lower()
                self.stats["fast"] += 1
                continue
            if not whole_text:
                if len(pred) > cfg.max_answer_chars:
                    continue
                if _normalise(pred) == _normalise(gold):
                    out[i] = True
                    self.stats["fast"] += 1
                    continue
            jobs.append((i, pred, gold, whole_text))
        if jobs:
            with self._lock:
                for i, ok in self._run(jobs).items():
                    out[i] = ok
        return out

    def close(self) -> None:
        with self._lock:
            for w in self._workers + ([self._spare] if self._spare else []):
                w.kill()
            self._workers, self._spare = [], None

    def __enter__(self) -> "MathVerifier":
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


def math_rewards(completions: Sequence[str], answers: Sequence[str],
                 config: MathRewardConfig | None = None, correct: float = 1.0,
                 incorrect: float = -1.0) -> np.ndarray:
    """One-shot convenience (starts and stops a verifier); keep a ``MathVerifier`` in loops."""
    with MathVerifier(config) as verifier:
        return verifier.rewards(completions, answers, correct, incorrect)
