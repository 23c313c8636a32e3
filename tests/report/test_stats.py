"""Seed statistics: t intervals against scipy, paired and Welch comparisons, phrasing."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from replication.report.stats import Comparison, compare, describe, format_mean_ci, mean_ci


def test_mean_ci_matches_scipy_t_interval():
    x = np.array([0.31, 0.35, 0.29, 0.40, 0.33])
    ci = mean_ci(x)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert ci.mean == pytest.approx(x.mean())
    assert (ci.lo, ci.hi) == (pytest.approx(lo), pytest.approx(hi))
    assert ci.n == 5
    lo90, _ = stats.t.interval(0.90, 4, loc=x.mean(), scale=stats.sem(x))
    assert mean_ci(x, level=0.90).lo == pytest.approx(lo90)


def test_mean_ci_small_samples_and_nan():
    one = mean_ci([0.4])
    assert one.mean == 0.4 and math.isnan(one.lo) and one.n == 1
    assert mean_ci([]).n == 0
    assert mean_ci([0.1, np.nan, 0.3]).n == 2
    assert format_mean_ci(one) == "40.0"
    assert format_mean_ci(mean_ci([0.1, 0.3])).startswith("20.0 ± ")


def test_paired_comparison_matches_ttest_rel():
    a = pd.Series([0.50, 0.55, 0.52, 0.58], index=[0, 1, 2, 3])
    b = pd.Series([0.45, 0.50, 0.51, 0.50], index=[0, 1, 2, 3])
    c = compare(a, b)
    d = a - b
    assert c.test == "paired" and c.n == 4
    assert c.diff == pytest.approx(d.mean())
    assert c.p == pytest.approx(stats.ttest_rel(a, b).pvalue)
    lo, hi = stats.t.interval(0.95, 3, loc=d.mean(), scale=stats.sem(d))
    assert (c.lo, c.hi) == (pytest.approx(lo), pytest.approx(hi))
    assert c.significant == (c.p < 0.05)
    assert c.relative == pytest.approx(d.mean() / b.mean())


def test_pairing_is_by_seed_not_position():
    a = {0: 1.0, 1: 2.0, 2: 3.5}
    b = {2: 3.0, 0: 0.5, 1: 1.5}
    c = compare(a, b)
    assert c.test == "paired"
    assert c.diff == pytest.approx(0.5) and c.p == 0.0  # every matched difference is exactly 0.5
    assert c.lo == c.hi == pytest.approx(0.5)


def test_welch_when_seeds_differ():
    a = {0: 0.50, 1: 0.55, 2: 0.60}
    b = {0: 0.40, 1: 0.45, 3: 0.47, 4: 0.41}
    c = compare(a, b)
    x, y = np.array(list(a.values())), np.array(list(b.values()))
    assert c.test == "welch"
    assert c.p == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue)
    res = stats.ttest_ind(x, y, equal_var=False)
    lo, hi = res.confidence_interval(0.95)
    assert (c.lo, c.hi) == (pytest.approx(lo), pytest.approx(hi))


def test_describe_phrase():
    c = Comparison(diff=0.021, lo=-0.005, hi=0.047, p=0.11, n=3, test="paired", method_mean=0.3, baseline_mean=0.279)
    assert describe(c) == "+2.1 pts [\u22120.5, 4.7], not significant (p=0.11, n=3)"
    s = Comparison(0.05, 0.02, 0.08, 0.0004, 5, "welch", 0.5, 0.45)
    assert describe(s) == "+5.0 pts [2.0, 8.0], significant (p<0.001, n=5, Welch)"
    assert describe(compare([0.5], [0.4])) == "+10.0 pts, one seed, no CI"


def test_holm_adjustment_by_hand_and_nan_kept():
    from replication.report.stats import holm

    adj = holm([0.01, 0.04, float("nan"), 0.03])
    # sorted 0.01, 0.03, 0.04 with m = 3: 0.03, 0.06, 0.06 (monotone), NaN untouched
    assert adj[0] == pytest.approx(0.03) and adj[3] == pytest.approx(0.06) and adj[1] == pytest.approx(0.06)
    assert np.isnan(adj[2])


def test_minimum_detectable_effect_formula():
    from scipy import stats as st

    from replication.report.stats import minimum_detectable_effect

    a, b = [0.50, 0.55, 0.53], [0.48, 0.50, 0.52]
    c = compare(dict(enumerate(a)), dict(enumerate(b)))
    d = np.subtract(a, b)
    se = d.std(ddof=1) / np.sqrt(3)
    assert c.se == pytest.approx(se)
    assert c.mde == pytest.approx((st.t.ppf(0.975, 2) + st.t.ppf(0.8, 2)) * se)
    assert np.isnan(minimum_detectable_effect(float("nan"), 2))
    assert "MDE" in describe(c) and "Holm p=0.2" in describe(c, p_holm=0.2)


def test_tost_by_hand_and_the_interval_it_matches():
    """TOST within ±margin: p = max of the two one-sided t tests; p < α exactly when the
    (1 − 2α) interval lies inside (−margin, margin) (issue 37.4)."""
    from scipy import stats as st

    from replication.report.stats import tost

    rng = np.random.default_rng(3)
    a = rng.normal(0.50, 0.02, 10)
    b = a - rng.normal(0.002, 0.005, 10)
    cmp = compare(list(a), list(b))
    eq = tost(cmp, 0.015)
    d = a - b
    se = d.std(ddof=1) / np.sqrt(10)
    assert eq.p_lower == pytest.approx(st.t.sf((d.mean() + 0.015) / se, 9))
    assert eq.p_upper == pytest.approx(st.t.cdf((d.mean() - 0.015) / se, 9))
    assert eq.p == max(eq.p_lower, eq.p_upper)
    for margin in (0.001, 0.004, 0.006, 0.01, 0.05):
        ci90 = compare(list(a), list(b), level=0.90)
        inside = -margin < ci90.lo and ci90.hi < margin
        assert tost(cmp, margin).equivalent(0.05) == inside


def test_tost_degenerate_cases():
    from replication.report.stats import tost

    one = compare([0.5], [0.4])
    assert np.isnan(tost(one, 0.015).p) and not tost(one, 0.015).equivalent()
    flat = compare([0.5, 0.6], [0.5, 0.6])  # every difference 0: a point at 0
    assert tost(flat, 0.015).equivalent()
    off = compare([0.6, 0.7], [0.5, 0.6])  # every difference 0.1, beyond the margin
    assert not tost(off, 0.015).equivalent()
    with pytest.raises(ValueError):
        tost(flat, 0.0)


def test_holm_threshold_is_the_level_of_the_rows_step():
    from replication.report.stats import holm, holm_threshold

    fam = [0.001, 0.02, 0.04, np.nan, 0.5]
    assert holm_threshold(0.001, fam) == pytest.approx(0.05 / 4)
    assert holm_threshold(0.02, fam) == pytest.approx(0.05 / 3)
    assert holm_threshold(0.5, fam) == pytest.approx(0.05)
    assert np.isnan(holm_threshold(np.nan, fam))
    # the adjusted p crosses 0.05 exactly where the raw p crosses the row's threshold
    adj = holm([0.001, 0.02, 0.04, 0.5])
    assert [a < 0.05 for a in adj] == [p < holm_threshold(p, fam) for p in (0.001, 0.02, 0.04, 0.5)]
