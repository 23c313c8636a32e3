"""Share of the oracle's gain (issue 37.3): for every method, (method − baseline) / (oracle −
baseline) on held-out accuracy after training, paired by seed, with a bootstrap CI over seeds.

The true-p oracle (each paper's ``+true-p`` arm: VIP's program told p by a 64-rollout probe,
under the paper's baseline estimator) is the positive control: what allocation told p gains over
uniform at the same budget. A method's share says how much of that gain it recovers (1 = all of
it, 0 = none, < 0 = it loses ground). The ratio means nothing when the oracle itself gains
nothing, so a share is reported only where the oracle's own gain has a 95 % t-interval above 0;
elsewhere the row says why it is not.

The CI resamples seeds with replacement (the same seeds for numerator and denominator, so their
correlation is kept) and takes the percentile interval of the ratio of means; resamples whose
oracle gain is not positive are dropped and counted (``dropped``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

NOT_REPORTED = "not reported: the oracle's own gain has no 95 % interval above 0"


def _after(ev: pd.DataFrame, arm: str, set_: str, metric: str) -> pd.Series:
    sel = (ev["arm"] == arm) & (ev["set"] == set_) & (ev["metric"] == metric) & (ev["phase"] == "after")
    return ev[sel].set_index("seed")["value"]


def oracle_share(ev: pd.DataFrame, baseline: str, oracle: str, methods: Sequence[str],
                 sets: Sequence[str] = ("average",), metrics: Sequence[str] | None = None,
                 n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> pd.DataFrame:
    """One row per method, set and metric: the oracle's gain (mean, t-interval), the method's,
    the share with its bootstrap CI, or the reason it is not reported. ``ev``: the notebooks'
    long evaluation frame (arm, seed, phase, set, metric, value)."""
    metrics = list(metrics) if metrics else sorted(m for m in ev["metric"].unique()
                                                   if m.startswith(("mean@", "pass@")) and m != "pass@1")
    rng = np.random.default_rng(seed)
    rows = []
    for s in sets:
        for m in metrics:
            base, orc = _after(ev, baseline, s, m), _after(ev, oracle, s, m)
            for method in methods:
                meth = _after(ev, method, s, m)
                seeds = sorted(set(base.index) & set(orc.index) & set(meth.index))
                row = {"method": method, "baseline": baseline, "oracle": oracle, "set": s, "metric": m,
                       "n": len(seeds)}
                if len(seeds) < 2:
                    rows.append({**row, "note": "fewer than 2 seeds with all three arms"})
                    continue
                d_o = (orc[seeds] - base[seeds]).to_numpy(float)
                d_m = (meth[seeds] - base[seeds]).to_numpy(float)
                half = sps.t.ppf(0.5 + level / 2, len(d_o) - 1) * d_o.std(ddof=1) / math.sqrt(len(d_o))
                row.update({"oracle_gain": d_o.mean(), "oracle_gain_lo": d_o.mean() - half,
                            "oracle_gain_hi": d_o.mean() + half, "method_gain": d_m.mean()})
                if not row["oracle_gain_lo"] > 0:
                    rows.append({**row, "note": NOT_REPORTED})
                    continue
                idx = rng.integers(0, len(seeds), size=(n_boot, len(seeds)))
                num, den = d_m[idx].mean(axis=1), d_o[idx].mean(axis=1)
                ok = den > 0
                ratios = num[ok] / den[ok]
                lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
                rows.append({**row, "share": d_m.mean() / d_o.mean(), "share_lo": float(lo), "share_hi": float(hi),
                             "dropped": int((~ok).sum()), "note": ""})
    return pd.DataFrame(rows)


def describe_share(row) -> str:
    """One line: the share with its CI, or why there is none."""
    if isinstance(row.get("note"), str) and row["note"]:
        return f"{row['method']}: {row['note']}"
    return (f"{row['method']}: {100 * row['share']:.0f} % of the oracle's gain "
            f"[{100 * row['share_lo']:.0f}, {100 * row['share_hi']:.0f}] "
            f"(oracle +{100 * row['oracle_gain']:.1f} pts, n={row['n']})")
