"""Exact solvers for VIP's allocation problem (arXiv 2602.01601; docs/papers/vip.md).

    minimise  sum_q a_q f(n_q)   s.t.  sum_q n_q = C,  L <= n_q <= U,   a_q = p_q(1-p_q) >= 0

``solve_continuous`` returns the real optimum (bisection on the Lagrange multiplier, the paper's
closed forms for n*(lambda)); ``solve_integer`` returns the exact integer optimum.

Conventions (others rely on them)
- Prompts with a_q = 0 gain nothing from rollouts: they get L, unless the prompts with a_q > 0
  are all at U and budget is left; that excess is spread as evenly as possible over the a_q = 0
  prompts (integer remainder to the lowest indices). All-zero a gives the most even split.
- Integer ties: among equal marginal gains the lower prompt index wins, which is exactly what
  the paper's greedy (Algorithm 2, +1 to the largest marginal decrease) does when run from L
  with lowest-index tie-breaking.
"""

from __future__ import annotations

import numpy as np

from replication.allocation.base import as_int, check_feasible

from replication.allocation.variance import (
    VarianceEstimator,
    drgrpo_factor,
    get_variance_estimator,
    rloo_factor,
)

# Above this many candidate units (prompts x (U-L)) the integer solver starts from the
# continuous optimum instead of ranking every unit; 2**21 doubles is 16 MiB.
FULL_RANKING_LIMIT = 1 << 21


# ----------------------------------------------------------------------------- closed forms


def _n_star_rloo(a: np.ndarray, lam: float) -> np.ndarray:
    # Stationarity a/(n-1)^2 = lambda  =>  n = 1 + sqrt(a/lambda)   (vip.md)
    return 1.0 + np.sqrt(a / lam)


def _n_star_drgrpo(a: np.ndarray, lam: float) -> np.ndarray:
    # Stationarity a (n-2)/n^3 = lambda, i.e. the largest root of lambda n^3 - a n + 2a = 0
    # (vip.md). The depressed cubic n^3 - (a/lambda) n + 2a/lambda has three real roots iff
    # lambda < a/27; the largest is, by the trigonometric (Viete) form with s = sqrt(3 lambda/a),
    #   n = (2/s) cos(arccos(-3 s) / 3),  which is 3 at s = 1/3 and ~sqrt(a/lambda) as s -> 0.
    # For lambda >= a/27 no root lies above 3 and the marginal is below lambda on [3, inf):
    # n* is the lower bound, which the caller's clip produces (we return 3).
    s = np.sqrt(3.0 * lam / a)
    inside = s < 1.0 / 3.0
    s_in = np.where(inside, s, 1.0 / 3.0)
    return np.where(inside, (2.0 / s_in) * np.cos(np.arccos(-3.0 * s_in) / 3.0), 3.0)


def _marginal_rloo(a: np.ndarray, n: float) -> np.ndarray:
    return a / (n - 1.0) ** 2


def _marginal_drgrpo(a: np.ndarray, n: float) -> np.ndarray:
    return a * (n - 2.0) / n**3


_CLOSED_FORMS = {
    "rloo": (_n_star_rloo, _marginal_rloo, rloo_factor),
    "drgrpo": (_n_star_drgrpo, _marginal_drgrpo, drgrpo_factor),
}


# ----------------------------------------------------------------------------- validation


def _validate(a, budget, lower, upper, estimator: str, integer: bool):
    est: VarianceEstimator = get_variance_estimator(estimator)
    if not est.convex or est.name not in _CLOSED_FORMS:
        raise ValueError(
            f"estimator {estimator!r} is not supported by the exact solvers (its variance is not "
            f"convex in n); supported: {sorted(_CLOSED_FORMS)}"
        )
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"a must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("a is empty: nothing to allocate")
    if not np.all(np.isfinite(arr)):
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"a contains a non-finite value ({arr[i]}) at index {i}")
    if np.any(arr < 0):
        i = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"a must be >= 0 (a = p(1-p)); a[{i}] = {arr[i]}")
    if integer:
        lower, upper, budget = as_int("lower", lower), as_int("upper", upper), as_int("budget", budget)
    else:
        lower, upper, budget = float(lower), float(upper), float(budget)
        if not (np.isfinite(lower) and np.isfinite(upper) and np.isfinite(budget)):
            raise ValueError("lower, upper and budget must be finite")
    if lower < est.min_lower:
        why = {"drgrpo": "f(n)=(n-1)/n^2 is not convex below n=3", "rloo": "f(n)=1/(n-1) is undefined at n=1"}
        raise ValueError(f"lower={lower} is below {est.min_lower} for estimator {estimator!r}: {why[est.name]}")
    check_feasible(arr.size, budget, lower, upper)
    return arr, budget, lower, upper, est.name


# ----------------------------------------------------------------------------- continuous


def _continuous_positive(a: np.ndarray, budget: float, lower: float, upper: float, name: str) -> np.ndarray:
    """Real optimum when every a_q > 0."""
    m = a.size
    if lower == upper or budget <= m * lower:
        return np.full(m, lower)
    if budget >= m * upper:
        return np.full(m, upper)
    n_star, marginal, _ = _CLOSED_FORMS[name]

    def n_of(log_lam: float) -> np.ndarray:
        return np.clip(n_star(a, np.exp(log_lam)), lower, upper)

    # Every prompt sits at L for lambda >= max_q marginal(a_q, L) and at U for lambda <=
    # min_q marginal(a_q, U); sum_q n*(lambda) is continuous and non-increasing in between.
    # (floored at 1e-300 so that a tiny a_q cannot underflow the bracket to log(0))
    lo = np.log(max(marginal(a, upper).min(), 1e-300))
    hi = np.log(max(marginal(a, lower).max(), 1e-300))
    x_big, x_small = np.full(m, upper), np.full(m, lower)  # sums >= budget / <= budget
    s_big, s_small = x_big.sum(), x_small.sum()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi or s_big - s_small <= 1e-11 * budget:
            break
        x = n_of(mid)
        s = x.sum()
        if s > budget:
            lo, x_big, s_big = mid, x, s
        elif s < budget:
            hi, x_small, s_small = mid, x, s
        else:
            return x
    # Interpolating the two bracketing solutions makes the sum exact; each coordinate moves
    # monotonically in lambda, so both are within (s_big - s_small) of the optimum.
    theta = (budget - s_small) / (s_big - s_small)
    return np.clip(x_small + theta * (x_big - x_small), lower, upper)


def solve_continuous(a, budget, lower, upper, estimator: str) -> np.ndarray:
    """Real-valued minimiser of sum_q a_q f(n_q) with sum n = budget, lower <= n <= upper.

    Bisection on log(lambda) with the closed-form n*(lambda) of vip.md, then an interpolation
    between the two bracketing solutions so that the sum equals ``budget`` to ~1e-12.
    """
    a, budget, lower, upper, name = _validate(a, budget, lower, upper, estimator, integer=False)
    q = a.size
    pos = a > 0
    n_pos = int(pos.sum())
    if n_pos == 0:
        return np.full(q, budget / q)  # any feasible point is optimal: take the most even
    n = np.full(q, lower)
    n_zero = q - n_pos
    saturated = n_pos * upper + n_zero * lower
    if budget >= saturated:
        n[pos] = upper
        if n_zero:
            n[~pos] = lower + (budget - saturated) / n_zero
        return n
    n[pos] = _continuous_positive(a[pos], budget - n_zero * lower, lower, upper, name)
    return n


# ----------------------------------------------------------------------------- integer


def _unit_gains(a: np.ndarray, k: np.ndarray, f) -> np.ndarray:
    """Gain of a prompt's k-th rollout, a (f(k-1) - f(k)); one formula everywhere so that
    comparisons between the two code paths are bit-identical."""
    k = np.asarray(k, dtype=np.float64)
    return a * (f(k - 1.0) - f(k))


def _top_units(gains: np.ndarray, r: int) -> np.ndarray:
    """Per-row count of the r best units under the order (-gain, row, column).

    Rows must be non-increasing (convexity), so the selection is a prefix of every row. Ties at
    the threshold go to the lowest flat index: lowest prompt index, then lowest level.
    """
    rows, width = gains.shape
    flat = gains.ravel()
    if r <= 0:
        return np.zeros(rows, dtype=np.int64)
    if r >= flat.size:
        return np.full(rows, width, dtype=np.int64)
    kth = flat.size - r
    thr = np.partition(flat, kth)[kth]  # the r-th largest gain
    chosen = flat > thr
    need = r - int(chosen.sum())
    chosen[np.flatnonzero(flat == thr)[:need]] = True
    return chosen.reshape(rows, width).sum(axis=1)


def _integer_full(a: np.ndarray, budget: int, lower: int, upper: int, f) -> np.ndarray:
    # Why this is exact (separable convex, one sum constraint; Gross 1956): write
    # f(n_q) = f(L) - sum_{k=L+1..n_q} g_q(k) with unit gains g_q(k) = a_q (f(k-1) - f(k)).
    # Convexity (L >= 3 for Dr. GRPO, L >= 2 for RLOO) makes every row g_q(L+1) >= g_q(L+2)
    # >= ..., so a feasible n is a choice of a prefix per row with R = budget - m L units in
    # all, and the objective is constant - (sum of the chosen gains). The R largest gains
    # overall form a prefix of every row (ties broken by lower level within a row), so they are
    # feasible, hence optimal. The paper's greedy (+1 to the largest marginal decrease) picks
    # exactly these units one at a time; ranking them at once is the same answer.
    levels = np.arange(lower + 1, upper + 1, dtype=np.float64)
    h = f(levels - 1.0) - f(levels)
    gains = a[:, None] * h[None, :]
    return lower + _top_units(gains, budget - a.size * lower)


def _integer_window(a: np.ndarray, budget: int, lower: int, upper: int, f, name: str) -> np.ndarray | None:
    """Rank only the units near the continuous optimum x; None if the certificate fails.

    With lambda the continuous multiplier, every unit k <= floor(x_q) has gain >= lambda and
    every unit k > ceil(x_q) has gain <= lambda (convexity), so the integer optimum lies in
    [floor(x)-1, ceil(x)+1] in all but degenerate tie cases; the certificate below checks it.
    """
    x = _continuous_positive(a, float(budget), float(lower), float(upper), name)
    lo = np.clip(np.floor(x) - 1, lower, upper).astype(np.int64)
    hi = np.clip(np.ceil(x) + 1, lower, upper).astype(np.int64)
    width = int((hi - lo).max())
    r = budget - int(lo.sum())
    if width == 0 or r < 0 or r > int((hi - lo).sum()):
        return None if r != 0 else lo
    k = lo[:, None] + 1 + np.arange(width)[None, :]
    gains = np.where(k <= hi[:, None], _unit_gains(a[:, None], k, f), -np.inf)
    n = lo + _top_units(gains, r)
    # Certificate: the chosen set is the top set under (-gain, prompt, level) iff every chosen
    # last unit ranks before every first unchosen unit.
    last = np.where(n > lower, _unit_gains(a, n, f), np.inf)
    nxt = np.where(n < upper, _unit_gains(a, n + 1, f), -np.inf)
    t_last, t_next = last.min(), nxt.max()
    if t_last > t_next:
        return n
    if t_last == t_next and np.flatnonzero(last == t_last).max() <= np.flatnonzero(nxt == t_next).min():
        return n
    return None


def solve_integer(a, budget, lower, upper, estimator: str) -> np.ndarray:
    """Exact integer minimiser (int64) of sum_q a_q f(n_q), sum n = budget, lower <= n <= upper.

    Same result as the paper's greedy marginal allocation from L (ties: lowest index), computed
    by ranking unit gains at once (or, for very wide bounds, only those near the continuous
    optimum, with an optimality certificate and the full ranking as fallback).
    """
    a, budget, lower, upper, name = _validate(a, budget, lower, upper, estimator, integer=True)
    f = _CLOSED_FORMS[name][2]
    q = a.size
    pos = a > 0
    n_pos = int(pos.sum())
    if n_pos == 0:
        return even_split(q, budget)
    n = np.full(q, lower, dtype=np.int64)
    n_zero = q - n_pos
    saturated = n_pos * upper + n_zero * lower
    if budget >= saturated:
        n[pos] = upper
        if n_zero:
            n[~pos] = even_split(n_zero, budget - n_pos * upper)
        return n
    a_pos, b_pos = a[pos], budget - n_zero * lower
    sol = None
    if n_pos * (upper - lower) > FULL_RANKING_LIMIT:
        sol = _integer_window(a_pos, b_pos, lower, upper, f, name)
    if sol is None:
        sol = _integer_full(a_pos, b_pos, lower, upper, f)
    n[pos] = sol
    return n


def even_split(q: int, budget: int) -> np.ndarray:
    """budget // q each, the remainder one each to the first prompts (lowest index)."""
    base, rem = divmod(int(budget), int(q))
    out = np.full(int(q), base, dtype=np.int64)
    out[:rem] += 1
    return out


def allocation_objective(a, n, estimator: str) -> float:
    """sum_q term(a_q, n_q) for a registered estimator (any, including the non-convex grpo)."""
    est = get_variance_estimator(estimator)
    return float(np.sum(est.term(np.asarray(a, dtype=np.float64), np.asarray(n, dtype=np.float64))))
