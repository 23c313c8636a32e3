"""Tables and plots of the measured gradient variance (analysis/gradient_variance.py), and the
allocation lab's simulated ratios beside them (report/lab.py).

Input: the tidy frame of ``run_grad_variance`` (or its CSV): step, method, metric, value, lo, hi.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HEADLINE = ("total_variance_vs_uniform", "noise_to_signal_vs_uniform", "projected_variance_vs_uniform",
            "nonzero_share_vs_uniform")
LAB_METRIC = {"rloo": "variance_rloo_vs_uniform", "drgrpo": "variance_drgrpo_vs_uniform",
              "grpo": "variance_drgrpo_vs_uniform"}
"""The lab's objective closest to each estimator (the lab has no std-normalised GRPO objective;
Dr. GRPO is GRPO without the std division)."""


def load_gradient_variance(path: str | Path) -> pd.DataFrame:
    """Read OUT/gradient_variance.csv (or the folder holding it) once the folder's manifest
    verifies (replication/store): a damaged or incomplete measurement raises DamagedArtifact
    naming it rather than feeding a table."""
    from replication.analysis.gradvar_config import KIND
    from replication.store import verify_manifest

    p = Path(path)
    if p.is_dir():
        p = p / "gradient_variance.csv"
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist: run `python -m replication grad-variance` first")
    verify_manifest(p.parent, kind=KIND)
    return pd.read_csv(p)


def _fmt(v: float, lo: float, hi: float, digits: int = 2) -> str:
    if not np.isfinite(v):
        return "n/a"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def variance_table(df: pd.DataFrame, metrics=HEADLINE) -> pd.DataFrame:
    """One row per (step, method): each headline ratio to uniform as "value [lo, hi]" (bootstrap
    95 % CI), plus the raw non-zero-advantage share and the share of prompts with n ≠ n̄."""
    d = df[df["method"] != "batch"]
    rows = []
    for (step, method), g in d.groupby(["step", "method"], sort=False):
        by = g.set_index("metric")
        row = {"step": int(step), "method": method}
        for m in metrics:
            if m in by.index:
                r = by.loc[m]
                row[m.replace("_vs_uniform", " ×unif")] = _fmt(r["value"], r["lo"], r["hi"])
        for m in ("nonzero_share", "departure_share"):
            if m in by.index:
                row[m] = f"{by.loc[m, 'value']:.2f}"
        rows.append(row)
    return pd.DataFrame(rows)


def lab_comparison(df: pd.DataFrame, lab: pd.DataFrame, estimator: str = "rloo") -> pd.DataFrame:
    """Measured ratios (mean over checkpoints, with each checkpoint's value) beside the lab's
    simulated ones, per method present in both. ``lab``: summarise_lab's frame or the committed
    results/<paper>/tables/allocation_lab.csv (method, metric, mean, lo, hi)."""
    if estimator not in LAB_METRIC:
        raise ValueError(f"estimator {estimator!r}; known: {sorted(LAB_METRIC)}")
    lab_var = LAB_METRIC[estimator]
    lab_idx = lab.set_index(["method", "metric"])
    d = df[df["method"] != "batch"]
    rows = []
    for method, g in d.groupby("method", sort=False):
        by = g.pivot_table(index="step", columns="metric", values="value")
        row = {"method": method}
        for col, m in (("measured var ×unif", "total_variance_vs_uniform"),
                       ("measured noise/signal ×unif", "noise_to_signal_vs_uniform"),
                       ("measured non-zero ×unif", "nonzero_share_vs_uniform")):
            if m in by:
                vals = by[m].dropna()
                row[col] = f"{vals.mean():.2f} ({', '.join(f'{v:.2f}' for v in vals)})" if len(vals) else "n/a"
        for col, m in ((f"lab {lab_var.replace('_vs_uniform', '')} ×unif", lab_var),
                       ("lab non-zero ×unif", "nonzero_expected_vs_uniform")):
            if (method, m) in lab_idx.index:
                r = lab_idx.loc[(method, m)]
                row[col] = _fmt(r["mean"], r["lo"], r["hi"])
            else:
                row[col] = "not in lab"
        rows.append(row)
    return pd.DataFrame(rows)


def plot_gradient_variance(df: pd.DataFrame, path=None, metrics=("total_variance_vs_uniform",
                           "noise_to_signal_vs_uniform", "nonzero_share_vs_uniform")):
    """One panel per metric: ratio to uniform (log scale, 95 % bootstrap CI) per method, one
    colour per checkpoint step. Returns the figure (saved to ``path`` when given)."""
    import seaborn as sns
    from matplotlib.figure import Figure

    d = df[df["metric"].isin(metrics) & (df["method"] != "batch")].copy()
    methods = list(dict.fromkeys(d["method"]))
    steps = sorted(d["step"].unique())
    palette = sns.color_palette("viridis", len(steps))
    fig = Figure(figsize=(4.4 * len(metrics), 0.45 * len(methods) + 1.6))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        part = d[d["metric"] == metric]
        for k, step in enumerate(steps):
            s = part[part["step"] == step].set_index("method").reindex(methods)
            y = np.arange(len(methods)) + (k - (len(steps) - 1) / 2) * 0.18
            err = np.vstack([s["value"] - s["lo"], s["hi"] - s["value"]])
            ax.errorbar(s["value"], y, xerr=np.nan_to_num(np.abs(err)), fmt="o", ms=4, capsize=2,
                        color=palette[k], label=f"step {step}")
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yticks(np.arange(len(methods)), methods)
        ax.invert_yaxis()
        ax.set_title(metric.replace("_vs_uniform", " ÷ uniform").replace("_", " "), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    fig.tight_layout()
    if path is not None:
        from replication.report.plots import save

        save(fig, path)
    return fig
