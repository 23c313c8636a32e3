"""Per-prompt gradient-variance formulas under binary rewards, and the estimator registry.

Model (VIP, arXiv 2602.01601; docs/papers/vip.md): reward R in {-1,+1} with P(R=+1)=p,
on-policy, no KL, a scalar projection Z of the score function with variance s^2, independent of
R and across rollouts. A group of n rollouts gives g = (1/n) sum_i A_i Z_i. Then
Var(g) = (s^2/n^2) E[sum_i A_i^2], and for the estimators below

    drgrpo  A_i = R_i - mean(R)                   Var = 4 s^2 p(1-p) (n-1)/n^2
    rloo    A_i = R_i - mean_{j != i} R_j         Var = 4 s^2 p(1-p) / (n-1)
    grpo    A_i = (R_i - mean(R)) / std_unbiased  Var = s^2 (n-1)/n^2 (1 - p^n - (1-p)^n)

(the 1/n normalisation of g is the one under which vip.md's constants hold; the tests check
these by Monte Carlo). The first two factor as a * f(n) with a = p(1-p) and f independent of p,
which is what the convex allocation problem of VIP uses. The GRPO form is our extension (not in
the paper): std normalisation removes the p(1-p) scale, the per-prompt term depends on p
through 1 - p^n - (1-p)^n, and it is NOT convex in n for any p (so the exact solvers refuse it;
VIP's official code runs "grpo" with std normalisation off, i.e. as drgrpo).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from replication.registry import Registry

# ----------------------------------------------------------------------------- Bernoulli


def bernoulli_variance(k, G):
    """Unbiased variance of a Bernoulli sample with k successes in G trials.

    P = k (G - k) / (G (G - 1))  (DynaMO's variance proxy), 0 when G < 2. Vectorised; returns a
    float for scalar inputs. Raises ValueError for non-finite, negative, non-integer counts or
    k > G.
    """
    k_arr = np.asarray(k, dtype=np.float64)
    g_arr = np.asarray(G, dtype=np.float64)
    for name, arr in (("k", k_arr), ("G", g_arr)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"bernoulli_variance: {name} has a non-finite value")
        if np.any(arr < 0):
            raise ValueError(f"bernoulli_variance: {name} has a negative value")
        if np.any(arr != np.floor(arr)):
            raise ValueError(f"bernoulli_variance: {name} must hold integer counts")
    k_arr, g_arr = np.broadcast_arrays(k_arr, g_arr)
    if np.any(k_arr > g_arr):
        i = int(np.flatnonzero((k_arr > g_arr).ravel())[0])
        raise ValueError(
            f"bernoulli_variance: successes k={k_arr.ravel()[i]:g} exceed trials G={g_arr.ravel()[i]:g}"
        )
    denom = g_arr * (g_arr - 1.0)
    out = np.divide(k_arr * (g_arr - k_arr), denom, out=np.zeros_like(denom), where=g_arr >= 2)
    return float(out) if out.ndim == 0 else out


def success_variance(p):
    """p (1 - p): the per-prompt weight a_q of VIP's objective. p must lie in [0, 1]."""
    p_arr = np.asarray(p, dtype=np.float64)
    if not np.all(np.isfinite(p_arr)) or np.any((p_arr < 0) | (p_arr > 1)):
        raise ValueError("success_variance: p must be finite and lie in [0, 1]")
    out = p_arr * (1.0 - p_arr)
    return float(out) if out.ndim == 0 else out


def p_from_success_variance(a):
    """The p <= 1/2 with p(1-p) = a (the other root is 1-p; the GRPO factor is symmetric)."""
    a_arr = np.clip(np.asarray(a, dtype=np.float64), 0.0, 0.25)
    # 2a / (1 + sqrt(1-4a)) equals (1 - sqrt(1-4a))/2 without cancellation for small a.
    return 2.0 * a_arr / (1.0 + np.sqrt(1.0 - 4.0 * a_arr))


# ----------------------------------------------------------------------------- factors f(n)


def drgrpo_factor(n):
    """f(n) = (n-1)/n^2 (Dr. GRPO; vip.md). Convex for n >= 3 only."""
    n = np.asarray(n, dtype=np.float64)
    return (n - 1.0) / (n * n)


def rloo_factor(n):
    """f(n) = 1/(n-1) (RLOO; vip.md). Undefined at n = 1."""
    n = np.asarray(n, dtype=np.float64)
    return 1.0 / (n - 1.0)


def grpo_factor(n, p):
    """Per-prompt f_q(n) = (n-1)/n^2 (1 - p^n - (1-p)^n): GRPO with unbiased-std normalisation.

    EXTENSION, not in the VIP paper (vip.md: "our derivation"). Depends on p, so it is a
    per-prompt factor; it multiplies s^2, not 4 s^2 p(1-p). Not convex in n.
    """
    n = np.asarray(n, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    return (n - 1.0) / (n * n) * (1.0 - p**n - (1.0 - p) ** n)


# ----------------------------------------------------------------------------- registry


@dataclasses.dataclass(frozen=True)
class VarianceEstimator:
    """How one advantage estimator's gradient variance depends on the group size n."""

    name: str
    """Registry key ("drgrpo", "rloo", "grpo")."""
    term: Callable[[np.ndarray, np.ndarray], np.ndarray]
    """term(a, n): the prompt's variance contribution (up to a constant shared by all prompts),
    with a = p(1-p)."""
    min_lower: int
    """Smallest allowed lower bound L: below it f is undefined or not convex."""
    convex: bool
    """Whether every term is convex in n on [min_lower, inf) (needed by the exact solvers)."""
    note: str = ""
    """Where the formula comes from."""


VARIANCE_ESTIMATORS: Registry[VarianceEstimator] = Registry("estimator")
"""Advantage estimator name → its per-prompt gradient-variance model (allocators' objective)."""


def register_variance_estimator(est: VarianceEstimator) -> VarianceEstimator:
    return VARIANCE_ESTIMATORS.register(est.name, est)


def get_variance_estimator(name: str) -> VarianceEstimator:
    return VARIANCE_ESTIMATORS.get(name)


register_variance_estimator(
    VarianceEstimator(
        "drgrpo",
        lambda a, n: np.asarray(a, dtype=np.float64) * drgrpo_factor(n),
        min_lower=3,
        convex=True,
        note="VIP paper: Var = 4 s^2 p(1-p) (n-1)/n^2",
    )
)
register_variance_estimator(
    VarianceEstimator(
        "rloo",
        lambda a, n: np.asarray(a, dtype=np.float64) * rloo_factor(n),
        min_lower=2,
        convex=True,
        note="VIP paper: Var = 4 s^2 p(1-p) / (n-1)",
    )
)
register_variance_estimator(
    VarianceEstimator(
        "grpo",
        lambda a, n: grpo_factor(n, p_from_success_variance(a)),
        min_lower=2,
        convex=False,
        note="extension (not in the paper): unbiased-std GRPO, s^2 (n-1)/n^2 (1-p^n-(1-p)^n)",
    )
)


def available_variance_estimators() -> list[str]:
    return VARIANCE_ESTIMATORS.names()
