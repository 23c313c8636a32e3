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
math_verify_worker.py by path): no fork of a multi-threaded trainer, no re-import of the caller's ``__main__``.
After the first kill a warm spare is kept, so a later restart costs no math-verify import. Workers
run under an address-space limit, so a huge number fails fast with MemoryError instead of swapping.

Cheap cases never leave the main process: extraction (a linear scan for the last ``\\boxed{}`` or
``Answer:`` line), answers longer than ``max_answer_chars`` (wrong), exact string matches (right),
and single-letter multiple-choice golds (GPQA: letter comparison).

Where things live: extraction in math_answers.py, the worker process in math_verify_worker.py,
the pool that schedules samples onto workers in math_verifier_pool.py; the scoring here.

    verifier = MathVerifier(MathRewardConfig(extraction="auto"))
    ok = verifier.is_correct(completions, answers)      # bool array
    rewards = verifier.rewards(completions, answers)    # np.float32 array, ±1
    verifier.close()
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Sequence

import numpy as np

from replication.tasks.math_answers import (  # noqa: F401  (re-exported: extraction)
    _WORD_ANSWERS,
    _normalise,
    choice_letter,
    extract_answer,
    extract_answer_line,
    extract_last_boxed,
)
from replication.tasks.math_verifier_pool import VerifierWorkerPool
from replication.tasks.math_verify_worker import _Worker  # noqa: F401  (the fault tests patch it)


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


class MathVerifier(VerifierWorkerPool):
    """Scores completions against reference answers; safe on hostile model outputs.

    Thread-safe (one lock around a batch). Cheap cases are decided here; the rest go to the
    worker pool (``VerifierWorkerPool``: deadlines, dead workers, ``close()``).
    """

    def __init__(self, config: MathRewardConfig | None = None) -> None:
        config = config or MathRewardConfig()
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("MathVerifier needs math-verify: pip install -e '.[math]' "
                              "(math-verify>=0.7)")
        super().__init__(config)

    # -- public API ----------------------------------------------------------------------------

    def rewards(self, completions: Sequence[str], answers: Sequence[str], correct: float = 1.0,
                incorrect: float = -1.0) -> np.ndarray:
        """float32 rewards, one per completion (±1 by default: DynaMO, GDRO; VIP's R ∈ {-1, +1})."""
        ok = self.is_correct(completions, answers)
        return np.where(ok, correct, incorrect).astype(np.float32)

    def extracted(self, completions: Sequence[str]) -> list[str | None]:
        """Each completion's extracted answer, normalised (None: no answer): what a majority vote
        counts (maj@k)."""
        cfg = self.config
        out: list[str | None] = []
        for text in completions:
            pred = extract_answer(text, cfg.extraction, cfg.tail_chars)
            out.append(None if pred is None else _normalise(pred))
        return out

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


def math_rewards(completions: Sequence[str], answers: Sequence[str],
                 config: MathRewardConfig | None = None, correct: float = 1.0,
                 incorrect: float = -1.0) -> np.ndarray:
    """One-shot convenience (starts and stops a verifier); keep a ``MathVerifier`` in loops."""
    with MathVerifier(config) as verifier:
        return verifier.rewards(completions, answers, correct, incorrect)
