"""Conclusion paragraphs written from the measured numbers — no hand-typed claims.

Each function takes a frame produced elsewhere in replication.report and returns Markdown text;
``conclusions`` joins the ones given. Wording rules (replication/report/reading.py, from
replication/specs/reading.yaml, stated once at the top of the conclusions): a difference is
"Holm-significant" when its Holm-adjusted p over the paper's family of comparisons is below 0.05,
else "not significant (Holm)"; a not-significant difference is "equivalent" only when the TOST
within the spec's margin says so, else "inconclusive" with its interval — never "no effect" from
power alone. The MDE is given at the level Holm compared the row with and at the raw α. With one
seed there is no test: "one seed, no test".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from replication.report import reading
from replication.report.gdro_signal import signal_conclusion
from replication.report.paper_tables import LABEL, load_paper_table
from replication.report.stats import MINUS


def _pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}f}".replace("-", "\u2212")


def _signed(x: float, digits: int = 1) -> str:
    return _pct(x, digits) if x < 0 else f"+{x:.{digits}f}"


def _sig(r) -> bool:
    return bool(getattr(r, "significant_holm", getattr(r, "significant", False)))


def _span(values) -> str:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float) * 100
    if v.size == 0:
        return "–"
    lo, hi = _pct(v.min()), _pct(v.max())
    return lo if lo == hi else f"{lo}–{hi}"  # not "1.1–1.1"


def arm_conclusions(cmp_df: pd.DataFrame, set_name: str = "average") -> str:
    """Each arm against its baseline on ``set_name`` (tables.compare_to_baseline output), both
    metrics, read by the rules of reading.py: Holm-significant gains and losses, equivalence by
    TOST, inconclusive otherwise; and the MDE the seeds reached at Holm's strictest level against
    the design target."""
    if cmp_df.empty:
        return "No arm comparisons were available."
    rules = reading.load_rules()
    ann = reading.annotate(cmp_df, rules)
    part = ann[ann["set"] == set_name]
    if part.empty:
        return f"No comparisons on the {set_name!r} set."
    base = part["baseline"].iloc[0]
    fam = int(reading._family(ann).sum())
    head = (f"Against the baseline **{base}** on the {set_name} held-out set (paired over seeds, 95 % CI; raw p and "
            f"Holm p over all {fam} comparisons of this paper; MDE = minimum detectable effect, paired two-sided t, "
            f"power 0.8).") if fam else f"Against the baseline **{base}** on the {set_name} held-out set."
    lines = [head]
    for r in part.itertuples():
        lines.append(f"- {r.arm} (vs {r.baseline}), {r.metric}: {reading.phrase(r, rules)}.")
    if int(part["n"].max()) < 2:
        lines.append("")
        lines.append("In short: one seed per arm, so no test and no CI; the differences above are single runs.")
        return "\n".join(lines)
    by = {k: sorted({f"{r.arm} {r.metric}" for r in part.itertuples() if r.reading == k})
          for k in ("gain", "loss", "equivalent", "inconclusive")}
    verdict = [f"{rules['significant']} gains: {', '.join(by['gain'])}" if by["gain"]
               else f"no arm has a {rules['significant']} gain on the {set_name} set"]
    if by["loss"]:
        verdict.append(f"{rules['significant']} losses: {', '.join(by['loss'])}")
    if by["equivalent"]:
        verdict.append(f"equivalent to the baseline within ±{100 * float(part['margin'].iloc[0]):.1f} pts (TOST): "
                       f"{', '.join(by['equivalent'])}")
    if by["inconclusive"]:
        verdict.append(f"inconclusive (neither {rules['significant']} nor shown equivalent; read the interval): "
                       f"{', '.join(by['inconclusive'])}")
    raw_only = sorted({r.arm for r in part.itertuples() if r.p < rules["alpha"] and not r.holm_sig})
    if raw_only:
        verdict.append(f"p < {rules['alpha']:g} before but not after Holm's correction: {', '.join(raw_only)}")
    lines.append("")
    lines.append("In short: " + "; ".join(verdict) + ".")
    design = float(rules["design_mde"])
    primary = part[part["metric"].str.startswith("mean@")]
    if not primary.empty and np.isfinite(primary["se"]).any():
        strict = float(part["holm_alpha_min"].iloc[0])
        mde_strict = [reading.minimum_detectable_effect(se, df, alpha=strict)
                      for se, df in zip(primary["se"], primary["df"])]
        met = all(np.isfinite(x) and x <= design for x in mde_strict)
        lines.append(f"Design check: on {primary['metric'].iloc[0]} the seeds detect {_span(mde_strict)} pts at Holm's "
                     f"strictest level α/m = {strict:.2g} ({_span(primary['mde_raw'])} pts at α = {rules['alpha']:g}); "
                     f"the design target is {100 * design:.1f} pts — "
                     + ("met." if met else "not met at Holm's level: the achieved MDE above is what these seeds can "
                        "resolve."))
    return "\n".join(lines)


def significant_after_holm(cmp_df: pd.DataFrame, label: str = "this paper") -> str:
    """Every Holm-significant comparison, on any held-out set and any metric, gains and losses (issue
    20.4, 37.4): the one block (reading.significant_block) the README and results/summary.md render
    over all papers, here over this paper's family."""
    if cmp_df is None or cmp_df.empty or "p_holm" not in cmp_df:
        return ""
    return reading.significant_block({label: cmp_df}, source="tables/comparisons.csv")


def upper_bound_conclusion(cmp_df: pd.DataFrame, method: str = "RLOO+VIP", oracle: str = "RLOO+phat16",
                           set_name: str = "average", metrics: tuple[str, ...] = ("mean@8", "pass@8"),
                           probe_rollouts: int = 16) -> str:
    """The arm told p̂ by a probe (``oracle``: VIP's allocation on p̂ from ``probe_rollouts`` rollouts
    of the current policy per prompt, outside the budget and the gradient) beside ``method``, on
    ``set_name`` for every metric in ``metrics``. p̂ is an estimate with standard error up to
    √(0.25/probe_rollouts) (0.125 at 16), and a prompt whose p̂ is 0 or 1 gets the lower bound L: it is
    not an upper bound on what allocation can do, and its null bounds nothing. Read by the rules of
    reading.py: Holm-significant, equivalent by TOST, or inconclusive with its interval."""
    if cmp_df is None or cmp_df.empty:
        return ""
    rules = reading.load_rules()
    ann = reading.annotate(cmp_df, rules)
    part = ann[ann["set"] == set_name]
    if method not in set(part["arm"]) or oracle not in set(part["arm"]):
        return ""
    se_max = (0.25 / probe_rollouts) ** 0.5
    lines = [f"{oracle} is VIP's allocation told p̂ by a {probe_rollouts}-sample probe of the current policy per "
             f"prompt (outside the budget and the gradient): an estimate of p with standard error up to "
             f"{se_max:.3f}, and a prompt whose p̂ is 0 or 1 gets the lower bound L. It is a noisy-p control, "
             f"not an upper bound: whatever it shows bounds no other arm. On the {set_name} held-out set:"]
    for metric in metrics:
        for arm in (oracle, method):
            rows = part[(part["arm"] == arm) & (part["metric"] == metric)]
            for r in rows.itertuples():
                lines.append(f"- {arm} vs {r.baseline}, {metric}: {reading.phrase(r, rules)}.")
    o = part[part["arm"] == oracle]
    reads = dict(zip(o["metric"], o["reading"]))
    if any(v == "gain" for v in reads.values()):
        why = (f"Told p̂, the allocation has a {rules['significant']} gain: allocation has room here.")
    elif any(v == "loss" for v in reads.values()):
        why = (f"Told p̂, the allocation has a {rules['significant']} loss on "
               + ", ".join(m for m, v in reads.items() if v == "loss")
               + ": with this probe, VIP's variance objective does not serve held-out accuracy here.")
    else:
        why = "Told p̂, the allocation shows no Holm-significant change" + reading.null_reading(reads, "the baseline")
        why += (". The positive control told p (the paper's +true-p arm, when it ran) is what says whether "
                "allocation had room at this scale.")
    return "\n".join(lines) + "\n\n" + why


def baseline_moves(eval_df: pd.DataFrame, baselines: list[str], sets: tuple[str, ...] = ("average",)) -> str:
    """What training does to the baselines themselves (issue 20.4): for every metric, held-out
    after − before paired over seeds; every metric whose 95 % CI excludes 0 is listed, falls
    (e.g. pass@k while mean@k rises) as well as gains."""
    from replication.report.diagnostics import heldout_gain

    moved, flat = [], []
    for base in dict.fromkeys(baselines):
        for set_name in sets:
            for metric in sorted(set(eval_df.loc[(eval_df["arm"] == base) & (eval_df["set"] == set_name), "metric"])):
                g = heldout_gain(eval_df, base, metric, set_name)
                if g.n < 2 or not np.isfinite(g.lo):
                    flat.append(f"{base} {metric} (one seed)")
                    continue
                txt = (f"{base}, {set_name} {metric}: {_signed(g.diff * 100)} pts "
                       f"[{_signed(g.lo * 100)}, {_signed(g.hi * 100)}]")
                if g.lo > 0:
                    moved.append(txt + " (rises)")
                elif g.hi < 0:
                    moved.append(txt + " (falls)")
                else:
                    flat.append(f"{base} {set_name} {metric}")
    lines = ["What RL training does to each arm (held-out after − before, paired over seeds, 95 % CI):"]
    lines += [f"- {m}." for m in moved] or ["- no metric moves: every interval includes 0."]
    if flat:
        lines.append(f"Interval includes 0 (no change shown): {', '.join(flat)}.")
    return "\n".join(lines)


def overhead_conclusion(runs_df: pd.DataFrame) -> str:
    """Method time (allocator plan + observe, Prompt-GDRO's weights + observe, and the probe of an
    arm told p̂ by one) as a share of wall time and per step (runs.list_runs), beside VIP's share and
    GDRO's per-step figures; an arm's probe is also given on its own, with its rollouts."""
    col = "overhead_share" if "overhead_share" in runs_df else "allocator_share"
    g = runs_df.groupby("arm", sort=False)[col].mean().mul(100).sort_values(ascending=False)
    g = g[np.isfinite(g)]
    if g.empty:
        return "No allocator timings were logged."
    probe = (runs_df.groupby("arm", sort=False)[["probe_share", "probe_rollouts", "rollouts_total"]].mean()
             if {"probe_share", "probe_rollouts", "rollouts_total"} <= set(runs_df) else pd.DataFrame())
    parts = []
    for arm, v in g.items():
        txt = f"{arm} {_pct(v, 2)} %"
        if arm in probe.index and probe.at[arm, "probe_rollouts"] > 0:
            pr = probe.loc[arm]
            txt += (f" (of which its probe {_pct(100 * pr['probe_share'], 2)} %, "
                    f"{pr['probe_rollouts'] / max(pr['rollouts_total'], 1):.1f} probe rollouts per budgeted rollout, "
                    f"outside the budget)")
        parts.append(txt)
    vip = load_paper_table("vip_overhead")
    paper = " / ".join(f"{_pct(v, 2)} %" for v in vip["share_pct"])
    text = (f"Method time (allocator plan + observe, Prompt-GDRO's weights + observe, and any probe) as a share of "
            f"training wall time (mean over seeds): {', '.join(parts)}. The largest is {g.index[0]} at "
            f"{_pct(g.iloc[0], 2)} %; VIP reports {paper} of its model-specific time for 1.5B / 7B (secondary).")
    if "overhead_per_step" in runs_df:
        ps = runs_df.groupby("arm", sort=False)["overhead_per_step"].mean()
        ps = ps[np.isfinite(ps)]
        gd = load_paper_table("gdro_overhead")
        gd_txt = ", ".join(f"{r.method} {r.advantage_stage_seconds_per_step:.3f} s" for r in gd.itertuples())
        text += (f" Per step: {', '.join(f'{a} {v * 1000:.1f} ms' for a, v in ps.items())}; the GDRO paper's "
                 f"advantage stage takes {gd_txt} per step (256 prompts × 4 rollouts).")
    return text + (" Our steps are far cheaper than a paper-scale step, so our shares overstate the relative "
                   "cost at scale.")


def lab_conclusion(summary: pd.DataFrame, variance_metric: str = "variance_rloo_vs_uniform") -> str:
    """Lab effect sizes (lab.summarise_lab output): variance and non-zero-advantage ratios to
    uniform per method, the best method without the true p under EACH objective, and the gap
    between VIP with its GP predictions and VIP with the true p."""
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
    objectives = [m for m in pd.unique(summary["metric"]) if str(m).startswith("variance_") and
                  str(m).endswith("_vs_uniform")]
    best = []
    for obj in objectives:
        t = summary[summary["metric"] == obj].set_index("method")
        real = t.drop(index=[m for m in ("uniform", "vip-oracle") if m in t.index])
        if real.empty:
            continue
        b = real["mean"].idxmin()
        best.append((obj.replace("variance_", "").replace("_vs_uniform", ""), b, real.at[b, "mean"]))
    if best:
        winners = {b for _, b, _ in best}
        txt = "; ".join(f"under the {o} objective {b} ×{x:.3f}" for o, b, x in best)
        lines.append(f"\nThe lowest variance without the true p: {txt}"
                     + (" — the winner depends on the objective, so no method is best without the true p in "
                        "general." if len(winners) > 1 else "."))
    if "vip-gp" in v.index and "vip-oracle" in v.index:
        gp, orc = v.at["vip-gp", "mean"], v.at["vip-oracle", "mean"]
        direction = "raises" if gp > 1 else "lowers"
        lines.append(f"VIP's allocation with its GP predictions {direction} the variance to ×{gp:.3f} of uniform, "
                     f"with the true p it reaches ×{orc:.3f}: in this lab the predictor, not the allocation rule, "
                     f"decides whether VIP helps.")
    return "\n".join(lines)


def predictor_conclusion(mae: pd.DataFrame, paired: pd.DataFrame | None = None) -> str:
    """VIP's predictor study (predictor_study.seed_mean_summary, or mae_summary of one run): GP vs
    the per-prompt moving average; with ``paired`` (predictor_study.paired_mae) the difference
    carries its CI over seeds."""
    if mae is None or mae.empty:
        return "No predictor study."
    t = mae.pivot(index="predictor", columns="subset", values="mae")
    seeds = int(mae["seeds"].max()) if "seeds" in mae.columns else 1
    over = f"mean over {seeds} seeds' uniform RLOO runs" if seeds > 1 else "replayed on a uniform run"
    lines = ["Predictor study (VIP Fig. 3 analogue; MAE of the predicted success probability against the "
             f"observed k/n, {over}):"]
    for name in t.index:
        lines.append("- " + name + ": " + ", ".join(f"{s} {t.at[name, s]:.3f}" for s in t.columns
                                                     if np.isfinite(t.at[name, s])) + ".")
    if {"gp", "moving-average"} <= set(t.index) and "all" in t.columns:
        gp, ma = t.at["gp", "all"], t.at["moving-average", "all"]
        if gp > ma:
            lines.append(f"\nThe GP predicts WORSE than a per-prompt moving average here (MAE {gp:.3f} vs {ma:.3f} "
                         f"over all prompts), the opposite of the paper's Fig. 3.")
        else:
            lines.append(f"\nThe GP predicts better than a per-prompt moving average here (MAE {gp:.3f} vs {ma:.3f}), "
                         f"as in the paper's Fig. 3.")
        if "unseen" in t.columns and np.isfinite(t.at["gp", "unseen"]):
            lines[-1] += (f" On prompts never seen before: GP {t.at['gp', 'unseen']:.3f}, moving average "
                          f"{t.at['moving-average', 'unseen']:.3f}.")
    if paired is not None and not paired.empty:
        parts = []
        for r in paired.itertuples():
            verdict = ("GP better" if r.hi < 0 else "moving average better" if r.lo > 0 else "no difference shown")
            parts.append(f"{r.subset} {r.diff:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}]".replace("-", MINUS) + f" ({verdict})")
        lines.append(f"GP − moving average, paired over {int(paired['n'].max())} seeds (95 % t CI): "
                     + "; ".join(parts) + ".")
    return "\n".join(lines)


def paper_conclusion(pvo: pd.DataFrame) -> str:
    """Direction agreement between the paper's change and ours (paper_tables.paper_vs_ours), or
    why a paper row has no analogue here."""
    if pvo.empty:
        return "No paper-vs-ours rows."
    lines = [f"Paper vs ours ({LABEL}; each paper row is set beside at most one measurement of ours):"]
    for r in pvo.itertuples():
        head = (f"- {r.model}, {r.baseline} → {r.method}, {r.benchmark} {r.metric}: paper "
                f"{_pct(r.paper_abs, 2)} pts ({_pct(r.paper_rel_pct)} %)")
        analogue = getattr(r, "analogue", "paired")
        if analogue != "paired":
            lines.append(f"{head}; {analogue}.")
            continue
        outside = pd.isna(getattr(r, "p_holm", np.nan)) and "holm_family" in pvo.columns
        sig = bool(getattr(r, "significant", False)) if outside else _sig(r)  # no Holm p outside the family
        qual = " (raw p, outside the Holm family)" if outside else ""
        if int(r.n) < 2:
            agree = "one seed, no test"
        elif sig:
            agree = ("same direction" if np.sign(r.our_abs) == np.sign(r.paper_abs) else "opposite direction") + qual
        else:
            agree = "not significant here" + qual
        lines.append(f"{head}; ours on {r.our_set} {r.our_metric} {r.ours_text}, relative "
                     f"{_pct(r.our_rel_pct)} % — {agree}.")
    return "\n".join(lines)


def wse_conclusion(reduction: pd.DataFrame) -> str:
    """WSE reduction vs compute-matched uniform per arm (gdro_diagnostics.wse_reduction), beside
    the paper's 37.1 / 22.6 / 33.4 %, with the σ̂ definition used."""
    from replication.report.stats import mean_ci

    if reduction.empty:
        return "No WSE diagnostics."
    groups = reduction.groupby("arm", sort=False) if "arm" in reduction else [("run", reduction)]
    parts = []
    for arm, g in groups:
        ci = mean_ci(g["reduction_pct"])
        rng = f" [{_pct(ci.lo)}, {_pct(ci.hi)}]" if np.isfinite(ci.lo) else " (one seed, no CI)"
        parts.append(f"{arm} {_pct(ci.mean)} %{rng}")
    paper = " / ".join(_pct(x) for x in load_paper_table("gdro_wse")["wse_reduction_pct"])
    signal = str(reduction["signal"].iloc[0]) if "signal" in reduction else "rate"
    if signal == "loss":
        defn = "σ̂_b = per-bin std of the per-prompt training loss (the paper's definition)"
    else:
        defn = ("σ̂_b = per-bin std of the per-prompt success rate k/n — NOT the paper's σ̂ (std of the "
                "per-prompt training signal), so the two reductions are different quantities")
    return (f"WSE reduction against compute-matched uniform (mean [95 % CI] over seeds; {defn}): "
            f"{', '.join(parts)}; the GDRO paper reports {paper} % (1.7B / 4B / 8B).")


def _predictor_from_tables(comparisons: pd.DataFrame | None, name: str = "predictor_study") -> pd.DataFrame | None:
    """The VIP notebook writes predictor_study.csv (and predictor_vs_reference.csv) before the
    conclusions; pipeline.comparisons records where (``attrs["tables"]``)."""
    if comparisons is None or comparisons.attrs.get("paper") != "vip":
        return None
    path = Path(comparisons.attrs.get("tables", "")) / f"{name}.csv"
    return pd.read_csv(path) if path.is_file() else None


def _probe_rollouts(runs: pd.DataFrame | None, arm: str, default: int = 16) -> int:
    """The probe size an arm told p̂ by a probe trained with (its runs' config.json)."""
    if runs is None or "dir" not in runs or arm not in set(runs["arm"]):
        return default
    from replication.report.runs import load_config

    opts = (load_config(runs.loc[runs["arm"] == arm, "dir"].iloc[0]).get("allocator") or {}).get("options") or {}
    return int(opts.get("probe_rollouts", default))


def conclusions(*, comparisons: pd.DataFrame | None = None, runs: pd.DataFrame | None = None,
                lab: pd.DataFrame | None = None, paper: pd.DataFrame | None = None,
                wse: pd.DataFrame | None = None, predictor: pd.DataFrame | None = None,
                predictor_paired: pd.DataFrame | None = None,
                gdro_signal: pd.DataFrame | None = None, rollout_gdro_signal: pd.DataFrame | None = None,
                set_name: str = "average", evals: pd.DataFrame | None = None,
                positive_control: str | None = None, gradient_vs_lab: pd.DataFrame | None = None,
                oracle_share: pd.DataFrame | None = None) -> str:
    """All available paragraphs, Markdown, in a fixed order. For VIP the predictor study is
    included (``predictor``, or read from the paper's tables folder when not given). With ``evals``
    (the held-out frame) every arm's own before → after moves are listed (issue 20.4). The reading
    rules (reading.definition) open the text; every Holm-significant row of the paper follows the
    headline comparisons (reading.significant_block). ``positive_control`` (the declared study's
    verdict, report.positive_control.verdict_text) comes first of all: every null below is read
    in its light (issue 37). The paper's own positive control (its +true-p arm, report/true_p.py,
    with ``gradient_vs_lab`` and ``oracle_share`` from the notebook) follows the reading rules."""
    if predictor is None:
        predictor = _predictor_from_tables(comparisons)
    if predictor_paired is None:
        predictor_paired = _predictor_from_tables(comparisons, "predictor_vs_reference")
    out = [positive_control or ""]
    if comparisons is not None:
        out.append(reading.definition())
        from replication.report.true_p import oracle_arm, true_p_conclusion

        oracle = oracle_arm(comparisons)
        if oracle is not None:
            out.append(true_p_conclusion(comparisons, runs=runs, gradient_vs_lab=gradient_vs_lab, shares=oracle_share,
                                         probe_rollouts=_probe_rollouts(runs, oracle, default=64)))
        out.append(arm_conclusions(comparisons, set_name))
        if not comparisons.empty:
            from replication.report.summary import PAPERS as LABELS

            label = LABELS.get(str(comparisons.attrs.get("paper", "")), "this paper")
            out.append(significant_after_holm(comparisons, label))
            out.append(upper_bound_conclusion(comparisons, probe_rollouts=_probe_rollouts(runs, "RLOO+phat16")))
            if evals is not None:
                out.append(baseline_moves(evals, list(dict.fromkeys([*comparisons["baseline"], *comparisons["arm"]]))))
    if paper is not None:
        out.append(paper_conclusion(paper))
    if wse is not None:
        out.append(wse_conclusion(wse))
    if gdro_signal is not None and not gdro_signal.empty:
        out.append(signal_conclusion(gdro_signal))
    if rollout_gdro_signal is not None and not rollout_gdro_signal.empty:
        from replication.report.rollout_gdro_signal import signal_conclusion as rollout_signal_conclusion

        out.append(rollout_signal_conclusion(rollout_gdro_signal))
    if runs is not None:
        out.append(overhead_conclusion(runs))
    if predictor is not None:
        out.append(predictor_conclusion(predictor, predictor_paired))
    if lab is not None:
        out.append(lab_conclusion(lab))
    return "\n\n".join(o for o in out if o) + "\n"
