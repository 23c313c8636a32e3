"""The papers' reported tables as data, and "paper vs ours" comparison tables.

paper_data/*.csv transcribe the papers' published numbers (paper_data/SOURCES.md says where each
number comes from and which are secondary). For each paper the comparison puts the paper's
baseline → method change (absolute, relative) beside ours (absolute with its 95 % CI over seeds,
relative) ONLY where our metric measures the same thing; every other paper row says
"no analogue" and why. One measurement of ours is set beside at most one paper row:

- VIP (vip_main.csv, RLOO → RLOO+VIP, 1.5B, 8Q): AIME24 Mean@32 ↔ our mean@k average (mean
  accuracy does not depend on k). AIME24/AIME25 "Pass@32" are verl's BOOTSTRAPPED best@32, not
  the unbiased pass@k we measure: no analogue.
- DynaMO (dynamo_*.csv, GRPO → DynaMO): the 1.5B row only (7B: no analogue): Avg P@1 ↔ our
  pass@1 average; Avg P@32 ↔ our pass@k average only when our k is 32.
- GDRO (gdro_table1.csv, GRPO → Prompt-/Rollout-GDRO): the 1.7B row only (4B, 8B: no analogue):
  mean@8 averaged over the six benchmarks (computed here, the paper prints none) ↔ our mean@k
  average; pooled pass@8 ↔ our pooled pass@k when our k is 8.

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
    """A paper metric (benchmark, metric) and the metric of ours it is set beside, if any."""

    benchmark: str
    metric: str
    our_set: str | None
    """None: no analogue (``reason`` says why)."""
    our_metric: str | None
    """"pass@k" / "mean@k" resolve to our evaluator's k; "pass@1" is literal."""
    need_k: int | None = None
    """Pair only when our evaluator's k equals this (pass@k depends on k; mean@k does not)."""
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class PaperSpec:
    table: str
    baseline: str
    methods: tuple[str, ...]
    pairings: tuple[Pairing, ...]
    our_model: str
    """The paper's model whose rows our (single) measurement is set beside; other models' rows
    are "no analogue" (one measurement is never reused for several paper rows)."""


_BOOTSTRAP = ("VIP's Pass@32 is verl's bootstrapped best@32, not the unbiased pass@k measured here")
SPECS: dict[str, PaperSpec] = {
    "vip": PaperSpec("vip_main", "RLOO", ("RLOO+VIP",), (
        Pairing("AIME24", "Pass@32", None, None, reason=_BOOTSTRAP),
        Pairing("AIME24", "Mean@32", "average", "mean@k"),
        Pairing("AIME25", "Pass@32", None, None, reason=_BOOTSTRAP + "; and our one held-out average is "
                "already set beside AIME24"),
    ), "Qwen2.5-Math-1.5B"),
    "dynamo": PaperSpec("dynamo", "GRPO", ("DynaMO",), (
        Pairing("Avg", "P@1", "average", "pass@1"),
        Pairing("Avg", "P@32", "average", "pass@k", need_k=32),
    ), "Qwen2.5-Math-1.5B"),
    "gdro": PaperSpec("gdro", "GRPO", ("Prompt-GDRO", "Rollout-GDRO"), (
        Pairing("average", "mean@8", "average", "mean@k"),
        Pairing("pooled", "pass@8", "pooled", "pass@k", need_k=8),
    ), "Qwen3-1.7B-Base"),
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
                reason = pr.reason
                if not reason and model != spec.our_model:
                    reason = (f"our single measurement is set beside the {spec.our_model} row only "
                              f"(a {model} analogue would reuse it)")
                rows.append({"paper": paper, "model": model, "baseline": spec.baseline, "method": method,
                             "benchmark": pr.benchmark, "metric": pr.metric, "paper_baseline": b,
                             "paper_method": v, "paper_abs": v - b, "paper_rel_pct": 100.0 * (v / b - 1.0),
                             "paper_status": status, "our_set": None if reason else pr.our_set,
                             "our_metric": None if reason else pr.our_metric, "need_k": pr.need_k,
                             "reason": reason})
    return pd.DataFrame(rows)


def _our_k(eval_df: pd.DataFrame) -> int | None:
    for m in default_metrics(eval_df):
        if m.startswith("pass@"):
            return int(m.split("@")[1])
    return None


def _resolve_metric(name: str, eval_df: pd.DataFrame) -> str:
    if not name.endswith("@k"):
        return name
    for m in default_metrics(eval_df):
        if m.startswith(name[:-1]):
            return m
    raise ValueError(f"no {name} metric in the evaluation frame")


def paper_vs_ours(paper: str, eval_df: pd.DataFrame, arms: Mapping[str, str], phase: str = "after") -> pd.DataFrame:
    """Paper change beside ours, one row per (model, paper metric, method).

    ``arms`` maps the paper's method names (its baseline included) to our arm names, e.g.
    {"RLOO": "rloo", "RLOO+VIP": "rloo-vip"}; methods without an arm are skipped. Rows without
    a like-for-like metric of ours have ``analogue`` = "no analogue: <reason>" and NaN numbers.
    Our numbers are in percentage points; our_rel_lo/hi is the difference CI divided by our
    baseline mean (baseline treated as fixed). ``p_holm`` is the Holm-adjusted p over the
    paper's whole comparison table when ``pipeline.comparisons`` ran first (it leaves them on
    ``eval_df.attrs["holm"]``), else over this table's paired rows (``holm_family`` says which).
    ``label`` says "small-scale analogue".
    """
    from replication.report.stats import holm

    spec = SPECS[paper]
    if spec.baseline not in arms:
        raise ValueError(f"{paper}: map the paper's baseline {spec.baseline!r} to one of our arms")
    family = dict(eval_df.attrs.get("holm") or {})
    ev = eval_df[eval_df["phase"] == phase]
    k = _our_k(ev)
    rows = []
    keep = ("paper", "model", "baseline", "method", "benchmark", "metric", "paper_baseline", "paper_method",
            "paper_abs", "paper_rel_pct", "paper_status")
    for r in paper_changes(paper).itertuples():
        if r.method not in arms:
            continue
        reason = r.reason
        need_k = None if r.need_k is None or pd.isna(r.need_k) else int(r.need_k)
        if not reason and need_k is not None and k != need_k:
            reason = f"the paper's {r.metric} needs k = {need_k}; our evaluator uses k = {k}"
        if reason:
            rows.append({**{f: getattr(r, f) for f in keep}, "analogue": f"no analogue: {reason}",
                         "our_set": None, "our_metric": None, "label": LABEL})
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
            **{f: getattr(r, f) for f in keep}, "analogue": "paired",
            "our_set": r.our_set, "our_metric": metric,
            "our_baseline_arm": arms[spec.baseline], "our_method_arm": arms[r.method],
            "our_baseline": 100.0 * c.baseline_mean, "our_method": 100.0 * c.method_mean,
            "our_abs": 100.0 * c.diff, "our_abs_lo": 100.0 * c.lo, "our_abs_hi": 100.0 * c.hi,
            "our_rel_pct": rel, "our_rel_lo": c.lo * scale, "our_rel_hi": c.hi * scale,
            "p": c.p, "n": c.n, "test": c.test, "significant": c.significant, "se": c.se, "df": c.df,
            "mde": 100.0 * c.mde, "cmp_obj": c,
            "p_holm": family.get((arms[r.method], arms[spec.baseline], r.our_set, metric), np.nan),
            "label": LABEL,
        })
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    for col in ("p", "p_holm", "n", "our_abs", "our_rel_pct", "our_baseline", "our_method"):
        if col not in out:
            out[col] = np.nan
    if "cmp_obj" not in out:
        out["cmp_obj"] = None
    paired = out["analogue"] == "paired"
    if paired.any() and not family:  # used alone: this table is the family
        out.loc[paired, "p_holm"] = holm(out.loc[paired, "p"])
        out["holm_family"] = "this table"
    else:  # one family per paper (issue 20.4): a metric outside it gets no Holm p, not its raw p
        out["holm_family"] = np.where(out["p_holm"].notna(), "the paper's comparison table",
                                      "outside the paper's test family (raw p only)")
    out["significant_holm"] = paired & (out["p_holm"] < 0.05)
    out["ours_text"] = [(describe(r.cmp_obj, p_holm=r.p_holm) if np.isfinite(r.p_holm)
                         else describe(r.cmp_obj) + " (outside the test family: raw p only)") if a == "paired" else a
                        for r, a in zip(out.itertuples(), out["analogue"])]
    return out.drop(columns="cmp_obj")


def format_paper_vs_ours(df: pd.DataFrame) -> pd.DataFrame:
    """Compact display of ``paper_vs_ours``: one string column per side."""

    def rel(x: float) -> str:
        return f"{x:+.1f}%".replace("-", "\u2212") if np.isfinite(x) else "–"

    paired = df["analogue"] == "paired" if "analogue" in df else pd.Series(True, index=df.index)
    out = pd.DataFrame({
        "model": df["model"],
        "paper metric": df["benchmark"] + " " + df["metric"],
        "paper": [f"{b:.2f} → {m:.2f} ({rel(x)})" for b, m, x in
                  zip(df["paper_baseline"], df["paper_method"], df["paper_rel_pct"])],
        "our metric": [f"{s} {m}" if p else "–" for s, m, p in
                       zip(df["our_set"], df["our_metric"], paired)],
        "ours": [f"{b:.1f} → {m:.1f} ({rel(x)})" if p else "no analogue" for b, m, x, p in
                 zip(df.get("our_baseline", np.nan * paired), df.get("our_method", np.nan * paired),
                     df.get("our_rel_pct", np.nan * paired), paired)],
        "our change": df["ours_text"],
        "scale": df["label"],
    })
    out.insert(1, "comparison", df["baseline"] + " → " + df["method"])
    return out



COMPACT_COLUMNS = ("model (paper)", "paper row", "paper: baseline → method", "paper Δ (pts)", "our analogue",
                   "our Δ (pts) [95 % CI]", "our test", "like for like?")
"""The compact paper-vs-ours table (issue 37.6): at most 8 columns; the wide frame stays as CSV."""

COMPACT_NOTE = ("Paper: its baseline → method on its own benchmark (points; relative change in parentheses). "
                "Ours: the same metric on our held-out tasks, method − baseline in points with a 95 % CI "
                "over seeds (paired). Every row of ours is a small-scale analogue (tiny model, procedural "
                "tasks): compare directions and relative sizes, never absolute accuracies. The wide table, "
                "with every number and test, is paper_vs_ours.csv.")

_SHORT_REASONS = (  # (pattern in the long reason, short wording), applied in turn
    (r"needs k = (\d+); our evaluator uses k = (\d+)", r"needs k = \1, ours k = \2"),
    (r"[^;]*bootstrapped best@(\d+)[^;]*", r"paper's best@\1 is bootstrapped, ours the unbiased pass@k"),
    (r"our single measurement is set beside the \S*?(\d+(?:\.\d+)?B)\S* row only[^;]*",
     r"our one measurement is set beside the \1 row only"),
    (r"(?:and )?our one held-out average is already set beside (\S+)", r"ours already sits beside \1"),
)

def _minus(text: str) -> str:
    return text.replace("-", "\u2212")


def _signed(x: float, digits: int = 2) -> str:
    return _minus(f"{x:+.{digits}f}") if np.isfinite(x) else "–"


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def short_reason(analogue: str, limit: int = 90) -> str:
    """The "no analogue: <reason>" text of ``paper_vs_ours`` shortened for the compact table:
    reworded by ``_SHORT_REASONS`` where a pattern matches, then cut to ``limit`` characters."""
    import re

    text = str(analogue)
    text = text.split(":", 1)[1].strip() if text.startswith("no analogue:") else text.strip()
    for pat, short in _SHORT_REASONS:
        text = re.sub(pat, short, text)
    text = re.sub(r"\s+", " ", text).strip(" ;")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

def _model_short(model: str) -> str:
    """Qwen2.5-Math-1.5B → 1.5B: the size is what tells the paper's rows apart."""
    import re

    m = re.search(r"(\d+(?:\.\d+)?B)", str(model))
    return m.group(1) if m else str(model)


def _why_alike(paper_metric: str, our_metric: str) -> str:
    """Why a paired row is like for like (the metric; the scale never is)."""
    pm, om = str(paper_metric).lower().replace("p@", "pass@"), str(our_metric).lower()
    pk, ok = pm.split("@")[-1], om.split("@")[-1]
    if pm.split("@")[0] == om.split("@")[0] == "mean":
        return "same metric (mean accuracy)" + ("" if pk == ok else f", which does not depend on k ({pk} vs {ok})")
    return f"same metric ({om})" if pm == om else f"{pm} ↔ {om}"


def compact_paper_vs_ours(df: pd.DataFrame) -> pd.DataFrame:
    """``paper_vs_ours``'s wide frame (or its CSV read back) as at most 8 string columns
    (``COMPACT_COLUMNS``), one row per paper row in the same order: the paper's benchmark,
    metric, baseline → method and Δ beside our analogue, our Δ with its 95 % CI, the test behind
    it (n, p, Holm p) and whether the row is like for like — "yes: <why>" for a paired row,
    "no: <reason, shortened>" otherwise (no numbers of ours on those rows)."""
    rows = []
    for r in df.to_dict("records"):
        paired = str(r.get("analogue", "")) == "paired"
        b, m, rel = _num(r.get("paper_baseline")), _num(r.get("paper_method")), _num(r.get("paper_rel_pct"))
        row = {
            "model (paper)": _model_short(r["model"]),
            "paper row": f"{r['benchmark']} {r['metric']}",
            "paper: baseline → method": f"{r['baseline']} {b:.2f} → {r['method']} {m:.2f}",
            "paper Δ (pts)": f"{_signed(_num(r.get('paper_abs')))} ({_signed(rel, 0)} %)",
        }
        if paired:
            ob, om = _num(r.get("our_baseline")), _num(r.get("our_method"))
            lo, hi = _num(r.get("our_abs_lo")), _num(r.get("our_abs_hi"))
            p, ph, n = _num(r.get("p")), _num(r.get("p_holm")), _num(r.get("n"))
            test = f"n={n:.0f}, p={p:.2g}" + (f", Holm p={ph:.2g}" if np.isfinite(ph) else " (raw; outside the Holm family)")
            row.update({
                "our analogue": f"{r['our_set']} {r['our_metric']}: {ob:.1f} → {om:.1f}",
                "our Δ (pts) [95 % CI]": f"{_signed(_num(r.get('our_abs')))} [{_signed(lo)}, {_signed(hi)}]",
                "our test": _minus(test).replace("e\u2212", "e-"),
                "like for like?": "yes: " + _why_alike(r["metric"], r["our_metric"]),
            })
        else:
            row.update({"our analogue": "–", "our Δ (pts) [95 % CI]": "–", "our test": "–",
                        "like for like?": "no: " + short_reason(r.get("analogue", ""))})
        rows.append(row)
    return pd.DataFrame(rows, columns=list(COMPACT_COLUMNS))


def write_paper_vs_ours(df: pd.DataFrame, folder: str | Path, name: str = "paper_vs_ours") -> list[Path]:
    """<name>.csv: the wide frame as it is (every number and test); <name>.md: a one-paragraph
    note (``COMPACT_NOTE``) and ``compact_paper_vs_ours`` (≤ 8 columns). Each file whole or
    absent (store.write_atomic)."""
    from replication.report.tables import to_markdown
    from replication.store import write_atomic

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    csv, md = out / f"{name}.csv", out / f"{name}.md"
    write_atomic(csv, df.to_csv(index=False))
    write_atomic(md, COMPACT_NOTE + "\n\n" + to_markdown(compact_paper_vs_ours(df)) + "\n")
    return [csv, md]

def overhead_vs_paper(runs_df: pd.DataFrame, paper: str | None = None) -> pd.DataFrame:
    """Method overhead per arm — allocator plan + observe plus Prompt-GDRO's weights + observe
    (runs.list_runs ``overhead_share`` / ``overhead_per_step``; mean ± CI over seeds) — beside
    the papers' figures: VIP's VIP-compute share of its model-specific time, 1.12 % (1.5B) /
    0.83 % (7B) (vip_overhead.csv, secondary), and GDRO's advantage-stage seconds per step,
    GRPO 0.043 / Prompt-GDRO 0.355 / Rollout-GDRO 0.446 (gdro_overhead.csv). ``paper``: "vip",
    "gdro" or None (both)."""
    share_col = "overhead_share" if "overhead_share" in runs_df else "allocator_share"
    rows = []
    for arm in pd.unique(runs_df["arm"]):
        sel = runs_df[runs_df["arm"] == arm]
        ci = mean_ci(100.0 * sel[share_col])
        per_step = mean_ci(sel["overhead_per_step"]) if "overhead_per_step" in sel else mean_ci([])
        rows.append({"source": "ours", "what": arm, "share_pct": ci.mean, "lo": ci.lo, "hi": ci.hi,
                     "seconds_per_step": per_step.mean, "n": ci.n, "label": LABEL})
    if paper in (None, "vip"):
        for r in load_paper_table("vip_overhead").itertuples():
            rows.append({"source": "VIP paper", "what": f"VIP, {r.model}", "share_pct": r.share_pct,
                         "lo": np.nan, "hi": np.nan, "seconds_per_step": np.nan, "n": 1, "label": r.status})
    if paper in (None, "gdro"):
        for r in load_paper_table("gdro_overhead").itertuples():
            rows.append({"source": "GDRO paper", "what": f"{r.method} (advantage stage)", "share_pct": np.nan,
                         "lo": np.nan, "hi": np.nan, "seconds_per_step": r.advantage_stage_seconds_per_step,
                         "n": 1, "label": r.status})
    return pd.DataFrame(rows)
