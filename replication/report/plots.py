"""Figures for the notebooks, saved as PNG.

Figures are built with matplotlib's object API (``matplotlib.figure.Figure``, rendered by the Agg
canvas) rather than pyplot, so nothing depends on the session's backend and no global figure
state leaks between calls; each function saves to ``path`` and returns the Figure (a notebook
displays it). Error bars and bands are 95 % Student-t intervals over seeds (stats.mean_ci), not
seaborn's bootstrap.

- ``arm_comparison``: held-out metrics per set, one point ± CI per arm (papers' main tables).
- ``training_curves``: reward, zero-variance fraction, grad norm, entropy per step, mean ± band
  (DynaMO's claim of smoother gradient norm and entropy).
- ``allocation_curve``: rollouts n against predicted p, scatter and binned mean (VIP's
  allocation shape: most rollouts near p = 1/2).
- ``bin_share_heatmap``: GDRO rollout share per difficulty bin over time.
- ``weight_mass_heatmap``: Prompt-GDRO weight mass per bin over time.
- ``paper_vs_ours_scatter``: the paper's Δ against ours ± CI, one point per comparable row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from scipy import stats

from replication.report.gdro_diagnostics import rollout_share
from replication.report.tables import arm_summary

CURVE_KEYS = ("reward", "zero_variance_frac", "grad_norm", "entropy")


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Figure:
    """Write ``fig`` as PNG (folders created) and return it; rendered in memory and written
    whole (store.write_atomic), so a full disk leaves no truncated image and is one line."""
    import io

    from replication.store import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=dpi, bbox_inches="tight")
    write_atomic(path, buf.getvalue())
    return fig


def _palette(names: Sequence[str]) -> dict:
    return dict(zip(names, sns.color_palette("colorblind", max(len(names), 1))))


def arm_comparison(eval_df: pd.DataFrame, path: str | Path, phase: str = "after",
                   metrics: Sequence[str] | None = None, sets: Sequence[str] | None = None) -> Figure:
    """One panel per metric; x = held-out set (+ average, pooled), one point ± 95 % CI per arm."""
    s = arm_summary(eval_df, phase, metrics, sets)
    metrics = list(pd.unique(s["metric"]))
    arms = list(pd.unique(s["arm"]))
    colors = _palette(arms)
    fig = Figure(figsize=(max(5.0, 1.1 * s["set"].nunique() + 2), 3.2 * len(metrics)))
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    for ax, metric in zip(axes, metrics):
        part = s[s["metric"] == metric]
        set_names = list(pd.unique(part["set"]))
        x0 = np.arange(len(set_names))
        width = 0.7 / max(len(arms), 1)
        for j, arm in enumerate(arms):
            a = part[part["arm"] == arm].set_index("set").reindex(set_names)
            x = x0 - 0.35 + width * (j + 0.5)
            err = np.vstack([a["mean"] - a["lo"], a["hi"] - a["mean"]]) * 100
            ax.errorbar(x, a["mean"] * 100, yerr=np.nan_to_num(err), fmt="o", capsize=3,
                        color=colors[arm], label=arm)
        ax.set_xticks(x0, set_names, rotation=30, ha="right")
        ax.set_ylabel(f"{metric} (%)")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, ncol=min(len(arms), 4), loc="best")
    axes[0].set_title(f"held-out metrics ({phase} training), mean ± 95 % CI over seeds")
    fig.tight_layout()
    return save(fig, path)


def _band(values: pd.DataFrame, level: float = 0.95) -> pd.DataFrame:
    g = values.groupby("step")["value"]
    out = g.agg(["mean", "std", "count"])
    t = stats.t.ppf(0.5 + level / 2, np.maximum(out["count"] - 1, 1))
    half = np.where(out["count"] > 1, t * out["std"] / np.sqrt(out["count"]), 0.0)
    out["lo"], out["hi"] = out["mean"] - half, out["mean"] + half
    return out


def training_curves(steps_df: pd.DataFrame, path: str | Path, keys: Sequence[str] = CURVE_KEYS,
                    smooth: int = 1) -> Figure:
    """Per-step training signals, mean over seeds ± 95 % t band, one panel per key.

    ``smooth`` > 1 applies a centred rolling mean over that many steps to each run first.
    """
    keys = [k for k in keys if k in steps_df.columns]
    arms = list(pd.unique(steps_df["arm"]))
    colors = _palette(arms)
    ncol = 2
    nrow = int(np.ceil(len(keys) / ncol))
    fig = Figure(figsize=(5.5 * ncol, 3.0 * nrow))
    axes = fig.subplots(nrow, ncol, squeeze=False).ravel()
    for ax, key in zip(axes, keys):
        for arm in arms:
            runs = steps_df[steps_df["arm"] == arm].sort_values("step")
            v = runs.groupby("seed")[key].transform(
                lambda s: s.rolling(smooth, center=True, min_periods=1).mean()) if smooth > 1 else runs[key]
            b = _band(pd.DataFrame({"step": runs["step"], "value": pd.to_numeric(v, errors="coerce")}))
            ax.plot(b.index, b["mean"], color=colors[arm], label=arm, lw=1.3)
            ax.fill_between(b.index, b["lo"], b["hi"], color=colors[arm], alpha=0.2, lw=0)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[len(keys):]:
        ax.set_visible(False)
    if keys:
        axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def allocation_curve(prompts_df: pd.DataFrame, path: str | Path, x: str = "predicted_p",
                     n_bins: int = 10, max_points: int = 5000, seed: int = 0) -> Figure:
    """Rollouts per prompt n against ``x`` (default the allocator's predicted p): a thinned
    scatter and the mean n in ``n_bins`` equal-width bins of x, per arm. Records without x
    (allocators that log no prediction) are left out."""
    df = prompts_df[prompts_df[x].notna()] if x in prompts_df else prompts_df.iloc[0:0]
    arms = list(pd.unique(df["arm"])) if not df.empty else []
    colors = _palette(arms)
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.subplots()
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    rng = np.random.default_rng(seed)
    for arm in arms:
        a = df[df["arm"] == arm]
        pts = a.iloc[rng.permutation(len(a))[:max_points]]
        jitter = rng.uniform(-0.15, 0.15, len(pts))
        ax.scatter(pts[x], pts["n"] + jitter, s=4, alpha=0.15, color=colors[arm])
        idx = np.clip(np.digitize(a[x], edges) - 1, 0, n_bins - 1)
        binned = a.groupby(idx)["n"].mean()
        ax.plot((edges[binned.index] + edges[binned.index + 1]) / 2, binned.values, "-o",
                color=colors[arm], label=arm, ms=4)
    ax.set_xlabel(x)
    ax.set_ylabel("rollouts n")
    ax.set_title("allocation: rollouts vs " + x)
    ax.grid(alpha=0.3)
    if arms:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def _heatmaps(mats: dict[str, pd.DataFrame], path: str | Path, title: str, cbar: str) -> Figure:
    """One heatmap per arm on a shared colour scale (so panels compare), bin 0 at the bottom."""
    fig = Figure(figsize=(7.0, 2.8 * max(len(mats), 1)))
    axes = fig.subplots(max(len(mats), 1), 1, squeeze=False)[:, 0]
    vmax = max([float(np.nanmax(m.to_numpy())) for m in mats.values() if m.size] + [1e-9])
    for ax, (arm, mat) in zip(axes, mats.items()):
        sns.heatmap(mat, ax=ax, cmap="viridis", vmin=0.0, vmax=vmax, cbar_kws={"label": cbar})
        ax.invert_yaxis()  # bin 0 (lowest pass rate) at the bottom
        ax.set_title(f"{title} — {arm}")
        ax.set_ylabel("bin")
    fig.tight_layout()
    return save(fig, path)


def bin_share_heatmap(prompts_df: pd.DataFrame, path: str | Path, step_window: int = 10,
                      arms: Sequence[str] | None = None, **classifier_options) -> Figure:
    """GDRO rollout share per difficulty bin (rows) per window of steps (columns), mean over
    seeds, one panel per arm (GDRO's "rollouts go to bins ≥ 5" figure)."""
    share = rollout_share(prompts_df, step_window=step_window, **classifier_options)
    arms = list(arms) if arms is not None else list(pd.unique(share["arm"]))
    n_bins = max(int(classifier_options.get("n_bins", 10)), int(share["bin"].max()) + 1)
    mats = {}
    for arm in arms:
        s = share[share["arm"] == arm].groupby(["bin", "window_start"])["rollout_share"].mean()
        mats[arm] = s.unstack("window_start").reindex(range(n_bins)).fillna(0.0)
    return _heatmaps(mats, path, "rollout share per bin", "share of rollouts")


def weight_mass_heatmap(steps_df: pd.DataFrame, path: str | Path, arms: Sequence[str] | None = None) -> Figure:
    """Prompt-GDRO weight mass per bin (rows) per step (columns), mean over seeds, from the
    steps' ``weight_mass_per_bin`` lists; arms that did not log it are skipped."""
    col = "weight_mass_per_bin"
    df = steps_df.iloc[0:0]
    if col in steps_df:
        df = steps_df[steps_df[col].apply(lambda v: isinstance(v, (list, tuple, np.ndarray)))]
    arms = list(arms) if arms is not None else list(pd.unique(df["arm"]))
    mats = {}
    for arm in arms:
        a = df[df["arm"] == arm]
        if a.empty:
            continue
        wide = pd.DataFrame(a[col].tolist(), index=a["step"].to_numpy())
        mats[arm] = wide.groupby(level=0).mean().T
    return _heatmaps(mats, path, "Prompt-GDRO weight mass per bin", "weight mass")


def _spread(ys: Sequence[float], lo: float, hi: float, gap: float) -> list[float]:
    """Label heights near ``ys`` (in order), at least ``gap`` apart and within [lo, hi]."""
    order = np.argsort(ys)
    out = np.asarray(ys, dtype=float)[order].copy()
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1] + gap)
    if len(out) and out[-1] > hi:  # pushed past the top: shift down, keeping the gaps
        out -= out[-1] - hi
    if len(out) and out[0] < lo:
        out = lo + gap * np.arange(len(out))
    res = np.empty_like(out)
    res[order] = out
    return list(res)


def paper_vs_ours_scatter(pvo: pd.DataFrame, path: str | Path, title: str | None = None) -> Figure:
    """The paper's baseline → method change (x, points) against ours (y, points, 95 % CI over
    seeds as error bars), one point per row of ``paper_tables.paper_vs_ours`` (or its CSV read
    back) that has an analogue of ours, labelled at the right margin (paper row ↔ ours); rows
    without one are left to the table and counted in the footnote. Dashed x = 0 and y = 0: a
    point right of 0 and above 0 agrees in direction with the paper; an error bar crossing y = 0
    is a change of ours not told apart from none."""
    paired = pvo[pvo["analogue"] == "paired"] if "analogue" in pvo else pvo.iloc[0:0]
    methods = list(pd.unique(paired["method"])) if not paired.empty else []
    colors = _palette(methods)
    fig = Figure(figsize=(9.0, 4.6))
    ax = fig.subplots()
    xs, ys, points = [0.0], [0.0], []
    for r in paired.itertuples():
        x, y = float(r.paper_abs), float(r.our_abs)
        lo, hi = float(r.our_abs_lo), float(r.our_abs_hi)
        ax.errorbar([x], [y], yerr=[[y - lo], [hi - y]], fmt="o", capsize=4, color=colors[r.method],
                    label=r.method)
        points.append((x, y, f"{r.method}: {r.benchmark} {r.metric} ↔ ours {r.our_set} {r.our_metric}",
                       colors[r.method]))
        xs += [x]
        ys += [lo, hi]
    ax.axhline(0.0, color="0.35", lw=0.9, ls="--", zorder=0)
    ax.axvline(0.0, color="0.35", lw=0.9, ls="--", zorder=0)
    xspan = max(xs) - min(xs) or 1.0
    ax.set_xlim(min(xs) - 0.15 * xspan, max(xs) + 0.15 * xspan)
    yspan = max(ys) - min(ys) or 1.0
    y0, y1 = min(ys) - 0.15 * yspan, max(ys) + 0.15 * yspan
    ax.set_ylim(y0, y1)
    heights = _spread([p[1] for p in points], y0, y1, 0.08 * (y1 - y0))
    for (x, y, label, color), h in zip(points, heights):
        ax.annotate(label, (x, y), xytext=(1.03, h), textcoords=("axes fraction", "data"), fontsize=7,
                    color=color, va="center", annotation_clip=False,
                    arrowprops={"arrowstyle": "-", "color": color, "lw": 0.6, "alpha": 0.6})
    if methods:  # one legend entry per method
        handles, labels = ax.get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        ax.legend(seen.values(), seen.keys(), fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no paper row has an analogue of ours", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("paper: method − baseline (points)")
    ax.set_ylabel("ours: method − baseline (points, 95 % CI)")
    ax.set_title(title or "the paper's change against ours (small-scale analogue)", fontsize=10)
    ax.grid(alpha=0.3)
    left_out = len(pvo) - len(paired)
    if left_out:
        fig.text(0.01, -0.02, f"{left_out} of {len(pvo)} paper rows have no analogue of ours "
                 "(table only: paper_vs_ours.md says why)", fontsize=7, ha="left", va="top")
    fig.subplots_adjust(left=0.09, right=0.6, bottom=0.13, top=0.92)  # the right margin holds the labels
    return save(fig, path)
