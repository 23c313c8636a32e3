"""The papers' reported tables as data, and "paper vs ours" comparison tables.

paper_data/*.csv transcribe ../shared/papers/*.md (paper_data/SOURCES.md says where each number
comes from and which are secondary). For each paper the comparison puts the paper's
baseline → method change (absolute, relative) beside ours (absolute with its 95 % CI over seeds,
relative) on the closest metric pairing:

- VIP (vip_main.csv, RLOO → RLOO+VIP, 1.5B, 8Q): AIME24/25 Pass@32 ↔ our held-out pass@k
  average; AIME24 Mean@32 ↔ our mean@k average.
- DynaMO (dynamo_*.csv, GRPO → DynaMO): Avg P@1 ↔ our pass@1 average; Avg P@32 ↔ pass@k average.
- GDRO (gdro_table1.csv, GRPO → Prompt-/Rollout-GDRO): mean@8 averaged over the six benchmarks
  (computed here, the paper prints none) ↔ our mean@k average; pooled pass@8 ↔ our pooled pass@k.

Ours is a small-scale analogue (tiny model, procedural tasks): the columns compare directions
and relative sizes of effects, never absolute accuracies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from replication.report.stats import compare, describe, mean_ci
from replication.report.tables import default_metrics

DATA = Path(__file__).resolve().parent / "paper_data"
LABEL = "small-scale analogue"
TABLES = ("vip_main", "vip_ablation", "vip_tool_use", "vip_overhead", "dynamo_1p5b", "dynamo_7b",
          "gdro_table1", "gdro_wse", "gdro_overhead", "gdro_bin_share")


def load_paper_table(name: str) -> pd.DataFrame:
    """One transcribed table (paper_data/<name>.csv); see paper_data/SOURCES.md."""
    if name not in TABLES:
        raise ValueError(f"unknown paper table {name!r}; known: {list(TABLES)}")
    return pd.read_csv(DATA / f"{name}.csv")


def dynamo_table() -> pd.DataFrame:
    """Both DynaMO tables (1.5B and 7B) in one frame."""
    return pd.concat([load_paper_table("dynamo_1p5b"), load_paper_table("dynamo_7b")], ignore_index=True)


def gdro_with_average() -> pd.DataFrame:
    """GDRO Table 1 plus a computed "average" row per (model, method): mean@8 over the six
    benchmarks (status "computed"; the paper prints no average)."""
    t = load_paper_table("gdro_table1")
    m8 = t[t["metric"] == "mean@8"]
    avg = m8.groupby(["model", "method"], sort=False)["value"].mean().reset_index()
    avg["benchmark"], avg["metric"], avg["status"] = "average", "mean@8", "computed"
    return pd.concat([t, avg], ignore_index=True)


@dataclasses.dataclass(frozen=True)
class Pairing:
    """A paper metric (benchmark, metric) and the metric of ours it is set beside."""

    benchmark: str
    metric: str
    our_set: str
    our_metric: str
    """"pass@k" / "mean@k" resolve to our evaluator's k; "pass@1" is literal."""


@dataclasses.dataclass(frozen=True)
class PaperSpec:
    table: str
    baseline: str
    methods: tuple[str, ...]
    pairings: tuple[Pairing, ...]


SPECS: dict[str, PaperSpec] = {
    "vip": PaperSpec("vip_main", "RLOO", ("RLOO+VIP",), (
        Pairing("AIME24", "Pass@32", "average", "pass@k"),
        Pairing("AIME24", "Mean@32", "average", "mean@k"),
        Pairing("AIME25", "Pass@32", "average", "pass@k"),
    )),
    "dynamo": PaperSpec("dynamo", "GRPO", ("DynaMO",), (
        Pairing("Avg", "P@1", "average", "pass@1"),
        Pairing("Avg", "P@32", "average", "pass@k"),
    )),
    "gdro": PaperSpec("gdro", "GRPO", ("Prompt-GDRO", "Rollout-GDRO"), (
        Pairing("average", "mean@8", "average", "mean@k"),
        Pairing("pooled", "pass@8", "pooled", "pass@k"),
    )),
}


def _paper_frame(paper: str) -> pd.DataFrame:
    spec = SPECS[paper]
    if spec.table == "dynamo":
        return dynamo_table()
    if spec.table == "gdro":
        return gdro_with_average()
    return load_paper_table(spec.table)


def paper_changes(paper: str) -> pd.DataFrame:
    """The paper's baseline → method change on each paired metric, per model.

    Columns: paper, model, baseline, method, benchmark, metric, paper_baseline, paper_method,
    paper_abs (points), paper_rel_pct (method / baseline − 1, in %), paper_status.
    """
    if paper not in SPECS:
        raise ValueError(f"unknown paper {paper!r}; known: {sorted(SPECS)}")
    spec, t = SPECS[paper], _paper_frame(paper)
    rows = []
    for model in pd.unique(t["model"]):
        for pr in spec.pairings:
            sel = t[(t["model"] == model) & (t["benchmark"] == pr.benchmark) & (t["metric"] == pr.metric)]
            base = sel[sel["method"] == spec.baseline]
            if base.empty:
                continue
            b = float(base["value"].iloc[0])
            for method in spec.methods:
                row = sel[sel["method"] == method]
                if row.empty:
                    continue
                v = float(row["value"].iloc[0])
                status = "/".join(sorted(set(base["status"]) | set(row["status"])))
                rows.append({"paper": paper, "model": model, "baseline": spec.baseline, "method": method,
                             "benchmark": pr.benchmark, "metric": pr.metric, "paper_baseline": b,
                             "paper_method": v, "paper_abs": v - b, "paper_rel_pct": 100.0 * (v / b - 1.0),
                             "paper_status": status, "our_set": pr.our_set, "our_metric": pr.our_metric})
    return pd.DataFrame(rows)


def _resolve_metric(name: str, eval_df: pd.DataFrame) -> str:
    if not name.endswith("@k"):
        return name
    for m in default_metrics(eval_df):
        if m.startswith(name[:-1]):
            return m
    raise ValueError(f"no {name} metric in the evaluation frame")


def paper_vs_ours(paper: str, eval_df: pd.DataFrame, arms: Mapping[str, str], phase: str = "after") -> pd.DataFrame:
    """Paper change beside ours, one row per (model, paired metric, method).

    ``arms`` maps the paper's method names (its baseline included) to our arm names, e.g.
    {"RLOO": "rloo", "RLOO+VIP": "rloo-vip"}; methods without an arm are skipped. Our numbers
    are in percentage points; our_rel_lo/hi is the difference CI divided by our baseline mean
    (baseline treated as fixed). ``label`` says "small-scale analogue".
    """
    spec = SPECS[paper]
    if spec.baseline not in arms:
        raise ValueError(f"{paper}: map the paper's baseline {spec.baseline!r} to one of our arms")
    ev = eval_df[eval_df["phase"] == phase]
    rows = []
    for r in paper_changes(paper).itertuples():
        if r.method not in arms:
            continue
        metric = _resolve_metric(r.our_metric, ev)
        sel = ev[(ev["set"] == r.our_set) & (ev["metric"] == metric)]
        a = sel[sel["arm"] == arms[r.method]].set_index("seed")["value"]
        b = sel[sel["arm"] == arms[spec.baseline]].set_index("seed")["value"]
        if a.empty or b.empty:
            continue
        c = compare(a, b)
        rel = 100.0 * c.relative
        scale = 100.0 / c.baseline_mean if c.baseline_mean else np.nan
        rows.append({
            **{k: getattr(r, k) for k in ("paper", "model", "baseline", "method", "benchmark", "metric",
                                           "paper_baseline", "paper_method", "paper_abs", "paper_rel_pct",
                                           "paper_status")},
            "our_set": r.our_set, "our_metric": metric,
            "our_baseline_arm": arms[spec.baseline], "our_method_arm": arms[r.method],
            "our_baseline": 100.0 * c.baseline_mean, "our_method": 100.0 * c.method_mean,
            "our_abs": 100.0 * c.diff, "our_abs_lo": 100.0 * c.lo, "our_abs_hi": 100.0 * c.hi,
            "our_rel_pct": rel, "our_rel_lo": c.lo * scale, "our_rel_hi": c.hi * scale,
            "p": c.p, "n": c.n, "test": c.test, "significant": c.significant,
            "ours_text": describe(c), "label": LABEL,
        })
    return pd.DataFrame(rows)


def format_paper_vs_ours(df: pd.DataFrame) -> pd.DataFrame:
    """Compact display of ``paper_vs_ours``: one string column per side."""

    def rel(x: float) -> str:
        return f"{x:+.1f}%".replace("-", "\u2212") if np.isfinite(x) else "–"

    out = pd.DataFrame({
        "model": df["model"],
        "paper metric": df["benchmark"] + " " + df["metric"],
        "paper": [f"{b:.2f} → {m:.2f} ({rel(x)})" for b, m, x in
                  zip(df["paper_baseline"], df["paper_method"], df["paper_rel_pct"])],
        "our metric": df["our_set"] + " " + df["our_metric"],
        "ours": [f"{b:.1f} → {m:.1f} ({rel(x)})" for b, m, x in
                 zip(df["our_baseline"], df["our_method"], df["our_rel_pct"])],
        "our change": df["ours_text"],
        "scale": df["label"],
    })
    out.insert(1, "comparison", df["baseline"] + " → " + df["method"])
    return out


def overhead_vs_paper(runs_df: pd.DataFrame) -> pd.DataFrame:
    """Allocator time as a share of training wall time per arm (mean ± CI over seeds, in %),
    beside VIP's reported 1.12 % (1.5B) / 0.83 % (7B) (vip_overhead.csv, secondary)."""
    rows = []
    for arm in pd.unique(runs_df["arm"]):
        ci = mean_ci(100.0 * runs_df[runs_df["arm"] == arm]["allocator_share"])
        rows.append({"source": "ours", "what": arm, "share_pct": ci.mean, "lo": ci.lo, "hi": ci.hi,
                     "n": ci.n, "label": LABEL})
    for r in load_paper_table("vip_overhead").itertuples():
        rows.append({"source": "VIP paper", "what": f"VIP, {r.model}", "share_pct": r.share_pct,
                     "lo": np.nan, "hi": np.nan, "n": 1, "label": r.status})
    return pd.DataFrame(rows)
