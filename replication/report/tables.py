"""Per-arm held-out tables and arm-vs-baseline comparisons, written as CSV and Markdown.

The papers' main tables (VIP Table 1, DynaMO's README tables, GDRO Table 1) list one number per
method and benchmark; ours list mean ± 95 % CI over seeds per held-out set, the mean over sets
("average") and the pooled set ("pooled", GDRO's pooled pass@k), and a paired test against a
named baseline arm (stats.compare). Sets named ``*-indist`` (in-distribution: their problems are
in the train pool) are shown under that name and never enter "average" / "pooled".

Multiplicity: every comparison row carries its raw p and the Holm-adjusted p over the family
(``add_holm``: all rows of one paper's comparison table), its minimum detectable effect
(``mde``, stats.minimum_detectable_effect) and ``significant_holm``; the text's verdict follows
the Holm p.

Pairing: a comparison is paired only when both arms have a finite value for the same seeds.
Otherwise (a seed missing or non-finite on one side) it falls back to Welch and the row says so:
an ``unpaired`` column (present only then) names the seeds on one side only, and the text ends
with "UNPAIRED: ..." — a paired
test never turns into an unpaired one unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

import numpy as np

from replication.report.stats import Comparison, MeanCI, compare, describe, format_mean_ci, holm, mean_ci

SUMMARY_SETS = ("average", "pooled")
_AT_K = re.compile(r"^(mean|pass)@(\d+)$")


def default_metrics(eval_df: pd.DataFrame) -> list[str]:
    """mean@k and pass@k for the evaluator's k (pass@1 equals mean@k for the unbiased estimator,
    so it is left out unless asked for)."""
    found = [m for m in pd.unique(eval_df["metric"]) if _AT_K.match(str(m))]
    ks = sorted({int(_AT_K.match(m).group(2)) for m in found})
    k = max(ks) if ks else 1
    return [m for m in (f"mean@{k}", f"pass@{k}") if m in found]


def ordered_sets(eval_df: pd.DataFrame) -> list[str]:
    """Held-out sets in name order, then "average" and "pooled"."""
    names = [str(s) for s in pd.unique(eval_df["set"])]
    return sorted(n for n in names if n not in SUMMARY_SETS) + [s for s in SUMMARY_SETS if s in names]


def _select(eval_df: pd.DataFrame, phase: str, metrics: Sequence[str] | None, sets: Sequence[str] | None):
    df = eval_df[eval_df["phase"] == phase]
    metrics = list(metrics) if metrics is not None else default_metrics(df)
    sets = list(sets) if sets is not None else ordered_sets(df)
    return df[df["metric"].isin(metrics) & df["set"].isin(sets)], metrics, sets


def arm_summary(eval_df: pd.DataFrame, phase: str = "after", metrics: Sequence[str] | None = None,
                sets: Sequence[str] | None = None) -> pd.DataFrame:
    """Long numeric table: arm, set, metric, mean, lo, hi, n (95 % t CI over seeds)."""
    df, metrics, sets = _select(eval_df, phase, metrics, sets)
    rows = []
    for arm in pd.unique(df["arm"]):
        for s in sets:
            for m in metrics:
                ci = mean_ci(df[(df["arm"] == arm) & (df["set"] == s) & (df["metric"] == m)]["value"])
                if ci.n:
                    rows.append({"arm": arm, "set": s, "metric": m, "mean": ci.mean, "lo": ci.lo,
                                 "hi": ci.hi, "n": ci.n})
    return pd.DataFrame(rows, columns=["arm", "set", "metric", "mean", "lo", "hi", "n"])


def arm_table(eval_df: pd.DataFrame, phase: str = "after", metrics: Sequence[str] | None = None,
              sets: Sequence[str] | None = None, scale: float = 100.0, digits: int = 1) -> pd.DataFrame:
    """Display table: one row per arm, one column per "set metric", cells "mean ± CI" (in %
    at the default scale), plus the number of seeds."""
    summary = arm_summary(eval_df, phase, metrics, sets)
    if summary.empty:
        return pd.DataFrame()
    summary["cell"] = [
        format_mean_ci(MeanCI(r.mean, r.lo, r.hi, int(r.n), float("nan")), scale, digits)
        for r in summary.itertuples()
    ]
    summary["column"] = summary["set"] + " " + summary["metric"]
    cols = list(dict.fromkeys(summary["column"]))
    wide = summary.pivot(index="arm", columns="column", values="cell")[cols]
    wide = wide.reindex(pd.unique(summary["arm"]))
    wide.insert(0, "seeds", summary.groupby("arm", sort=False)["n"].max())
    return wide.reset_index()


def compare_to_baseline(eval_df: pd.DataFrame, baseline: str, phase: str = "after",
                        metrics: Sequence[str] | None = None, sets: Sequence[str] | None = None,
                        scale: float = 100.0) -> pd.DataFrame:
    """Every other arm against ``baseline`` per set and metric: paired over matched seeds
    (Welch otherwise). Columns: arm, baseline, set, metric, baseline_mean, method_mean, diff, lo,
    hi, relative, p, n, test, significant, text (stats.describe at ``scale``)."""
    df, metrics, sets = _select(eval_df, phase, metrics, sets)
    if baseline not in set(df["arm"]):
        raise ValueError(f"baseline arm {baseline!r} not found; arms: {list(pd.unique(df['arm']))}")
    rows = []
    for arm in pd.unique(df["arm"]):
        if arm == baseline:
            continue
        for s in sets:
            for m in metrics:
                sel = (df["set"] == s) & (df["metric"] == m)
                a = df[sel & (df["arm"] == arm)].set_index("seed")["value"]
                b = df[sel & (df["arm"] == baseline)].set_index("seed")["value"]
                if a.empty or b.empty:
                    continue
                c = compare(a, b)
                rows.append({
                    "arm": arm, "baseline": baseline, "set": s, "metric": m,
                    "baseline_mean": c.baseline_mean, "method_mean": c.method_mean, "diff": c.diff,
                    "lo": c.lo, "hi": c.hi, "relative": c.relative, "p": c.p, "n": c.n,
                    "test": c.test, "significant": c.significant, "se": c.se, "df": c.df, "mde": c.mde,
                    "unpaired": _unpaired(a, b, arm, baseline),
                })
    out = pd.DataFrame(rows)
    if not out.empty and not out["unpaired"].astype(bool).any():
        out = out.drop(columns="unpaired")  # all paired: the table is as it always was
    return add_holm(out, scale=scale)


def _unpaired(a: pd.Series, b: pd.Series, arm: str, baseline: str) -> str:
    """"" when both sides have finite values for the same seeds, else which seeds lack a pair."""
    fa = {int(k) for k, v in a.items() if np.isfinite(v)}
    fb = {int(k) for k, v in b.items() if np.isfinite(v)}
    if fa == fb:
        return ""
    parts = [f"seed(s) {sorted(x - y)} only in {name}" for x, y, name in ((fa, fb, arm), (fb, fa, baseline))
             if x - y]
    return "; ".join(parts)


def _is_note(x) -> bool:
    return isinstance(x, str) and bool(x)  # NaN where a concatenated frame had no such column


def _row_comparison(r) -> Comparison:
    return Comparison(r.diff, r.lo, r.hi, r.p, int(r.n), r.test, r.method_mean, r.baseline_mean,
                      0.95, r.se, r.df)


def add_holm(cmp: pd.DataFrame, scale: float = 100.0) -> pd.DataFrame:
    """Holm-adjust every row's p over the whole frame (one paper's family of tests): adds
    ``p_holm``, ``significant_holm``, ``family_size`` and rewrites ``text`` with both p-values
    and the minimum detectable effect."""
    if cmp.empty:
        return cmp
    out = cmp.copy()
    # One test counted once (issue 20.4): a row whose comparison is the very same test as an
    # earlier row (same arm, baseline and metric; same difference, p and n) — "pooled" equals
    # "average" when every held-out set has as many prompts — stays in the table, marked
    # ``same_test_as``, with the first row's Holm p, and is left out of the family.
    key = out[["arm", "baseline", "metric"]].astype(str).agg("|".join, axis=1) + "|" + \
        out["diff"].round(12).astype(str) + "|" + out["p"].round(12).astype(str) + "|" + out["n"].astype(str)
    first = ~key.duplicated(keep="first")
    p_family = out["p"].where(first)
    out["p_holm"] = holm(p_family)
    if not first.all():
        set_of_first = dict(zip(key[first], out.loc[first, "set"]))
        p_holm_of_first = dict(zip(key[first], out.loc[first, "p_holm"]))
        out["same_test_as"] = [None if f else set_of_first[k] for k, f in zip(key, first)]
        out.loc[~first, "p_holm"] = [p_holm_of_first[k] for k in key[~first]]
    out["significant_holm"] = np.isfinite(out["p_holm"]) & (out["p_holm"] < 0.05)
    out["family_size"] = int(np.isfinite(p_family.to_numpy(dtype=float)).sum())
    unit = "pts" if scale == 100.0 else ""
    out["text"] = [describe(_row_comparison(r), scale=scale, unit=unit, p_holm=r.p_holm)
                   + (f" — UNPAIRED: {r.unpaired}" if _is_note(getattr(r, "unpaired", "")) else "")
                   for r in out.itertuples()]
    return out


def to_markdown(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """GitHub Markdown via tabulate (pandas.to_markdown)."""
    return df.to_markdown(index=False, floatfmt=floatfmt)


def write_tables(tables: dict[str, pd.DataFrame], folder: str | Path) -> list[Path]:
    """Write each frame as <name>.csv and <name>.md in ``folder`` (created); returns the paths.
    Each file whole or absent (store.write_atomic): a full disk is one line naming it."""
    from replication.store import write_atomic

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, df in tables.items():
        csv, md = out / f"{name}.csv", out / f"{name}.md"
        write_atomic(csv, df.to_csv(index=False))
        write_atomic(md, to_markdown(df) + "\n")
        paths += [csv, md]
    return paths


def write_summary_json(cmp: pd.DataFrame, path: str | Path, *, profile: str, seeds: Sequence[int],
                       sets: Sequence[str] = SUMMARY_SETS) -> dict:
    """results/<paper>/summary.json as ``replication report`` (summary.py) reads it: profile,
    seeds and one comparison per (arm, set, metric) of ``compare_to_baseline`` on ``sets``, the
    metric labelled "<set> <metric>"."""
    import json

    part = cmp[cmp["set"].isin(list(sets))] if not cmp.empty else cmp
    comps = [{
        "arm": r.arm, "baseline": r.baseline, "metric": f"{r.set} {r.metric}",
        "method_mean": float(r.method_mean), "baseline_mean": float(r.baseline_mean), "diff": float(r.diff),
        "ci_low": float(r.lo), "ci_high": float(r.hi), "p_value": float(r.p), "n": int(r.n),
        "test": r.test, "significant": bool(r.significant),
        "p_holm": float(getattr(r, "p_holm", np.nan)),
        "significant_holm": bool(getattr(r, "significant_holm", False)),
        "mde": float(getattr(r, "mde", np.nan)),
    } for r in part.itertuples()]
    out = {"profile": profile, "seeds": [int(s) for s in seeds], "comparisons": comps}
    from replication.store import write_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(out, indent=1, allow_nan=True) + "\n")
    return out
