"""Binary verifiable rewards: reasoning-gym's own scorer, binarised, that never raises.

reasoning-gym's arithmetic scorers give partial credit when the reference is a substring of the
answer ("123456" for "12" scores 0.33). RLVR rewards are 0/1, so a completion earns 1 only when
the scorer returns >= 1.0 (it tolerates a sign, leading zeros, trailing ".0" and commas — the
package's notion of "the same number", kept as is).

Completions come from a policy that may emit anything (empty strings, stray symbols, megabytes of
digits); the verifier returns 0.0 for everything it cannot score instead of raising.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import reasoning_gym

MAX_ANSWER_CHARS = 1_000
"""Longer completions score 0 without being parsed (no answer here is longer than ~20 chars)."""


@functools.lru_cache(maxsize=None)
def _scorer(source: str):
    # Scorers depend only on the dataset class, not on its items: a 1-item instance suffices.
    return reasoning_gym.create_dataset(source, seed=0, size=1).score_answer


def score(completion: object, answer: str, source: str) -> float:
    """1.0 when ``completion`` states ``answer`` (per the ``source`` dataset's scorer), else 0.0."""
    scorer = _scorer(source)  # an unknown source is a configuration error: that one may raise
    if not isinstance(completion, str) or len(completion) > MAX_ANSWER_CHARS:
        return 0.0
    try:
        value = float(scorer(completion.strip(), {"answer": str(answer)}))
    except Exception:  # noqa: BLE001 — any scorer failure on garbage is a wrong answer
        return 0.0
    return 1.0 if math.isfinite(value) and value >= 1.0 else 0.0


def is_correct(completion: object, answer: str, source: str = "chain_sum") -> bool:
    """``score(...) == 1``. chain_sum and products share one scorer, so the default source is
    right for every built-in level; pass the prompt's ``source`` for anything else."""
    return score(completion, answer, source) == 1.0


def score_batch(completions: Sequence[object], answers: Sequence[str], sources: Sequence[str]) -> np.ndarray:
    """Per-row binary rewards (float32) for aligned completions, answers and sources."""
    if not (len(completions) == len(answers) == len(sources)):
        raise ValueError(f"{len(completions)} completions, {len(answers)} answers, {len(sources)} sources")
    return np.array([score(c, a, s) for c, a, s in zip(completions, answers, sources)], dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Verifiers: what a run scores rollouts with (train steps and held-out evaluation)
# ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_number(text: object) -> str:
    """The last number in ``text`` ("The answer is 17." → "17"); "" when there is none."""
    if not isinstance(text, str):
        return ""
    found = _NUMBER.findall(text[-2000:])
    return found[-1] if found else ""


class Verifier(Protocol):
    """Scores a batch of rollouts; garbage is wrong, never an exception."""

    def is_correct(self, completions: Sequence[str], answers: Sequence[str],
                   sources: Sequence[str] | None = None) -> np.ndarray:
        """bool array, one per completion (``sources``: each row's dataset)."""
        ...


class ProceduralVerifier:
    """reasoning-gym's binarised scorer over a batch (``answer_mode='last-number'``: chat models
    explain, so the reward reads the completion's last number)."""

    def __init__(self, answer_mode: str = "exact") -> None:
        if answer_mode not in ("exact", "last-number"):
            raise ValueError(f"answer mode: 'exact' or 'last-number', got {answer_mode!r}")
        self.answer_mode = answer_mode

    def is_correct(self, completions: Sequence[str], answers: Sequence[str],
                   sources: Sequence[str] | None = None) -> np.ndarray:
        if sources is None:
            raise ValueError("procedural verification needs each row's source dataset")
        if self.answer_mode == "last-number":
            completions = [last_number(c) for c in completions]
        return score_batch(completions, answers, sources) >= 1.0
