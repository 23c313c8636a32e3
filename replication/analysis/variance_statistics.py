"""Statistics of the gradient draws: total and projected variance, signal, noise-to-signal ratio
and the shares, each with a bootstrap CI and as a ratio to uniform (docs/gradient_variance.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.analysis.gradient_draws import DrawSet

METRICS = ("total_variance", "projected_variance", "signal", "noise_to_signal", "projected_noise_to_signal",
           "nonzero_share", "departure_share")
RATIO_METRICS = ("total_variance", "projected_variance", "noise_to_signal", "projected_noise_to_signal",
                 "nonzero_share")


def _stats(ds: DrawSet, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of the resamples idx [B, D] (row 0 may be the identity)."""
    d = idx.shape[1]
    g = ds.gram
    diag = np.diag(g)[idx].mean(axis=1)
    mean_sq = g[idx[:, :, None], idx[:, None, :]].mean(axis=(1, 2))  # ‖ḡ‖²
    tr = (diag - mean_sq) * d / (d - 1)
    signal = mean_sq - tr / d
    proj = ds.projection[idx]
    pvar = proj.var(axis=1, ddof=1)
    pmean = proj.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        nsr = np.where(signal > 0, tr / signal, np.nan)
        psig = pmean**2 - pvar / d
        pnsr = np.where(psig > 0, pvar / psig, np.nan)
    return {"total_variance": tr, "projected_variance": pvar, "signal": signal, "noise_to_signal": nsr,
            "projected_noise_to_signal": pnsr, "nonzero_share": ds.nonzero_share[idx].mean(axis=1),
            "departure_share": ds.departure_share[idx].mean(axis=1)}


def summarise_draws(sets: dict[str, DrawSet], n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
    """Tidy rows (method, metric, value, lo, hi, n_draws): each metric with a bootstrap CI, and
    ``<metric>_vs_uniform`` ratios whose CI resamples the method's and uniform's draws
    independently. Uniform's own ratio is exactly 1 (no CI)."""
    if "uniform" not in sets:
        raise ValueError("summarise_draws needs the 'uniform' draws (the ratios' base)")
    rng = np.random.default_rng(seed)
    a = (1 - level) / 2

    def boot(ds: DrawSet) -> dict[str, np.ndarray]:
        d = len(ds.nonzero_share)
        idx = np.vstack([np.arange(d)[None, :], rng.integers(0, d, size=(n_boot, d))])
        return _stats(ds, idx)

    stats = {name: boot(ds) for name, ds in sets.items()}
    base = stats["uniform"]
    ref = sets["uniform"].mean
    rows = []
    for name, st in stats.items():
        n = len(sets[name].nonzero_share)

        def ci(values: np.ndarray) -> tuple[float, float]:
            v = values[1:][np.isfinite(values[1:])]
            if len(v) < 0.9 * n_boot:  # an unstable ratio (signal ≤ 0 in many resamples)
                return float("nan"), float("nan")
            return float(np.quantile(v, a)), float(np.quantile(v, 1 - a))

        for metric in METRICS:
            lo, hi = ci(st[metric])
            rows.append({"method": name, "metric": metric, "value": float(st[metric][0]), "lo": lo, "hi": hi,
                         "n_draws": n})
        for metric in RATIO_METRICS:
            if name == "uniform":
                rows.append({"method": name, "metric": f"{metric}_vs_uniform", "value": 1.0, "lo": np.nan,
                             "hi": np.nan, "n_draws": n})
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                r = st[metric] / base[metric]
            lo, hi = ci(r)
            rows.append({"method": name, "metric": f"{metric}_vs_uniform", "value": float(r[0]), "lo": lo,
                         "hi": hi, "n_draws": n})
        m = sets[name].mean
        cos = float(m @ ref / max(np.linalg.norm(m) * np.linalg.norm(ref), 1e-300))
        rows.append({"method": name, "metric": "cosine_to_uniform_mean", "value": cos, "lo": np.nan, "hi": np.nan,
                     "n_draws": n})
    return pd.DataFrame(rows)
