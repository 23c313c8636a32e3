"""Conclusion paragraphs written from the measured numbers — no hand-typed claims.

Each function takes a frame produced elsewhere in replication.report and returns Markdown text;
``conclusions`` joins the ones given. Wording rules: an effect is "better"/"worse" only when the
paired test over seeds is significant at 5 %; otherwise "no significant difference", with the
interval printed so a reader sees how large an effect the seeds could have hidden.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.report.paper_tables import LABEL, load_paper_table


def _pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f}".replace("-", "\u2212")


def arm_conclusions(cmp_df: pd.DataFrame, set_name: str = "average") -> str:
    """Which arms beat the baseline on ``set_name`` (tables.compare_to_baseline output)."""
    if cmp_df.empty:
        return "No arm comparisons were available."
    part = cmp_df[cmp_df["set"] == set_name]
    if part.empty:
        return f"No comparisons on the {set_name!r} set."
    base = part["baseline"].iloc[0]
    lines = [f"Against the baseline **{base}** on the {set_name} held-out set (paired over seeds, 95 % CI):"]
    for r in part.itertuples():
        lines.append(f"- {r.arm}, {r.metric}: {r.text}.")
    better = sorted({r.arm for r in part.itertuples() if r.significant and r.diff > 0})
    worse = sorted({r.arm for r in part.itertuples() if r.significant and r.diff < 0})
    verdict = []
    verdict.append(f"significantly better on at least one metric: {', '.join(better)}" if better
                   else "no arm is significantly better than the baseline on any metric")
    if worse:
        verdict.append(f"significantly worse on at least one metric: {', '.join(worse)}")
    lines.append("")
    lines.append("In short: " + "; ".join(verdict) + ".")
    return "\n".join(lines)


def overhead_conclusion(runs_df: pd.DataFrame) -> str:
    """Allocator time as a share of wall time per arm (runs.list_runs), beside VIP's figure."""
    g = runs_df.groupby("arm", sort=False)["allocator_share"].mean().mul(100).sort_values(ascending=False)
    g = g[np.isfinite(g)]
    if g.empty:
        return "No allocator timings were logged."
    parts = [f"{arm} {_pct(v, 2)} %" for arm, v in g.items()]
    vip = load_paper_table("vip_overhead")
    paper = " / ".join(f"{_pct(v, 2)} %" for v in vip["share_pct"])
    return (f"Allocator time as a share of training wall time (mean over seeds): {', '.join(parts)}. "
            f"The largest is {g.index[0]} at {_pct(g.iloc[0], 2)} %; VIP reports {paper} for 1.5B / 7B "
            f"(secondary). Our steps are far cheaper than a paper-scale step, so our shares overstate "
            f"the relative cost at scale.")


def lab_conclusion(summary: pd.DataFrame, variance_metric: str = "variance_rloo_vs_uniform") -> str:
    """Lab effect sizes (lab.summarise_lab output): variance and non-zero-advantage ratios to
    uniform per method, and the best method that does not see the true p."""
    v = summary[summary["metric"] == variance_metric].set_index("method")
    z = summary[summary["metric"] == "nonzero_expected_vs_uniform"].set_index("method")
    if v.empty:
        return "No lab results."
    lines = [f"Allocation lab (true p known; ratio to uniform at equal budget, mean [95 % CI] over seeds; "
             f"objective {variance_metric.replace('_vs_uniform', '')}):"]
    for m in v.index:
        if m == "uniform":
            continue
        s = f"- {m}: variance ×{v.at[m, 'mean']:.3f} [{v.at[m, 'lo']:.3f}, {v.at[m, 'hi']:.3f}]"
        if m in z.index:
            s += f", non-zero-advantage rollouts ×{z.at[m, 'mean']:.3f}"
        lines.append(s + f" (n={int(v.at[m, 'n'])}).")
    real = v.drop(index=[m for m in ("uniform", "vip-oracle") if m in v.index])
    if not real.empty:
        best = real["mean"].idxmin()
        gap = ""
        if "vip-oracle" in v.index:
            gap = f" (the oracle reaches ×{v.at['vip-oracle', 'mean']:.3f})"
        lines.append(f"\nThe lowest variance without the true p: {best}, ×{real.at[best, 'mean']:.3f}{gap}.")
    return "\n".join(lines)


def paper_conclusion(pvo: pd.DataFrame) -> str:
    """Direction agreement between the paper's change and ours (paper_tables.paper_vs_ours)."""
    if pvo.empty:
        return "No paper-vs-ours rows."
    lines = [f"Paper vs ours ({LABEL}):"]
    for r in pvo.itertuples():
        if r.significant:
            agree = "same direction" if np.sign(r.our_abs) == np.sign(r.paper_abs) else "opposite direction"
        else:
            agree = "not significant here"
        lines.append(
            f"- {r.model}, {r.baseline} → {r.method}, {r.benchmark} {r.metric}: paper "
            f"{_pct(r.paper_abs, 2)} pts ({_pct(r.paper_rel_pct)} %); ours on {r.our_set} {r.our_metric} "
            f"{r.ours_text}, relative {_pct(r.our_rel_pct)} % — {agree}.")
    return "\n".join(lines)


def wse_conclusion(reduction: pd.DataFrame) -> str:
    """WSE reduction vs compute-matched uniform per arm (gdro_diagnostics.wse_reduction), beside
    the paper's 37.1 / 22.6 / 33.4 %."""
    from replication.report.stats import mean_ci

    if reduction.empty:
        return "No WSE diagnostics."
    groups = reduction.groupby("arm", sort=False) if "arm" in reduction else [("run", reduction)]
    parts = []
    for arm, g in groups:
        ci = mean_ci(g["reduction_pct"])
        rng = f" [{_pct(ci.lo)}, {_pct(ci.hi)}]" if np.isfinite(ci.lo) else ""
        parts.append(f"{arm} {_pct(ci.mean)} %{rng}")
    paper = " / ".join(_pct(x) for x in load_paper_table("gdro_wse")["wse_reduction_pct"])
    return (f"WSE reduction against compute-matched uniform (mean [95 % CI] over seeds): {', '.join(parts)}; "
            f"the GDRO paper reports {paper} % (1.7B / 4B / 8B).")


def conclusions(*, comparisons: pd.DataFrame | None = None, runs: pd.DataFrame | None = None,
                lab: pd.DataFrame | None = None, paper: pd.DataFrame | None = None,
                wse: pd.DataFrame | None = None, set_name: str = "average") -> str:
    """All available paragraphs, Markdown, in a fixed order."""
    out = []
    if comparisons is not None:
        out.append(arm_conclusions(comparisons, set_name))
    if paper is not None:
        out.append(paper_conclusion(paper))
    if wse is not None:
        out.append(wse_conclusion(wse))
    if runs is not None:
        out.append(overhead_conclusion(runs))
    if lab is not None:
        out.append(lab_conclusion(lab))
    return "\n\n".join(out) + "\n"
