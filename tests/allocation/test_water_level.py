"""Water level, largest-remainder rounding and the square-root law (water_level.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.allocation.water_level import (
    round_to_budget,
    sqrt_law_allocation,
    water_level_allocation,
    water_level_continuous,
)

FAST = settings(max_examples=60, deadline=None)


@st.composite
def instances(draw):
    q = draw(st.integers(1, 40))
    # a small value set makes exact ties and zeros common
    values = st.one_of(st.sampled_from([0.0, 0.1, 0.5, 0.5, 1.0]), st.floats(0.0, 10.0))
    sigma = np.array(draw(st.lists(values, min_size=q, max_size=q)))
    lower = draw(st.integers(0, 6))
    upper = lower + draw(st.integers(0, 20))
    budget = draw(st.integers(q * lower, q * upper))
    return sigma, budget, lower, upper


@FAST
@given(instances())
def test_water_level_properties(inst):
    sigma, budget, lower, upper = inst
    n = water_level_allocation(sigma, budget, lower, upper)
    assert n.dtype == np.int64 and n.shape == sigma.shape
    assert n.sum() == budget
    assert n.min() >= lower and n.max() <= upper
    i, j = np.meshgrid(np.arange(sigma.size), np.arange(sigma.size), indexing="ij")
    assert np.all(n[i] >= n[j], where=sigma[i] > sigma[j])
    # equal sigma: at most one apart, the extra to the lower index
    same = (sigma[i] == sigma[j]) & (i < j)
    assert np.all((n[i] - n[j] >= 0) & (n[i] - n[j] <= 1), where=same)
    np.testing.assert_array_equal(n, water_level_allocation(sigma.copy(), budget, lower, upper))


@FAST
@given(instances())
def test_water_level_continuous_is_a_clipped_line(inst):
    sigma, budget, lower, upper = inst
    x = water_level_continuous(sigma, budget, lower, upper)
    assert abs(x.sum() - budget) <= 1e-9 * max(1, budget)
    assert x.min() >= lower - 1e-12 and x.max() <= upper + 1e-12
    free = (x > lower + 1e-9) & (x < upper - 1e-9) & (sigma > 0)
    if free.sum() >= 2:
        # in logs, as the solver works: with subnormal sigmas c = x / sigma overflows a float
        # (hypothesis found sigma 1.1e-308 at x 2.5, c 2.2e308)
        log_c = np.log(x[free]) - np.log(sigma[free])
        np.testing.assert_allclose(log_c, log_c[0], rtol=0, atol=1e-9)
        # the clip form: prompts at L have c sigma <= L, at U have c sigma >= U
        pos = sigma > 0
        with np.errstate(divide="ignore"):
            at_lower = log_c[0] + np.log(sigma[pos & (x <= lower + 1e-9)])
            assert np.all(at_lower <= np.log(lower * (1 + 1e-9) + 1e-9) + 1e-9)
            at_upper = log_c[0] + np.log(sigma[pos & (x >= upper - 1e-9)])
            assert np.all(at_upper >= np.log(upper * (1 - 1e-9)) - 1e-9)


def test_water_level_continuous_with_subnormal_sigmas():
    """The counterexample hypothesis found: 14 prompts saturate at U, the other three share the
    rest in proportion to sigmas of 1e-308 and below (c ~ 2e308, past the largest float)."""
    sigma = np.array([0.1] * 14 + [1.11253693e-308, 2.22507386e-309, 4.94065646e-324])
    x = water_level_continuous(sigma, 199, 0, 14)
    np.testing.assert_allclose(x[:14], 14.0)
    np.testing.assert_allclose(x[14:], 3 * sigma[14:] / sigma[14:].sum(), rtol=1e-6, atol=1e-12)
    np.testing.assert_array_equal(water_level_allocation(sigma, 199, 0, 14), [14] * 14 + [2, 1, 0])


def test_water_level_hand_examples():
    # c = 2: clip([1, 4, 10], 2, 8) = [2, 4, 8] -> sums to 14
    np.testing.assert_array_equal(water_level_allocation([0.5, 2.0, 5.0], 14, 2, 8), [2, 4, 8])
    np.testing.assert_allclose(water_level_continuous([0.5, 2.0, 5.0], 14, 2, 8), [2, 4, 8])
    # uniform when sigma is constant or all zero
    np.testing.assert_array_equal(water_level_allocation([0.3] * 4, 18, 1, 8), [5, 5, 4, 4])
    np.testing.assert_array_equal(water_level_allocation([0.0] * 4, 18, 1, 8), [5, 5, 4, 4])
    # zero-sigma prompts get the excess only when the others are saturated
    np.testing.assert_array_equal(water_level_allocation([0.0, 1.0, 0.0], 20, 2, 8), [6, 8, 6])
    np.testing.assert_array_equal(water_level_allocation([0.0, 1.0, 0.0], 10, 2, 8), [2, 6, 2])


def test_water_level_errors():
    with pytest.raises(ValueError, match="infeasible budget"):
        water_level_allocation([1.0, 2.0], 17, 1, 8)
    with pytest.raises(ValueError, match="non-finite"):
        water_level_allocation([1.0, np.nan], 8, 1, 8)
    with pytest.raises(ValueError, match=">= 0"):
        water_level_allocation([1.0, -1.0], 8, 1, 8)
    with pytest.raises(ValueError, match="non-empty"):
        water_level_allocation([], 0, 1, 8)
    with pytest.raises(ValueError, match="budget must be an integer"):
        water_level_allocation([1.0, 2.0], 8.5, 1, 8)


# ----------------------------------------------------------------------------- rounding


@FAST
@given(st.integers(1, 30), st.integers(0, 5), st.integers(0, 10), st.randoms(use_true_random=False))
def test_round_to_budget_properties(q, lower, width, rnd):
    upper = lower + width
    x = np.array([rnd.uniform(lower, upper) for _ in range(q)])
    budget = int(round(x.sum()))
    x = x + (budget - x.sum()) / q  # make it feasible in sum, then check the bounds still hold
    if x.min() < lower or x.max() > upper:
        return
    n = round_to_budget(x, budget, lower, upper)
    assert n.sum() == budget and n.min() >= lower and n.max() <= upper
    assert np.all(np.abs(n - x) < 1)
    order = np.lexsort((-np.arange(q), x))  # ascending x; equal x: extras went to lower index
    assert np.all(np.diff(n[order]) >= 0)  # x_i > x_j => n_i >= n_j


def test_round_to_budget_ties_and_errors():
    np.testing.assert_array_equal(round_to_budget([1.5, 1.5, 1.5, 1.5], 6, 0, 3), [2, 2, 1, 1])
    np.testing.assert_array_equal(round_to_budget([1.5, 1.5], 3, 0, 3, tie_break=[0.0, 1.0]), [1, 2])
    with pytest.raises(ValueError, match="sums to"):
        round_to_budget([1.5, 1.5], 4, 0, 3)
    with pytest.raises(ValueError, match="leaves the bounds"):
        round_to_budget([0.5, 2.5], 3, 1, 3)
    with pytest.raises(ValueError, match="infeasible"):
        round_to_budget([1.0, 1.0], 7, 0, 3)


# ----------------------------------------------------------------------------- square-root law


@FAST
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 1)), min_size=1, max_size=12), st.floats(0.5, 16))
def test_sqrt_law_identities(bins, n_bar):
    v = np.array([b[0] for b in bins])
    q = np.array([b[1] for b in bins])
    q = q / q.sum()
    n = sqrt_law_allocation(v, q, n_bar)
    assert np.dot(q, n) == pytest.approx(n_bar, rel=1e-12)  # compute-neutral
    if np.any(v > 0):
        ratio = n[v > 0] / np.sqrt(v[v > 0])
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)  # n ∝ sqrt(v)
        assert np.all(n[v == 0] == 0)
        # Neyman optimality: sum q v / n is not beaten by a random compute-neutral perturbation
        rng = np.random.default_rng(0)
        obj = lambda m: float(np.sum(np.divide(q * v, m, out=np.zeros_like(m), where=v > 0)))  # noqa: E731
        for _ in range(5):
            m = n * np.exp(rng.normal(0, 0.1, n.size))
            m *= n_bar / np.dot(q, m)
            assert obj(m) >= obj(n) - 1e-9
    else:
        np.testing.assert_allclose(n, n_bar)


def test_sqrt_law_hand_example_and_errors():
    np.testing.assert_allclose(sqrt_law_allocation([1, 4, 0], [0.5, 0.25, 0.25], 4), [4, 8, 0])
    np.testing.assert_allclose(sqrt_law_allocation([0, 0], [0.5, 0.5], 4), [4, 4])
    np.testing.assert_allclose(sqrt_law_allocation([1, 0], [0.0, 1.0], 4), [4, 4])  # no mass on variance
    with pytest.raises(ValueError, match="sum to"):
        sqrt_law_allocation([1, 2], [3, 5], 4)
    with pytest.raises(ValueError, match="shares must be >= 0"):
        sqrt_law_allocation([1, 2], [1.5, -0.5], 4)
    with pytest.raises(ValueError, match="v must be >= 0"):
        sqrt_law_allocation([1, -2], [0.5, 0.5], 4)
    with pytest.raises(ValueError, match="non-finite"):
        sqrt_law_allocation([1, np.nan], [0.5, 0.5], 4)
    with pytest.raises(ValueError, match="shape"):
        sqrt_law_allocation([1, 2, 3], [0.5, 0.5], 4)
    with pytest.raises(ValueError, match="mean_budget"):
        sqrt_law_allocation([1, 2], [0.5, 0.5], -1)
