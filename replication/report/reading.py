"""How the generated prose reads a comparison (issue 37.4), by the rules of
``replication/specs/reading.yaml`` — one wording, one definition, applied everywhere.

- A difference is **Holm-significant** when its Holm-adjusted p (one family per paper,
  tables.add_holm) is below α; otherwise it is **not significant (Holm)**. No other
  significance wording is generated.
- A not-significant difference is read as "no effect" only when the equivalence test says so:
  TOST within ±margin (stats.tost; the margin is the design MDE fixed in the spec), its p-values
  Holm-adjusted over the same family. Otherwise it is **inconclusive** and only its 95 % interval is
  stated. Power (the MDE) never backs a "no effect".
- The MDE is stated at the level Holm actually compared the row with, α/(m − r + 1)
  (stats.holm_threshold), beside the MDE at the raw α, both labelled.
- ``significant_block`` lists every Holm-significant row (gains and losses) of any number of
  papers' comparisons.csv: the README, results/summary.md and each paper's conclusions render it.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from replication.report.stats import MINUS, Comparison, holm, holm_threshold, minimum_detectable_effect, tost

SPEC = Path(__file__).resolve().parents[1] / "specs" / "reading.yaml"


@functools.lru_cache(maxsize=None)
def load_rules(path: str | None = None) -> dict:
    return yaml.safe_load(Path(path or SPEC).read_text())


def margin_for(metric: str, rules: dict | None = None) -> float:
    """The equivalence margin of a metric ("average mean@8", "pass@8", ...): the spec's mean@k or
    pass@k entry."""
    rules = rules or load_rules()
    name = str(metric).split(" ")[-1]
    key = name.split("@")[0] + "@k"
    if key not in rules["margin"]:
        raise KeyError(f"reading.yaml has no equivalence margin for {metric!r} ({key})")
    return float(rules["margin"][key])


def _num(x: float, digits: int = 1, signed: bool = True) -> str:
    s = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return s.replace("-", MINUS)


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def _eq(name: str, p: float) -> str:
    """"p=0.021", "p<0.001"."""
    s = _p(p)
    return f"{name}{s}" if s.startswith("<") else f"{name}={s}"


def definition(rules: dict | None = None) -> str:
    """The reading rules in one paragraph, rendered from the spec (said once per document)."""
    r = rules or load_rules()
    a = r["alpha"]
    m = {k: 100 * v for k, v in r["margin"].items()}
    margin = (f"±{m['mean@k']:.1f} pts" if len(set(m.values())) == 1
              else ", ".join(f"±{v:.1f} pts on {k}" for k, v in m.items()))
    return (f"**Reading** (replication/specs/reading.yaml): a difference is *{r['significant']}* when its "
            f"Holm-adjusted p over its paper's family of comparisons is below {a:g}, otherwise "
            f"*{r['not_significant']}*. A difference that is not significant is called *equivalent* (no effect "
            f"larger than {margin}, the design MDE) only when the two one-sided tests (TOST) reject both "
            f"bounds at {r['equivalence_alpha']:g}"
            + (" after Holm's correction over the same family" if r.get("equivalence_holm") else "")
            + "; otherwise it is *inconclusive*, and only its 95 % interval is claimed. The minimum "
            "detectable effect (MDE, power 0.8) is given at the level Holm compared the row with, "
            f"α/(m − r + 1), and at the raw α = {a:g}.")


def _family(df: pd.DataFrame) -> pd.Series:
    """Rows that count in the Holm family: not a duplicate of another row's test (same_test_as)."""
    if "same_test_as" in df:
        return df["same_test_as"].isna() | (df["same_test_as"].astype(str).str.strip() == "")
    return pd.Series(True, index=df.index)


def _comparison(r) -> Comparison:
    g = r.get if isinstance(r, dict) else (lambda k, d=math.nan: getattr(r, k, d))
    return Comparison(float(g("diff")), float(g("lo")), float(g("hi")), float(g("p")), int(g("n", 0)),
                      str(g("test", "paired")), float(g("method_mean")), float(g("baseline_mean")),
                      0.95, float(g("se")), float(g("df")))


def annotate(cmp_df: pd.DataFrame, rules: dict | None = None) -> pd.DataFrame:
    """``cmp_df`` (one paper's comparisons.csv) with the reading's columns added:

    holm_alpha (the level Holm compared the row with), holm_alpha_min (α/m, its strictest),
    mde_holm (MDE at holm_alpha), mde_raw (at α), margin, tost_p, tost_p_holm (over the family),
    holm_sig (bool), reading ("gain", "loss", "equivalent", "inconclusive", "no test")."""
    rules = rules or load_rules()
    alpha = float(rules["alpha"])
    out = cmp_df.copy()
    for c in ("p", "p_holm", "se", "df", "lo", "hi", "method_mean", "baseline_mean"):
        if c not in out:
            out[c] = np.nan
    if "n" not in out:
        out["n"] = 0
    if out.empty:
        for c in ("holm_alpha", "holm_alpha_min", "mde_holm", "mde_raw", "margin", "tost_p", "tost_p_holm"):
            out[c] = pd.Series(dtype=float)
        out["holm_sig"], out["reading"] = pd.Series(dtype=bool), pd.Series(dtype=str)
        return out
    fam = _family(out)
    family_p = out.loc[fam, "p"].to_numpy(np.float64)
    m = int(np.isfinite(family_p).sum())
    out["holm_alpha"] = [holm_threshold(p, family_p, alpha) for p in out["p"]]
    out["holm_alpha_min"] = alpha / m if m else math.nan
    out["mde_holm"] = [minimum_detectable_effect(se, df, alpha=a) for se, df, a in
                       zip(out["se"], out["df"], out["holm_alpha"])]
    out["mde_raw"] = [minimum_detectable_effect(se, df, alpha=alpha) for se, df in zip(out["se"], out["df"])]
    out["margin"] = [margin_for(mt, rules) for mt in out["metric"]]
    out["tost_p"] = [tost(_comparison(r), mg).p for r, mg in zip(out.to_dict("records"), out["margin"])]
    if rules.get("equivalence_holm", True):
        adj = pd.Series(np.nan, index=out.index)
        adj[fam] = holm(out.loc[fam, "tost_p"])
        # a duplicate row (pooled = average) takes its twin's adjusted p: the row of set same_test_as
        twin = {(r["arm"], r["baseline"], r["metric"], r["set"]): adj[i] for i, r in out[fam].iterrows()}
        for i, r in out[~fam].iterrows():
            adj[i] = twin.get((r["arm"], r["baseline"], r["metric"], r["same_test_as"]), np.nan)
        out["tost_p_holm"] = adj
    else:
        out["tost_p_holm"] = out["tost_p"]
    p_holm = out["p_holm"].astype(float)
    out["holm_sig"] = (np.isfinite(p_holm) & (p_holm < alpha)) | (
        out["significant_holm"].fillna(False).astype(bool) if "significant_holm" in out else False)
    eq_alpha = float(rules["equivalence_alpha"])
    reading = []
    for r in out.itertuples():
        if r.holm_sig:
            reading.append("gain" if r.diff > 0 else "loss")
        elif int(r.n) < 2 or not np.isfinite(r.p):
            reading.append("no test")
        elif np.isfinite(r.tost_p_holm) and r.tost_p_holm < eq_alpha:
            reading.append("equivalent")
        else:
            reading.append("inconclusive")
    out["reading"] = reading
    return out


def phrase(r, rules: dict | None = None, scale: float = 100.0) -> str:
    """One annotated row in the one wording: "−3.8 pts [−5.7, −1.9], Holm-significant loss (p=0.0013,
    Holm p=0.021, n=10; MDE 3.3 pts at Holm's α=0.0031, 2.6 at α=0.05)"."""
    rules = rules or load_rules()
    g = r.get if isinstance(r, dict) else (lambda k, d=math.nan: getattr(r, k, d))
    d = float(g("diff")) * scale
    head = f"{_num(d)} pts"
    if g("reading") == "no test":
        return f"{head}, one seed, no test" if int(g("n", 0)) <= 1 else f"{head}, no test (n={int(g('n', 0))})"
    head += f" [{_num(float(g('lo')) * scale)}, {_num(float(g('hi')) * scale)}]"
    reading = g("reading")
    mg = float(g("margin")) * scale
    if reading in ("gain", "loss"):
        verdict = f"{rules['significant']} {reading}"
    elif reading == "equivalent":
        verdict = f"{rules['not_significant']}, equivalent within ±{mg:.1f} pts ({_eq('TOST Holm p', float(g('tost_p_holm')))})"
    else:
        verdict = (f"{rules['not_significant']}, inconclusive: not shown equivalent within ±{mg:.1f} pts "
                   f"({_eq('TOST Holm p', float(g('tost_p_holm')))})")
    ps = f"{_eq('p', float(g('p')))}, {_eq('Holm p', float(g('p_holm')))}, n={int(g('n'))}"
    if str(g("test", "paired")) != "paired":
        ps += ", Welch"
    mde_h, mde_r = float(g("mde_holm")) * scale, float(g("mde_raw")) * scale
    if np.isfinite(mde_h):
        ps += (f"; MDE {mde_h:.1f} pts at Holm's α={float(g('holm_alpha')):.2g}, "
               f"{mde_r:.1f} at α={float(rules['alpha']):g}")
    return f"{head}, {verdict} ({ps})"


def null_reading(reads: dict[str, str], against: str) -> str:
    """What a set of not-significant readings ({metric: "equivalent" | "inconclusive"}) allows:
    "; it is equivalent to <against> on mean@8 (TOST); on pass@8 the data are inconclusive (...)"."""
    eq = [m for m, v in reads.items() if v == "equivalent"]
    inc = [m for m, v in reads.items() if v == "inconclusive"]
    text = f"; it is equivalent to {against} on {', '.join(eq)} (TOST)" if eq else ""
    if inc:
        text += f"; on {', '.join(inc)} the data are inconclusive (the interval above is all they show)"
    return text


def _merge_twins(rows: pd.DataFrame) -> pd.DataFrame:
    """A pooled row that is the same test as the average row (same_test_as) is named with it."""
    if "same_test_as" not in rows:
        return rows.assign(set_label=rows["set"])
    keep, label = [], []
    twins = rows[~_family(rows)]
    for idx, r in rows[_family(rows)].iterrows():
        same = twins[(twins["same_test_as"] == r["set"]) & (twins["arm"] == r["arm"]) &
                     (twins["baseline"] == r["baseline"]) & (twins["metric"] == r["metric"])]
        keep.append(idx)
        label.append(" = ".join([str(r["set"]), *map(str, same["set"])]))
    return rows.loc[keep].assign(set_label=label)


def significant_rows(cmp_df: pd.DataFrame, rules: dict | None = None) -> pd.DataFrame:
    """Every Holm-significant row of one paper's comparisons, annotated, twins merged."""
    a = annotate(cmp_df, rules)
    return _merge_twins(a[a["holm_sig"]]) if not a.empty else a.assign(set_label=pd.Series(dtype=str))


def significant_block(frames: dict[str, pd.DataFrame], rules: dict | None = None,
                      source: str = "results/<paper>/tables/comparisons.csv") -> str:
    """Markdown: every Holm-significant comparison of every paper in ``frames`` ({paper label:
    comparisons frame}), gains and losses, with arm, baseline, held-out set, metric, Δ with its
    95 % CI and Holm p; a paper with none says so with its family size."""
    rules = rules or load_rules()
    lines = [f"Every {rules['significant']} comparison, gains and losses (from {source}; "
             "Δ = method − baseline, held-out, after training, paired over seeds, 95 % CI):"]
    for label, df in frames.items():
        if df is None or df.empty:
            lines.append(f"- {label}: no comparisons.")
            continue
        fam = int(_family(df).sum())
        sig = significant_rows(df, rules)
        if sig.empty:
            lines.append(f"- {label}: none of its {fam} tests is {rules['significant']}.")
            continue
        for r in sig.itertuples():
            lines.append(f"- {label}: {r.arm} vs {r.baseline}, {r.set_label} {r.metric}: {r.reading}, "
                         f"{_num(100 * r.diff)} pts [{_num(100 * r.lo)}, {_num(100 * r.hi)}], Holm p "
                         f"{_eq('', r.p_holm).lstrip('=')} (one family of {fam} tests).")
    return "\n".join(lines)


def read_comparisons(folder: str | Path) -> pd.DataFrame | None:
    """A paper folder's tables/comparisons.csv (None when it has none)."""
    path = Path(folder) / "tables" / "comparisons.csv"
    return pd.read_csv(path) if path.is_file() else None
