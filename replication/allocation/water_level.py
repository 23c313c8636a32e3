"""Neyman-type allocations: the bounded water level and the square-root law, plus the
largest-remainder rounding that turns a feasible real allocation into exact integer counts.

- DynaMO (arXiv 2602.19208; docs/papers/dynamo.md): minimising sum_i sigma_i^2 / n_i with
  sum n_i = B and G_min <= n_i <= G_max gives the water level n_i = clip(c sigma_i, G_min,
  G_max), c chosen so the counts sum to B.
- GDRO (arXiv 2601.19280, Thm 4.2; docs/papers/gdro.md): minimising sum_b q_b v_b / n_b
  with sum_b q_b n_b = n_bar gives n_b = n_bar sqrt(v_b) / sum_j q_j sqrt(v_j).
"""

from __future__ import annotations

import numpy as np

from replication.allocation.base import as_int, check_feasible

SUM_TOLERANCE = 1e-6
"""round_to_budget accepts |sum(x) - budget| up to this times max(1, budget)."""


def _vector(name: str, values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"{name} contains a non-finite value ({arr[i]}) at index {i}")
    return arr


def _bounds(q: int, budget, lower, upper) -> tuple[int, int, int]:
    budget, lower, upper = as_int("budget", budget), as_int("lower", lower), as_int("upper", upper)
    if lower < 0:
        raise ValueError(f"lower must be >= 0, got {lower}")
    check_feasible(q, budget, lower, upper)
    return budget, lower, upper


# ----------------------------------------------------------------------------- rounding


def round_to_budget(x, budget, lower, upper, *, tie_break=None) -> np.ndarray:
    """Largest-remainder rounding of a feasible real vector to int64 counts.

    ``x`` must satisfy lower <= x <= upper (1e-9 slack) and sum to ``budget`` (relative slack
    SUM_TOLERANCE). Every entry gets floor(x); the missing units go one each to the largest
    fractional parts; equal fractional parts go to the larger ``tie_break`` value, then to the
    lowest index. Result: exact sum, bounds kept, and x_i > x_j implies n_i >= n_j.
    """
    x = _vector("x", x)
    budget, lower, upper = _bounds(x.size, budget, lower, upper)
    if x.min() < lower - 1e-9 or x.max() > upper + 1e-9:
        raise ValueError(f"x leaves the bounds [{lower}, {upper}]: min {x.min()}, max {x.max()}")
    if abs(x.sum() - budget) > SUM_TOLERANCE * max(1.0, budget):
        raise ValueError(f"x sums to {x.sum()!r}, not to budget {budget}")
    x = np.clip(x, lower, upper)
    base = np.floor(x).astype(np.int64)
    missing = budget - int(base.sum())
    # |sum(x) - budget| < 1 implies 0 <= missing and at least `missing` entries with a positive
    # fractional part (each below 1), all of them below the upper bound.
    if missing > 0:
        frac = x - base
        tb = np.zeros_like(x) if tie_break is None else _vector("tie_break", tie_break)
        if tb.shape != x.shape:
            raise ValueError("tie_break must have the shape of x")
        order = np.lexsort((np.arange(x.size), -tb, -frac))
        order = order[base[order] < upper][:missing]
        base[order] += 1
    return base


# ----------------------------------------------------------------------------- water level


def water_level_continuous(sigma, budget: float, lower: float, upper: float) -> np.ndarray:
    """Real water level n_i = clip(c sigma_i, lower, upper) with sum n = budget.

    c by bisection on log c, then solved exactly on the final linear piece. Prompts with
    sigma = 0 stay at ``lower`` unless every other prompt is at ``upper``; then the excess is
    spread evenly over them (all-zero sigma: uniform). Non-decreasing in sigma.
    """
    sigma = _vector("sigma", sigma)
    if np.any(sigma < 0):
        raise ValueError(f"sigma must be >= 0; sigma[{int(np.flatnonzero(sigma < 0)[0])}] < 0")
    q = sigma.size
    lower, upper, budget = float(lower), float(upper), float(budget)
    check_feasible(q, budget, lower, upper, tol=1e-9)
    pos = sigma > 0
    m = int(pos.sum())
    if m == 0:
        return np.full(q, budget / q)
    x = np.full(q, lower)
    saturated = m * upper + (q - m) * lower
    if budget >= saturated or lower == upper:
        x[pos] = upper
        if q > m:
            x[~pos] = lower + (budget - saturated) / (q - m)
        return x
    s, b = sigma[pos], budget - (q - m) * lower
    if b <= m * lower:
        return x
    # Work with log c and log sigma so that sigmas spanning hundreds of decades neither
    # overflow nor underflow. S(c) = sum clip(c s, L, U) is continuous, piecewise linear and
    # non-decreasing; it is m L (or ~0 when L = 0) at c = L / max(s) and m U at c = U / min(s).
    log_s = np.log(s)
    log_lo, log_hi = np.log(max(lower, 1e-300)), np.log(upper)

    def level(log_c: float) -> np.ndarray:
        return np.clip(np.exp(np.minimum(log_c + log_s, log_hi + 1.0)), lower, upper)

    lo, hi = log_lo - log_s.max(), log_hi - log_s.min()
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        total = level(mid).sum()
        if total > b:
            hi = mid
        elif total < b:
            lo = mid
        else:
            lo = hi = mid
            break
    log_c = 0.5 * (lo + hi)
    y = log_c + log_s
    free = (y > log_lo) & (y < log_hi)
    if free.any():
        # Exact c on the linear piece containing the bracket: L #low + U #high + c sum_free s = b
        fixed = lower * np.count_nonzero(~free & (y <= log_lo)) + upper * np.count_nonzero(y >= log_hi)
        s_free = np.exp(log_s[free] - log_s[free].max())  # scaled by exp(max) to stay finite
        rest = b - fixed
        if rest > 0:
            log_c = np.log(rest) - np.log(s_free.sum()) - log_s[free].max()
    x[pos] = level(log_c)
    return x


def water_level_allocation(sigma, budget, lower, upper) -> np.ndarray:
    """Integer water level: int64 counts with exact sum ``budget``, lower <= n <= upper.

    n = largest-remainder rounding of clip(c sigma, lower, upper) (water_level_continuous);
    fractional ties go to the larger sigma, then the lower index. sigma_i > sigma_j implies
    n_i >= n_j; equal sigmas get counts that differ by at most one (the extra to the lower
    index). Deterministic.
    """
    sigma = _vector("sigma", sigma)
    budget, lower, upper = _bounds(sigma.size, budget, lower, upper)
    x = water_level_continuous(sigma, budget, lower, upper)
    return round_to_budget(x, budget, lower, upper, tie_break=sigma)


# ----------------------------------------------------------------------------- square-root law


def sqrt_law_allocation(v, shares, mean_budget) -> np.ndarray:
    """GDRO Thm 4.2: n_b = n_bar sqrt(v_b) / sum_j q_j sqrt(v_j), so sum_b q_b n_b = n_bar.

    ``v`` (per-bin variance proxies) must be finite and >= 0. ``shares`` must be >= 0 and sum
    to 1 within 1e-9; they are NOT normalised silently (a caller passing counts instead of
    shares gets an error, not a rescaled answer). When sum_j q_j sqrt(v_j) = 0 (all v zero, or
    only zero-share bins carry variance) the answer is uniform n_bar. No bounds: clipping to
    [n_min, n_max] is the caller's choice.
    """
    v = _vector("v", v)
    q = _vector("shares", shares)
    if q.shape != v.shape:
        raise ValueError(f"shares has shape {q.shape}, v has shape {v.shape}")
    if np.any(v < 0):
        raise ValueError(f"v must be >= 0; v[{int(np.flatnonzero(v < 0)[0])}] < 0")
    if np.any(q < 0):
        raise ValueError(f"shares must be >= 0; shares[{int(np.flatnonzero(q < 0)[0])}] < 0")
    if abs(q.sum() - 1.0) > 1e-9:
        raise ValueError(f"shares sum to {q.sum()!r}, not 1 (pass shares / shares.sum())")
    n_bar = float(mean_budget)
    if not np.isfinite(n_bar) or n_bar < 0:
        raise ValueError(f"mean_budget must be finite and >= 0, got {mean_budget!r}")
    root = np.sqrt(v)
    denom = float(np.dot(q, root))
    if denom == 0.0:
        return np.full(v.size, n_bar)
    return n_bar * root / denom
