"""Seed statistics: mean ± Student-t confidence interval, and arm-vs-baseline comparisons.

None of the three papers reports seeds or confidence intervals (paper_data/SOURCES.md);
every number this repository reports is a mean over seeds with a 95 % t interval, and every
"beats the baseline" claim is a test over seeds:

- ``mean_ci``: mean ± t_{n−1, 0.975} · sd/√n over seeds.
- ``compare``: method − baseline. Paired t-test over the seeds both arms ran (the arms then share
  data order, base model and evaluation samples, so pairing removes that shared noise); when the
  two seed sets differ, Welch's unequal-variance t-test on all values instead.
- ``describe``: one phrase, e.g. "+2.1 pts [−0.5, 4.7], not significant (p=0.11, n=3)";
  with one seed "+2.1 pts, one seed, no CI".
- ``holm``: Holm–Bonferroni adjusted p-values over a family of tests (each paper's comparisons).
- ``minimum_detectable_effect``: the smallest true difference the seeds could detect, from the
  observed seed variance: MDE = (t_{1−α/2, df} + t_{power, df}) · SE, two-sided α = 0.05,
  power 0.8; paired: SE = sd(differences)/√n, df = n − 1 (Welch: SE = √(s_a²/n_a + s_b²/n_b),
  Welch–Satterthwaite df). The central-t approximation of the non-central t power equation.
- ``tost``: two one-sided tests of equivalence within ±margin (Schuirmann 1987): p_TOST =
  max(P(T ≥ (d − (−margin))/SE), P(T ≤ (d − margin)/SE)) on the comparison's own SE and df;
  equivalence at level α ⇔ p_TOST < α ⇔ the (1 − 2α) t interval lies inside (−margin, margin).
  A "no effect" reading rests on this (or on the interval itself), never on the MDE alone: an
  MDE says what the seeds could have found, not what the data show (replication/report/reading.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

import numpy as np
from scipy import stats

MINUS = "\u2212"


@dataclasses.dataclass(frozen=True)
class MeanCI:
    """Mean over n values with a two-sided t confidence interval (NaN bounds when n < 2)."""

    mean: float
    lo: float
    hi: float
    n: int
    sd: float
    level: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2.0


@dataclasses.dataclass(frozen=True)
class Comparison:
    """method − baseline over seeds: difference of means, its t CI and two-sided p-value."""

    diff: float
    lo: float
    hi: float
    p: float
    n: int
    """Paired: number of matched seeds. Welch: the smaller of the two sample sizes."""
    test: str
    """"paired" or "welch"."""
    method_mean: float
    baseline_mean: float
    level: float = 0.95
    se: float = math.nan
    """Standard error of ``diff`` (NaN with fewer than two seeds on a side)."""
    df: float = math.nan
    """Degrees of freedom of the t test."""

    @property
    def mde(self) -> float:
        """Minimum detectable effect at two-sided α = 1 − level and power 0.8 (module docstring)."""
        return minimum_detectable_effect(self.se, self.df, alpha=1.0 - self.level)

    @property
    def significant(self) -> bool:
        """p below 1 − level (0.05 at the default level)."""
        return bool(np.isfinite(self.p) and self.p < 1.0 - self.level)

    @property
    def relative(self) -> float:
        """diff / baseline mean (NaN when the baseline mean is 0)."""
        return self.diff / self.baseline_mean if self.baseline_mean != 0 else math.nan


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def mean_ci(values: Iterable[float], level: float = 0.95) -> MeanCI:
    """Mean and two-sided Student-t interval over seeds: mean ± t_{n−1,(1+level)/2}·sd/√n.

    Non-finite values are dropped. n = 1 gives the value with NaN bounds (no spread estimate);
    n = 0 gives NaN everywhere.
    """
    x = _finite(values)
    n = x.size
    if n == 0:
        return MeanCI(math.nan, math.nan, math.nan, 0, math.nan, level)
    m = float(x.mean())
    if n == 1:
        return MeanCI(m, math.nan, math.nan, 1, math.nan, level)
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2.0, n - 1)) * sd / math.sqrt(n)
    return MeanCI(m, m - half, m + half, n, sd, level)


def _as_seed_map(values: Mapping | Iterable[float]) -> dict | None:
    if isinstance(values, Mapping):
        return {k: float(v) for k, v in values.items() if np.isfinite(v)}
    if hasattr(values, "index") and hasattr(values, "to_dict"):  # pandas Series indexed by seed
        return {k: float(v) for k, v in values.to_dict().items() if np.isfinite(v)}
    return None


def compare(method, baseline, level: float = 0.95) -> Comparison:
    """method − baseline over seeds (VIP/DynaMO/GDRO report single runs; we test over seeds).

    ``method`` and ``baseline`` are seed → value mappings (dict or pandas Series indexed by
    seed) or plain sequences. Paired t-test when both give the same seed set (≥ 2 seeds; plain
    sequences of equal length are paired by position); otherwise Welch's t-test with the
    Welch–Satterthwaite degrees of freedom. When every paired difference is identical the t
    statistic is infinite: p = 0 if that difference is non-zero, else 1, and the CI is a point.
    """
    ma, mb = _as_seed_map(method), _as_seed_map(baseline)
    if ma is not None and mb is not None:
        paired = set(ma) == set(mb) and len(ma) >= 2
        if paired:
            keys = sorted(ma)
            a = np.array([ma[k] for k in keys])
            b = np.array([mb[k] for k in keys])
        else:
            a, b = np.array(list(ma.values())), np.array(list(mb.values()))
    else:
        a, b = _finite(method if ma is None else ma.values()), _finite(baseline if mb is None else mb.values())
        paired = a.size == b.size and a.size >= 2 and ma is None and mb is None
    if paired:
        return _paired(a, b, level)
    return _welch(a, b, level)


def _constant(x: np.ndarray) -> bool:
    return bool(np.allclose(x, x[0], rtol=1e-12, atol=1e-14))


def _paired(a: np.ndarray, b: np.ndarray, level: float) -> Comparison:
    d = a - b
    n = d.size
    if _constant(d):  # float noise would otherwise give a huge t and scipy's precision warning
        m = float(d.mean())
        p = 0.0 if abs(m) > 1e-12 else 1.0
        return Comparison(m, m, m, p, n, "paired", float(a.mean()), float(b.mean()), level, 0.0, n - 1)
    ci = mean_ci(d, level)
    p = float(stats.ttest_rel(a, b).pvalue)
    return Comparison(ci.mean, ci.lo, ci.hi, p, n, "paired", float(a.mean()), float(b.mean()), level,
                      ci.sd / math.sqrt(n), n - 1)


def _welch(a: np.ndarray, b: np.ndarray, level: float) -> Comparison:
    na, nb = a.size, b.size
    ma = float(a.mean()) if na else math.nan
    mb = float(b.mean()) if nb else math.nan
    diff = ma - mb
    if na < 2 or nb < 2:
        return Comparison(diff, math.nan, math.nan, math.nan, min(na, nb), "welch", ma, mb, level)
    va, vb = a.var(ddof=1) / na, b.var(ddof=1) / nb
    se2 = va + vb
    if _constant(a) and _constant(b):
        return Comparison(diff, diff, diff, 0.0 if diff != 0 else 1.0, min(na, nb), "welch", ma, mb, level,
                          0.0, na + nb - 2)
    dof = se2**2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = float(stats.t.ppf(0.5 + level / 2.0, dof)) * math.sqrt(se2)
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return Comparison(diff, diff - half, diff + half, p, min(na, nb), "welch", ma, mb, level,
                      math.sqrt(se2), float(dof))


def minimum_detectable_effect(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE = (t_{1−α/2, df} + t_{power, df}) · se: the smallest true difference a two-sided
    t test at level α detects with probability ``power``, given the standard error the seeds
    showed. NaN when se or df is undefined (fewer than two seeds)."""
    if not (np.isfinite(se) and np.isfinite(df) and df >= 1):
        return math.nan
    return float((stats.t.ppf(1.0 - alpha / 2.0, df) + stats.t.ppf(power, df)) * se)


@dataclasses.dataclass(frozen=True)
class Equivalence:
    """TOST of |true difference| < margin: the two one-sided p-values and their max."""

    margin: float
    p_lower: float
    """H0: diff ≤ −margin."""
    p_upper: float
    """H0: diff ≥ +margin."""

    @property
    def p(self) -> float:
        return max(self.p_lower, self.p_upper)

    def equivalent(self, alpha: float = 0.05) -> bool:
        return bool(np.isfinite(self.p) and self.p < alpha)


def tost(cmp: Comparison, margin: float) -> Equivalence:
    """Two one-sided t tests of equivalence within ±``margin`` (same units as ``cmp.diff``) on the
    comparison's standard error and degrees of freedom (paired or Welch, as ``compare`` chose).

    Equivalence at level α (p < α) ⇔ the two-sided (1 − 2α) t interval of the difference lies
    inside (−margin, +margin). A point comparison (SE 0) is equivalent iff |diff| < margin. NaN
    p-values when the comparison has no SE (fewer than two seeds on a side)."""
    if not (margin > 0):
        raise ValueError(f"tost: margin must be > 0, got {margin!r}")
    se, df, d = float(cmp.se), float(cmp.df), float(cmp.diff)
    if not np.isfinite(d) or not np.isfinite(se) or not (np.isfinite(df) and df >= 1):
        return Equivalence(margin, math.nan, math.nan)
    if se == 0.0:
        return Equivalence(margin, 0.0 if d > -margin else 1.0, 0.0 if d < margin else 1.0)
    p_lower = float(stats.t.sf((d + margin) / se, df))
    p_upper = float(stats.t.cdf((d - margin) / se, df))
    return Equivalence(margin, p_lower, p_upper)


def holm_threshold(p: float, family: Iterable[float], alpha: float = 0.05) -> float:
    """The level Holm's step-down compares ``p`` with in its ``family`` of p-values (``p`` among
    them): α/(m − r + 1) with r the rank of ``p`` (1 = smallest; ties take the lower rank, i.e.
    the stricter level). The strictest is α/m (r = 1). NaN entries do not count in m."""
    fam = np.sort(_finite(family))
    m = fam.size
    if m == 0 or not np.isfinite(p):
        return math.nan
    r = int(np.searchsorted(fam, float(p), side="left")) + 1
    return alpha / (m - min(r, m) + 1)


def holm(pvalues: Iterable[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (step-down; monotone; capped at 1). NaN entries stay NaN
    and do not count in the family size."""
    p = np.asarray(list(pvalues), dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(adj, 1.0)
    return out


def _signed(x: float, digits: int) -> str:
    s = f"{x:+.{digits}f}"
    return s.replace("-", MINUS)


def _plain(x: float, digits: int) -> str:
    return f"{x:.{digits}f}".replace("-", MINUS)


def _p(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.2g}"


def describe(cmp: Comparison, scale: float = 100.0, unit: str = "pts", digits: int = 1,
             p_holm: float | None = None) -> str:
    """Phrase a comparison: "+2.1 pts [−0.5, 4.7], not significant (p=0.11, Holm p=0.9, n=3;
    MDE 3.2 pts)". With ``p_holm`` the verdict follows the Holm-adjusted p.

    ``scale`` multiplies the difference and CI (100: fractions → percentage points). One seed
    (or fewer than two on a side): "+2.1 pts, one seed, no CI".
    """
    d = cmp.diff * scale
    head = f"{_signed(d, digits)} {unit}".rstrip()
    if cmp.n < 2 or not np.isfinite(cmp.p):
        return f"{head}, one seed, no CI" if cmp.n <= 1 else f"{head}, no test (n={cmp.n})"
    if np.isfinite(cmp.lo):
        head += f" [{_plain(cmp.lo * scale, digits)}, {_plain(cmp.hi * scale, digits)}]"
    p_adj = cmp.p if p_holm is None or not np.isfinite(p_holm) else float(p_holm)
    verdict = "significant" if p_adj < 1.0 - cmp.level else "not significant"
    ps = _p(cmp.p) + ("" if p_holm is None else f", Holm {_p(p_adj)}")
    test = "" if cmp.test == "paired" else ", Welch"
    mde = cmp.mde
    tail = f"; MDE {mde * scale:.{digits}f} {unit}".rstrip() if np.isfinite(mde) else ""
    return f"{head}, {verdict} ({ps}, n={cmp.n}{test}{tail})"


def format_mean_ci(ci: MeanCI, scale: float = 100.0, digits: int = 1) -> str:
    """"12.3 ± 1.4" (scaled); just "12.3" when the interval is undefined (one seed)."""
    if not np.isfinite(ci.mean):
        return "–"
    m = _plain(ci.mean * scale, digits)
    if not np.isfinite(ci.lo):
        return m
    return f"{m} ± {ci.half_width * scale:.{digits}f}"
