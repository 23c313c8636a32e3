"""Sampling-based evaluation metrics: pass@k, mean@k, maj@k and verl's bootstrapped best@k.

Which paper reports what (vip.md, dynamo.md, gdro.md):
- GDRO: per-benchmark mean@8 and a pooled pass@8 read as "any of the 8 samples is correct"
  (= ``pass_at_k(8, c, 8)``, which is 1[c > 0]).
- DynaMO: P@1 / P@32, most likely mean@32 and pass@32.
- VIP: Mean@32, Maj@32 and "Pass@32" = verl's ``best@32/mean``: a BOOTSTRAP estimate
  (``best_at_k_bootstrap``), slightly below the plain any-correct-of-32. It is a different
  metric from the unbiased pass@k and is kept under its own name.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

import numpy as np

IN_DISTRIBUTION_SUFFIX = "-indist"
"""Name suffix of an evaluation set whose prompts are (partly) in the train pool: reported on its
own, labelled in-distribution, and never part of the "average" / "pooled" headline rows."""


def headline_sets(names) -> list[str]:
    """The evaluation sets that count in "average" and "pooled": every set not named ``*-indist``."""
    return [n for n in names if not str(n).endswith(IN_DISTRIBUTION_SUFFIX)]


def _as_int_array(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ValueError(f"{name} must be integers, got {x!r}")
        a = a.astype(np.int64)
    elif a.dtype.kind not in "iub":
        raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
    return a.astype(np.int64)


def pass_at_k(n, c, k):
    """Unbiased pass@k (Chen et al. 2021): 1 − C(n−c, k) / C(n, k), elementwise.

    n samples of which c are correct; the probability that k samples drawn WITHOUT replacement
    from the n contain a correct one. Computed in the stable product form
    1 − Π_{i=n−c+1}^{n} (1 − k/i) (no huge binomials), vectorised with numpy broadcasting over
    n, c, k. Returns a float for scalar inputs, else a float64 array.

    Raises:
        ValueError: negative values, k < 1, k > n, c > n, or non-integers.
    """
    n_a, c_a, k_a = np.broadcast_arrays(
        _as_int_array(n, "n"), _as_int_array(c, "c"), _as_int_array(k, "k")
    )
    if np.any(n_a < 0) or np.any(c_a < 0):
        raise ValueError("n and c must be non-negative")
    if np.any(k_a < 1):
        raise ValueError("k must be >= 1")
    if np.any(k_a > n_a):
        raise ValueError("k must be <= n")
    if np.any(c_a > n_a):
        raise ValueError("c must be <= n")
    width = int(c_a.max()) if c_a.size else 0
    j = np.arange(width)
    i = n_a[..., None] - j  # i = n, n−1, ..., n−c+1 where j < c
    use = j < c_a[..., None]
    factors = np.where(use, 1.0 - k_a[..., None] / np.where(use, i, 1), 1.0)
    out = 1.0 - np.prod(factors, axis=-1)
    # Fewer than k incorrect samples: every k-subset holds a correct one.
    out = np.where(n_a - c_a < k_a, 1.0, out)
    return float(out) if out.ndim == 0 else out


def _prompt_rows(correct, name: str) -> list[np.ndarray]:
    """[Q, n] / [n] / ragged per-prompt rows -> list of float64 rows (each non-empty)."""
    try:
        arr = np.asarray(correct, dtype=np.float64)
    except ValueError:  # ragged: different n per prompt
        rows = [np.asarray(r, dtype=np.float64).reshape(-1) for r in correct]
    else:
        if arr.ndim not in (1, 2):
            raise ValueError(f"{name}: expected [Q, n] or [n], got shape {arr.shape}")
        rows = [arr] if arr.ndim == 1 else list(arr)
    if not rows or any(r.size == 0 for r in rows):
        raise ValueError(f"{name} needs at least one sample per prompt")
    return rows


def mean_at_k(correct_matrix) -> float:
    """mean@k: average correctness over all samples of all prompts.

    ``correct_matrix`` is [Q, k] (bool or 0/1) or one prompt's [k]; a ragged sequence of
    per-prompt rows is averaged per prompt first, so every prompt weighs the same.
    """
    return float(np.mean([r.mean() for r in _prompt_rows(correct_matrix, "mean_at_k")]))


def _correctness_lookup(answers: Sequence, correct_of_answer) -> Callable[[int], bool]:
    """Map a sample index to the correctness of its answer."""
    if isinstance(correct_of_answer, Mapping):
        return lambda i: bool(correct_of_answer.get(answers[i], False))
    if callable(correct_of_answer):
        return lambda i: bool(correct_of_answer(answers[i]))
    flags = list(correct_of_answer)
    if len(flags) != len(answers):
        raise ValueError(f"{len(flags)} correctness flags for {len(answers)} answers")
    return lambda i: bool(flags[i])


def _vote(answers: Sequence[Hashable], idx: Sequence[int]) -> int:
    """Index (into ``answers``) of the first sample carrying the most frequent answer.

    Ties go to the answer that appears FIRST among the voting samples — verl's ``calc_maj_val``
    rule (insertion-ordered dict + ``max``). ``None`` (no answer extracted) is a vote like any
    other, as in verl.
    """
    counts: dict[Hashable, int] = {}
    first: dict[Hashable, int] = {}
    for i in idx:
        a = answers[i]
        counts[a] = counts.get(a, 0) + 1
        first.setdefault(a, i)
    winner = max(counts, key=counts.__getitem__)  # max keeps the first of equal counts
    return first[winner]


def maj_at_k(
    answers: Sequence[Hashable],
    correct_of_answer,
    k: int,
    n_bootstrap: int | None = None,
    seed: int = 42,
) -> float:
    """maj@k of ONE prompt: is the majority-vote answer of k samples correct?

    Args:
        answers: the prompt's n extracted answers (hashable, e.g. normalised strings; None for
            "no answer").
        correct_of_answer: the correctness of each answer — a mapping answer → bool (missing
            answers count as wrong), a callable answer → bool, or a sequence of per-sample bools
            aligned with ``answers`` (then the voted answer's correctness is that of its first
            sample, as verl's ``calc_maj_val``).
        k: number of voting samples, 1 ≤ k ≤ n.
        n_bootstrap: None — vote over the first k samples (deterministic; 0 or 1). An int —
            verl's ``maj@k/mean``: average over ``n_bootstrap`` resamples of k samples drawn
            WITH replacement (seeded exactly like ``best_at_k_bootstrap``).
        seed: bootstrap seed (verl: 42).

    Ties are broken towards the answer seen first among the voting samples (see ``_vote``).
    """
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}], got {k}")
    correct = _correctness_lookup(answers, correct_of_answer)
    if n_bootstrap is None:
        return float(correct(_vote(answers, range(k))))
    idx = _bootstrap_indices(n, k, n_bootstrap, seed)
    return float(np.mean([correct(_vote(answers, row)) for row in idx]))


def _bootstrap_indices(n: int, k: int, n_bootstrap: int, seed: int) -> np.ndarray:
    """[n_bootstrap, k] indices drawn with replacement, the SAME stream verl draws.

    verl calls ``np.random.seed(seed)`` and then ``np.random.choice(n, size=k, replace=True)``
    once per bootstrap; choice with replacement is ``randint(0, n, size)``, so one
    ``RandomState(seed).randint(0, n, (B, k))`` gives identical indices without touching the
    global numpy RNG.
    """
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be >= 1, got {n_bootstrap}")
    return np.random.RandomState(seed).randint(0, n, size=(n_bootstrap, k))


def best_at_k_bootstrap(correct, k: int, n_bootstrap: int = 1000, seed: int = 42) -> float:
    """verl's bootstrapped best@k (what VIP reports as "Pass@32"), averaged over prompts.

    Per prompt with n samples: draw ``n_bootstrap`` subsets of k samples WITH replacement,
    score each subset by whether any sample is correct (verl: ``np.max`` of the scores), and
    average. Its expectation is 1 − (1 − c/n)^k, which is below the any-correct-of-n value
    1[c > 0] when k = n — hence "slightly below" the plain pass@32. verl re-seeds with
    ``seed`` for every prompt, and so does this function, so numbers match verl's exactly.

    Args:
        correct: [Q, n] or [n] correctness (bool / 0-1), or a ragged sequence of per-prompt
            rows (different n per prompt).
        k: subset size (1 ≤ k; k may exceed n, sampling is with replacement as in verl).
        n_bootstrap, seed: verl defaults 1000 and 42.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    rows = [r != 0 for r in _prompt_rows(correct, "best_at_k_bootstrap")]
    cache: dict[int, np.ndarray] = {}
    values = []
    for r in rows:
        if r.size not in cache:
            cache[r.size] = _bootstrap_indices(r.size, k, n_bootstrap, seed)
        values.append(r[cache[r.size]].any(axis=1).mean())
    return float(np.mean(values))
