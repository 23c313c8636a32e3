"""Variance formulas and the exact VIP solvers (replication/allocation/{variance,solvers}.py)."""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import pytest
from scipy.optimize import minimize

from replication.allocation import solvers
from replication.allocation.solvers import (
    allocation_objective,
    even_split,
    solve_continuous,
    solve_integer,
)
from replication.allocation.variance import (
    bernoulli_variance,
    drgrpo_factor,
    get_variance_estimator,
    grpo_factor,
    p_from_success_variance,
    rloo_factor,
    success_variance,
)
from replication.allocation.water_level import round_to_budget

FACTORS = {"drgrpo": drgrpo_factor, "rloo": rloo_factor}
MIN_LOWER = {"drgrpo": 3, "rloo": 2}


def brute_force(a, budget, lower, upper, est):
    best, best_n = np.inf, None
    for n in itertools.product(range(lower, upper + 1), repeat=len(a)):
        if sum(n) == budget:
            val = allocation_objective(a, n, est)
            if val < best - 1e-15:
                best, best_n = val, n
    return best, np.array(best_n)


def greedy_reference(a, budget, lower, upper, est):
    """vip.md Algorithm 2 from L, one unit at a time with a heap; ties to the lowest index."""
    f = FACTORS[est]
    n = [lower] * len(a)
    gain = lambda q: a[q] * (f(n[q]) - f(n[q] + 1))  # noqa: E731
    heap = [(-gain(q), q) for q in range(len(a)) if lower < upper]
    heapq.heapify(heap)
    for _ in range(budget - lower * len(a)):
        _, q = heapq.heappop(heap)
        n[q] += 1
        if n[q] < upper:
            heapq.heappush(heap, (-gain(q), q))
    return np.array(n)


# ----------------------------------------------------------------------------- variance.py


def test_bernoulli_variance_values_and_vectorised():
    assert bernoulli_variance(2, 4) == pytest.approx(2 * 2 / (4 * 3))
    assert bernoulli_variance(0, 8) == 0.0 and bernoulli_variance(8, 8) == 0.0
    assert bernoulli_variance(1, 1) == 0.0 and bernoulli_variance(0, 0) == 0.0  # G < 2
    k, g = np.array([0, 1, 3, 5]), np.array([1, 2, 6, 10])
    out = bernoulli_variance(k, g)
    assert out.shape == (4,) and np.all(out >= 0)
    np.testing.assert_allclose(out, [0.0, 0.5, 9 / 30, 25 / 90])
    # unbiased: E[P] = p(1-p) exactly
    G, p = 7, 0.3
    from scipy.stats import binom

    ks = np.arange(G + 1)
    assert np.dot(binom.pmf(ks, G, p), bernoulli_variance(ks, np.full(G + 1, G))) == pytest.approx(p * (1 - p))


@pytest.mark.parametrize(
    "k,g,msg",
    [(5, 4, "exceed"), (-1, 4, "negative"), (1, -2, "negative"), (1.5, 4, "integer"), (np.nan, 4, "non-finite")],
)
def test_bernoulli_variance_errors(k, g, msg):
    with pytest.raises(ValueError, match=msg):
        bernoulli_variance(k, g)


def test_success_variance_and_factors():
    np.testing.assert_allclose(success_variance([0, 0.5, 0.2]), [0, 0.25, 0.16])
    with pytest.raises(ValueError):
        success_variance(1.2)
    assert drgrpo_factor(4) == pytest.approx(3 / 16)
    assert rloo_factor(5) == pytest.approx(1 / 4)
    assert grpo_factor(4, 0.5) == pytest.approx(3 / 16 * (1 - 2 / 16))
    a = success_variance(np.array([0.01, 0.3, 0.5]))
    np.testing.assert_allclose(p_from_success_variance(a), [0.01, 0.3, 0.5])
    assert get_variance_estimator("grpo").term(a, 6)[0] == pytest.approx(grpo_factor(6, 0.99))
    with pytest.raises(ValueError, match="unknown estimator"):
        get_variance_estimator("ppo")


def test_monte_carlo_matches_variance_formulas():
    """R in {-1,+1}, Z ~ N(0, s^2) independent, g = (1/n) sum A_i Z_i (vip.md's model).

    With the 1/n normalisation the natural definitions reproduce vip.md's constants exactly:
    Dr. GRPO 4 s^2 p(1-p)(n-1)/n^2, RLOO 4 s^2 p(1-p)/(n-1), and (extension) unbiased-std GRPO
    s^2 (n-1)/n^2 (1-p^n-(1-p)^n) with zero advantages for all-equal groups.
    """
    rng = np.random.default_rng(1234)
    s, m = 1.3, 200_000
    for p, n in [(0.5, 4), (0.2, 8), (0.7, 5)]:
        r = np.where(rng.random((m, n)) < p, 1.0, -1.0)
        z = rng.normal(0.0, s, (m, n))
        centred = r - r.mean(axis=1, keepdims=True)
        loo = r - (r.sum(axis=1, keepdims=True) - r) / (n - 1)
        std = r.std(axis=1, ddof=1, keepdims=True)
        normed = np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)
        for adv, expected in [
            (centred, 4 * s**2 * p * (1 - p) * (n - 1) / n**2),
            (loo, 4 * s**2 * p * (1 - p) / (n - 1)),
            (normed, s**2 * grpo_factor(n, p)),
        ]:
            g = (adv * z).mean(axis=1)
            assert g.var() == pytest.approx(expected, rel=0.03)


# ----------------------------------------------------------------------------- integer solver


@pytest.mark.parametrize("est", ["drgrpo", "rloo"])
def test_integer_matches_brute_force(est):
    rng = np.random.default_rng(7)
    for _ in range(60):
        q = int(rng.integers(1, 5))
        lower = MIN_LOWER[est] + int(rng.integers(0, 2))
        upper = lower + int(rng.integers(0, 5))
        p = rng.choice([0.0, 0.1, 0.5, 0.5, 0.9, 1.0, rng.random()], size=q)
        a = success_variance(p)
        budget = int(rng.integers(q * lower, q * upper + 1))
        n = solve_integer(a, budget, lower, upper, est)
        best, _ = brute_force(a, budget, lower, upper, est)
        assert n.dtype == np.int64 and n.sum() == budget
        assert lower <= n.min() and n.max() <= upper
        assert allocation_objective(a, n, est) <= best + 1e-15
        if np.all(a > 0):
            np.testing.assert_array_equal(n, greedy_reference(a, budget, lower, upper, est))


@pytest.mark.parametrize("est", ["drgrpo", "rloo"])
def test_integer_equals_greedy_and_window_path(est, monkeypatch):
    rng = np.random.default_rng(11)
    for _ in range(20):
        q = int(rng.integers(5, 80))
        p = rng.random(q)
        p[rng.random(q) < 0.2] = 0.5  # exact ties
        a = success_variance(p)
        lower, upper = 4, int(rng.integers(5, 40))
        budget = int(rng.integers(q * lower, q * upper + 1))
        full = solve_integer(a, budget, lower, upper, est)
        np.testing.assert_array_equal(full, greedy_reference(a, budget, lower, upper, est))
        monkeypatch.setattr(solvers, "FULL_RANKING_LIMIT", 0)
        np.testing.assert_array_equal(solve_integer(a, budget, lower, upper, est), full)
        monkeypatch.setattr(solvers, "FULL_RANKING_LIMIT", 1 << 21)


@pytest.mark.parametrize("est", ["drgrpo", "rloo"])
def test_integer_between_continuous_and_any_rounding(est):
    rng = np.random.default_rng(3)
    for _ in range(30):
        q = int(rng.integers(2, 40))
        a = success_variance(rng.random(q))
        lower, upper = 4, 16
        budget = int(rng.integers(q * lower, q * upper + 1))
        x = solve_continuous(a, budget, lower, upper, est)
        n = solve_integer(a, budget, lower, upper, est)
        obj_n = allocation_objective(a, n, est)
        assert obj_n >= allocation_objective(a, x, est) - 1e-12
        assert obj_n <= allocation_objective(a, round_to_budget(x, budget, lower, upper), est) + 1e-15
        # floor of x, then the missing units to random prompts below U
        r = np.floor(x).astype(np.int64)
        for _ in range(budget - r.sum()):
            r[rng.choice(np.flatnonzero(r < upper))] += 1
        assert obj_n <= allocation_objective(a, r, est) + 1e-15


def test_integer_zero_a_and_ties():
    # a = 0 prompts stay at L while others can absorb the budget
    n = solve_integer([0.0, 0.25, 0.0, 0.1], 20, 4, 8, "drgrpo")
    assert n[0] == 4 and n[2] == 4 and n.sum() == 20
    # positives saturated: the excess is spread evenly over the a = 0 prompts, lowest index first
    np.testing.assert_array_equal(solve_integer([0.0, 0.25, 0.0, 0.0], 23, 4, 8, "rloo"), [5, 8, 5, 5])
    # all zero: most even split, extra to the first prompts
    np.testing.assert_array_equal(solve_integer(np.zeros(4), 18, 3, 8, "drgrpo"), [5, 5, 4, 4])
    # equal a: counts differ by at most one, extras to the lowest indices
    np.testing.assert_array_equal(solve_integer(np.full(5, 0.2), 27, 4, 8, "rloo"), [6, 6, 5, 5, 5])
    np.testing.assert_array_equal(even_split(3, 10), [4, 3, 3])


# ----------------------------------------------------------------------------- continuous solver


@pytest.mark.parametrize("est", ["drgrpo", "rloo"])
def test_continuous_matches_scipy(est):
    rng = np.random.default_rng(5)
    f = FACTORS[est]
    for _ in range(8):
        q = int(rng.integers(2, 7))
        a = success_variance(rng.random(q))
        lower, upper = 4.0, 16.0
        budget = float(rng.uniform(q * lower, q * upper))
        x = solve_continuous(a, budget, lower, upper, est)
        res = minimize(
            lambda n: float(np.sum(a * f(n))),
            np.full(q, budget / q),
            method="SLSQP",
            bounds=[(lower, upper)] * q,
            constraints=[{"type": "eq", "fun": lambda n: n.sum() - budget}],
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert res.success
        assert allocation_objective(a, x, est) <= res.fun + 1e-10
        np.testing.assert_allclose(x, res.x, atol=1e-3)


@pytest.mark.parametrize("est", ["drgrpo", "rloo"])
def test_continuous_exact_sum_and_kkt(est):
    rng = np.random.default_rng(9)
    a = success_variance(rng.random(4096))
    x = solve_continuous(a, 32768, 4, 32, est)
    assert abs(x.sum() - 32768) < 1e-9 and x.min() >= 4 and x.max() <= 32
    # KKT: one multiplier; interior prompts share it, L-prompts are below it, U-prompts above
    marg = a * (x - 2) / x**3 if est == "drgrpo" else a / (x - 1) ** 2
    interior = (x > 4 + 1e-9) & (x < 32 - 1e-9)
    lam = np.median(marg[interior])
    np.testing.assert_allclose(marg[interior], lam, rtol=1e-8)
    assert np.all(marg[x <= 4 + 1e-9] <= lam * (1 + 1e-8))
    assert np.all(marg[x >= 32 - 1e-9] >= lam * (1 - 1e-8))
    if est == "drgrpo":  # the closed form solves lambda n^3 - a n + 2a = 0
        xi, ai = x[interior], a[interior]
        np.testing.assert_allclose(lam * xi**3 - ai * xi + 2 * ai, 0.0, atol=1e-10)


def test_continuous_zero_a_and_saturation():
    np.testing.assert_allclose(solve_continuous(np.zeros(3), 14.0, 3, 8, "drgrpo"), [14 / 3] * 3)
    x = solve_continuous([0.0, 0.25, 0.0], 20.0, 4, 8, "rloo")
    np.testing.assert_allclose(x, [6.0, 8.0, 6.0])
    x = solve_continuous([0.0, 0.25, 0.1], 14.0, 4, 8, "drgrpo")
    assert x[0] == 4 and x.sum() == pytest.approx(14.0, abs=1e-9) and x[1] > x[2]
    np.testing.assert_allclose(solve_continuous([0.1, 0.2], 8, 4, 9, "rloo"), [4, 4])


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("solver", [solve_integer, solve_continuous])
@pytest.mark.parametrize(
    "args,msg",
    [
        (([0.1, 0.2], 7, 4, 8, "drgrpo"), "infeasible budget"),
        (([0.1, 0.2], 17, 4, 8, "drgrpo"), "infeasible budget"),
        (([0.1, 0.2], 8, 2, 8, "drgrpo"), "not convex below"),
        (([0.1, 0.2], 8, 1, 8, "rloo"), "undefined at n=1"),
        (([0.1, np.nan], 8, 4, 8, "drgrpo"), "non-finite"),
        (([0.1, np.inf], 8, 4, 8, "drgrpo"), "non-finite"),
        (([0.1, -0.2], 8, 4, 8, "drgrpo"), ">= 0"),
        (([], 0, 4, 8, "drgrpo"), "empty"),
        (([0.1, 0.2], 8, 4, 8, "ppo"), "unknown estimator"),
        (([0.1, 0.2], 8, 4, 8, "grpo"), "not supported"),
        (([0.1, 0.2], 8, 5, 4, "drgrpo"), "below lower"),
        (([[0.1, 0.2]], 8, 4, 8, "drgrpo"), "one-dimensional"),
    ],
)
def test_solver_errors(solver, args, msg):
    with pytest.raises(ValueError, match=msg):
        solver(*args)


def test_integer_solver_rejects_fractional_budget():
    with pytest.raises(ValueError, match="budget must be an integer"):
        solve_integer([0.1, 0.2], 9.5, 4, 8, "rloo")
    with pytest.raises(ValueError, match="lower must be an integer"):
        solve_integer([0.1, 0.2], 9, 4.5, 8, "rloo")
