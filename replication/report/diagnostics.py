"""Is each mechanism switched on? The regime diagnostics of issue 10 (point 1), each computed
from a paper's run logs and printed beside its target with pass/fail.

Targets (issue 10; chosen so that the small-scale runs test the mechanisms, not GRPO vs GRPO):
- uniform GRPO raises held-out mean@k by ≥ 3 points, 95 % CI excluding 0 (paired over seeds);
- ≥ 50 % of the baseline's prompt visits are to prompts seen before, without the held-out score
  falling (memorisation check: held-out gain ≥ 0, printed beside the training-score gain);
- VIP: the GP's next-step MAE on seen prompts ≤ the per-prompt moving average's, and on unseen
  prompts < the constant predictor's (the mean of everything seen so far, which is what the
  moving average predicts for an unseen prompt) — from report/predictor_study.py's mae_summary
  (over seeds: seed_mean_summary, with the paired difference and its CI from paired_mae);
  ≥ 30 % of the VIP arm's prompt-steps get n ≠ n̄;
- GDRO: Prompt-GDRO's per-step max/min weight has median ≥ 1.2; Rollout-GDRO departs from
  uniform in ≥ 50 % of steps;
- DynaMO: ≥ 50 % of the DynaMO arm's visits have per-prompt history (an earlier visit).
Reads results only (runs.load_steps / load_prompts / load_eval frames).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.report.engagement import engagement
from replication.report.sample_efficiency import training_curves
from replication.report.stats import compare


def heldout_gain(eval_df: pd.DataFrame, arm: str, metric: str = "mean@8", set_name: str = "average"):
    """after − before of one arm, paired over seeds (stats.Comparison)."""
    e = eval_df[(eval_df["arm"] == arm) & (eval_df["metric"] == metric) & (eval_df["set"] == set_name)]
    if e.empty:
        raise ValueError(f"no held-out rows for arm {arm!r}, metric {metric!r}, set {set_name!r}")
    piv = e.pivot_table(index="seed", columns="phase", values="value")
    return compare(piv["after"], piv["before"])


def revisit_share(prompts: pd.DataFrame, arm: str) -> pd.Series:
    """Per seed: share of the arm's prompt visits to a prompt already visited at an earlier step
    (= visits for which a per-prompt history exists)."""
    p = prompts[prompts["arm"] == arm].sort_values(["seed", "step"], kind="stable")
    if p.empty:
        raise ValueError(f"no per-prompt records for arm {arm!r}")
    seen_before = p.duplicated(["seed", "prompt_id"], keep="first")
    return seen_before.groupby(p["seed"]).mean()


def _row(diagnostic: str, arm: str, value: str, target: str, ok: bool | None) -> dict:
    return {"diagnostic": diagnostic, "arm": arm, "value": value, "target": target,
            "pass": None if ok is None else bool(ok)}


def issue10_diagnostics(steps: pd.DataFrame, prompts: pd.DataFrame, eval_df: pd.DataFrame, baseline: str, *,
                        vip: str | None = None, prompt_gdro: str | None = None, rollout_gdro: str | None = None,
                        dynamo: str | None = None, predictor_mae: pd.DataFrame | None = None,
                        predictor_paired: pd.DataFrame | None = None,
                        metric: str = "mean@8", set_name: str = "average", window: int = 20) -> pd.DataFrame:
    """One row per target: diagnostic, arm, value, target, pass. Arms left as None are skipped
    (each paper's notebook passes its own)."""
    rows = []
    g = heldout_gain(eval_df, baseline, metric, set_name)
    rows.append(_row(f"held-out {metric} gain of the baseline ({set_name})", baseline,
                     f"{100 * g.diff:+.1f} pts [{100 * g.lo:+.1f}, {100 * g.hi:+.1f}] (n={g.n})",
                     "≥ +3.0 pts, CI excluding 0", g.diff >= 0.03 and g.lo > 0))
    rv = revisit_share(prompts, baseline)
    rows.append(_row("prompt visits to prompts seen before", baseline, f"{rv.mean():.0%} (seeds {rv.min():.0%}–"
                     f"{rv.max():.0%})", "≥ 50 %", rv.mean() >= 0.5))
    base_steps = steps[steps["arm"] == baseline]
    window = int(min(window, base_steps.groupby("seed").size().min()))  # short runs: their length
    cur = training_curves(base_steps, window)
    tr = cur.groupby("seed")["smooth"].agg(lambda s: s.iloc[-1] - s.iloc[window - 1])  # last − first full window
    rows.append(_row("memorisation check: held-out gain beside training-score gain", baseline,
                     f"held-out {100 * g.diff:+.1f} pts, training {100 * tr.mean():+.1f} pts",
                     "held-out gain ≥ 0", g.diff >= 0))
    if vip is not None:
        if predictor_mae is not None:
            m = predictor_mae.set_index(["predictor", "subset"])["mae"]
            for subset, label, target, better in (
                    ("seen", "seen prompts (vs moving average)", "GP ≤ moving average", lambda a, b: a <= b),
                    ("unseen", "unseen prompts (vs constant)", "GP < constant", lambda a, b: a < b)):
                gp, ref = m.get(("gp", subset)), m.get(("moving-average", subset))
                if gp is None or ref is None:  # e.g. a run too short to revisit any prompt
                    rows.append(_row(f"VIP GP next-step MAE, {label}", vip, f"no {subset} prompts in the replay",
                                     target, None))
                else:
                    value = f"{gp:.3f} vs {ref:.3f}"
                    pc = (predictor_paired[predictor_paired["subset"] == subset]
                          if predictor_paired is not None else pd.DataFrame())
                    if not pc.empty:  # the difference with its CI over seeds (issue 20.5)
                        r = pc.iloc[0]
                        value += f", difference {r['diff']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] (n={int(r['n'])})"
                    rows.append(_row(f"VIP GP next-step MAE, {label}", vip, value, target, better(gp, ref)))
        else:
            rows.append(_row("VIP GP next-step MAE", vip, "not computed (pass predictor_mae)", "", None))
        e = engagement(steps[steps["arm"] == vip], prompts[prompts["arm"] == vip])
        rows.append(_row("VIP prompt-steps with n ≠ n̄", vip, f"{e['departure_share'].mean():.0%}", "≥ 30 %",
                         e["departure_share"].mean() >= 0.3))
    if prompt_gdro is not None:
        e = engagement(steps[steps["arm"] == prompt_gdro], prompts[prompts["arm"] == prompt_gdro])
        med = float(e["weight_ratio_median"].median())
        rows.append(_row("Prompt-GDRO median per-step max/min weight", prompt_gdro, f"{med:.4g}", "≥ 1.2",
                         med >= 1.2 if np.isfinite(med) else False))
    if rollout_gdro is not None:
        e = engagement(steps[steps["arm"] == rollout_gdro], prompts[prompts["arm"] == rollout_gdro])
        share = float(e["departure_steps"].mean())
        rows.append(_row("Rollout-GDRO steps departing from uniform", rollout_gdro, f"{share:.0%}", "≥ 50 %",
                         share >= 0.5))
    if dynamo is not None:
        h = revisit_share(prompts, dynamo)
        rows.append(_row("DynaMO visits with per-prompt history", dynamo, f"{h.mean():.0%}", "≥ 50 %",
                         h.mean() >= 0.5))
    return pd.DataFrame(rows)


def _verdict(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "—"
    return "PASS" if v else "FAIL"


def format_diagnostics(df: pd.DataFrame) -> str:
    """The table as text, PASS / FAIL / — per row."""
    return df.assign(**{"pass": df["pass"].map(_verdict)}).to_string(index=False)


def mean_at_k(eval_df: pd.DataFrame) -> str:
    """The runs' mean@k metric name (k is the profile's eval.k)."""
    names = sorted({m for m in eval_df["metric"].unique() if str(m).startswith("mean@")})
    if len(names) != 1:
        raise ValueError(f"expected one mean@k metric in the evaluations, found {names}")
    return names[0]


def mechanism_report(pr, baseline: str, *, vip: str | None = None, prompt_gdro: str | None = None,
                     rollout_gdro: str | None = None, dynamo: str | None = None,
                     predictor_mae: pd.DataFrame | None = None,
                     predictor_paired: pd.DataFrame | None = None, window: int = 20,
                     show=print) -> dict[str, pd.DataFrame]:
    """What each paper notebook prints for issue 10 (points 1 and 4) from a PaperRun (``pr``:
    steps, prompts, ev, tables): when each mechanism engages, sample efficiency against
    ``baseline``, and the regime diagnostics with their targets. Arms that did not run are
    skipped; the tables are written to pr.tables (engagement, sample_efficiency, diagnostics)."""
    from replication.report.engagement import describe_engagement, engagement_summary
    from replication.report.sample_efficiency import describe_sample_efficiency, sample_efficiency
    from replication.report.tables import write_tables

    ran = set(pr.steps["arm"])
    if baseline not in ran:
        show(f"baseline {baseline!r} did not run: no issue-10 diagnostics")
        return {}
    arms = {k: (v if v in ran else None) for k, v in
            dict(vip=vip, prompt_gdro=prompt_gdro, rollout_gdro=rollout_gdro, dynamo=dynamo).items()}
    metric = mean_at_k(pr.ev)
    eng = engagement_summary(engagement(pr.steps, pr.prompts))
    show("When is each mechanism engaged? (first step where it departs from the baseline's behaviour)")
    show(describe_engagement(eng))
    se = sample_efficiency(pr.steps, pr.ev, baseline, metric=metric, window=window)
    show("\nSample efficiency: rollouts to the baseline's final scores (mean [95 % CI] over the seeds that reach it)")
    show(describe_sample_efficiency(se))
    diag = issue10_diagnostics(pr.steps, pr.prompts, pr.ev, baseline, metric=metric, window=window,
                               predictor_mae=predictor_mae if arms["vip"] else None,
                               predictor_paired=predictor_paired if arms["vip"] else None, **arms)
    show("\nRegime diagnostics (issue 10): is the small-scale setting a fair test of the mechanism?")
    show(format_diagnostics(diag))
    se_cols = [c for c in se.columns if not c.endswith(("_mean", "_lo", "_hi", "_median")) and c != "censored"]
    shown_diag = diag.assign(**{"pass": diag["pass"].map(_verdict)})
    write_tables({"engagement": eng, "sample_efficiency": se[se_cols], "diagnostics": shown_diag}, pr.tables)
    return {"engagement": eng, "sample_efficiency": se, "diagnostics": diag}
