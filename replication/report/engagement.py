"""From which step each mechanism is actually engaged, detected from the logs (issue 10, point 4).

A method whose mechanism never switches on is the baseline under another name; a mechanism that
switches on late leaves the early curve identical to the baseline's. Per run:

- allocation: the first step where some prompt's count n differs from the step's mean n̄
  (per-prompt records), and the share of prompt-steps / of steps with a departure from then on;
- prompt weights (Prompt-GDRO): the first step where some per-prompt weight is off 1 by more
  than ``weight_tol``, and the median per-step max/min weight;
- token modulation (DynaMO): the first step where the logged factors move an advantage by more
  than ``mod_tol`` (β_comp mean > 1 + tol or β_stab min < 1 − tol).
"never" (NaN) when the mechanism does not engage in the run; "n/a" when the run logs nothing
for it. Reads results only (runs.load_steps / runs.load_prompts frames).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KEYS = ["arm", "seed"]


def _first(steps: pd.Series, flags: pd.Series) -> float:
    hit = steps[flags.to_numpy()]
    return float(hit.min()) if len(hit) else np.nan


def engagement(steps: pd.DataFrame, prompts: pd.DataFrame, weight_tol: float = 0.01,
               mod_tol: float = 0.01) -> pd.DataFrame:
    """One row per run: allocation_from, departure_share (prompt-steps with n ≠ n̄, whole run),
    departure_steps_after (share of steps from allocation_from on with any departure),
    weights_from, weight_ratio_median (median over steps of max/min weight), modulation_from."""
    rows = []
    for (arm, seed), p in prompts.groupby(KEYS, sort=False):
        nbar = p.groupby("step")["n"].transform("mean")
        depart = (p["n"] - nbar).abs() > 1e-9
        per_step = depart.groupby(p["step"]).any()
        alloc_from = _first(per_step.index.to_series(), per_step)
        after = per_step[per_step.index >= alloc_from] if np.isfinite(alloc_from) else per_step.iloc[:0]
        row = {"arm": arm, "seed": seed, "allocation_from": alloc_from, "departure_share": float(depart.mean()),
               "departure_steps_after": float(after.mean()) if len(after) else np.nan,
               "departure_steps": float(per_step.mean())}
        w = pd.to_numeric(p.get("weight"), errors="coerce") if "weight" in p else None
        if w is not None and w.notna().any():
            off = (w - 1.0).abs() > weight_tol
            ws = off.groupby(p["step"]).any()
            row["weights_from"] = _first(ws.index.to_series(), ws)
            ratio = w.groupby(p["step"]).max() / w.groupby(p["step"]).min()
            row["weight_ratio_median"] = float(ratio.median())
        else:
            row["weights_from"], row["weight_ratio_median"] = np.nan, np.nan
        s = steps[(steps["arm"] == arm) & (steps["seed"] == seed)]
        if "beta_comp_mean" in s or "beta_stab_min" in s:
            comp = s.get("beta_comp_mean", pd.Series(1.0, index=s.index)).fillna(1.0)
            stab = s.get("beta_stab_min", pd.Series(1.0, index=s.index)).fillna(1.0)
            active = (comp > 1 + mod_tol) | (stab < 1 - mod_tol)
            row["modulation_from"] = _first(s["step"], active)
            row["modulation_logged"] = True
        else:
            row["modulation_from"], row["modulation_logged"] = np.nan, False
        rows.append(row)
    return pd.DataFrame(rows)


def _when(values: pd.Series, logged: bool = True) -> str:
    if not logged:
        return "n/a"
    v = values.dropna()
    if len(v) == 0:
        return "never"
    never = len(values) - len(v)
    txt = f"step {int(v.median())}" + (f" (seeds {int(v.min())}–{int(v.max())})" if v.min() != v.max() else "")
    return txt + (f", never in {never}/{len(values)} seeds" if never else "")


def engagement_summary(eng: pd.DataFrame) -> pd.DataFrame:
    """Per arm: when each mechanism engages (median over seeds) and how much."""
    rows = []
    for arm, g in eng.groupby("arm", sort=False):
        rows.append({
            "arm": arm,
            "allocation departs from uniform": _when(g["allocation_from"]),
            "prompt-steps with n ≠ n̄": f"{g['departure_share'].mean():.0%}",
            "steps departing (after onset)": "—" if g["departure_steps_after"].isna().all()
            else f"{g['departure_steps_after'].mean():.0%}",
            "weights depart from 1": _when(g["weights_from"], g["weight_ratio_median"].notna().any()),
            "median max/min weight": "n/a" if g["weight_ratio_median"].isna().all()
            else f"{g['weight_ratio_median'].median():.4g}",
            "token modulation active": _when(g["modulation_from"], bool(g["modulation_logged"].any())),
        })
    return pd.DataFrame(rows)


def describe_engagement(summary: pd.DataFrame) -> str:
    """One line per arm, for the notebooks."""
    lines = []
    for r in summary.to_dict("records"):
        lines.append(f"{r['arm']}: allocation departs from uniform {r['allocation departs from uniform']} "
                     f"({r['prompt-steps with n ≠ n̄']} of prompt-steps); weights depart from 1: "
                     f"{r['weights depart from 1']}; token modulation: {r['token modulation active']}")
    return "\n".join(lines)
