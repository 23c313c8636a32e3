"""Sample efficiency beside final accuracy (issue 10, point 4): how many rollouts a run needs to
reach the baseline's final training score and its final held-out score, with CIs over seeds.

Training score = ``prompt_accuracy`` of steps.jsonl: the mean over the step's prompts of each
prompt's success rate k/n. It does not depend on the allocation. The rollout-weighted mean
(``reward`` / ``accuracy``) does: a non-uniform allocation moves it by itself (Σ n_q p_q / Σ n_q
≠ mean p_q), which is why it is not used here. Per run the score is smoothed by a trailing
rolling mean over ``window`` steps, defined only once the window is full (a single lucky batch
at step 0 cannot "reach" a target, issue 20.6); the baseline's target is the mean over its seeds of
its final smoothed score; a run reaches it at the first step whose smoothed score is ≥ the target,
and the rollouts it needed are the cumulative ``rollouts`` up to and including that step.

A run that never reaches the target is right-censored at its total rollouts, never dropped: the
summary is the Kaplan–Meier median of rollouts-to-target (``scipy.stats.ecdf`` on ``CensoredData``),
"not reached" when fewer than half the seeds reach it, beside "k/n reached (m censored)"; the
mean [95 % CI] over the seeds that reach it is kept as a secondary column.

Held-out score: the runs log evaluations only before training (0 rollouts) and after it (all
rollouts), so the held-out crossing is interpolated linearly between those two points — a crude
estimate, labelled as such; a run whose final held-out score stays below the target has not
reached it. Reads results only (runs.load_steps / runs.load_eval frames).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.report.stats import mean_ci


def training_curves(steps: pd.DataFrame, window: int = 20, score: str = "prompt_accuracy") -> pd.DataFrame:
    """arm, seed, step, rollouts_cum, score, smooth (trailing rolling mean over ``window``)."""
    if score not in steps.columns:
        raise ValueError(f"steps have no {score!r} column (logged by train/loop.py since the per-prompt "
                         f"score was added); columns: {sorted(steps.columns)}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    d = steps.sort_values(["arm", "seed", "step"])[["arm", "seed", "step", "rollouts", score]].copy()
    d = d.rename(columns={score: "score"})
    g = d.groupby(["arm", "seed"], sort=False)
    d["rollouts_cum"] = g["rollouts"].cumsum()
    d["smooth"] = g["score"].transform(lambda s: s.rolling(window, min_periods=window).mean())
    return d.reset_index(drop=True)


def rollouts_to_target(curves: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per run: the first step whose smoothed score is ≥ target and the rollouts to it (NaN when
    the run never reaches it), plus the run's total rollouts."""
    rows = []
    for (arm, seed), g in curves.groupby(["arm", "seed"], sort=False):
        hit = g[g["smooth"] >= target]
        first = hit.iloc[0] if len(hit) else None
        rows.append({"arm": arm, "seed": seed, "target": target,
                     "step": float(first["step"]) if first is not None else np.nan,
                     "rollouts": float(first["rollouts_cum"]) if first is not None else np.nan,
                     "rollouts_total": float(g["rollouts_cum"].iloc[-1]),
                     "censored": first is None})
    return pd.DataFrame(rows)


def km_median(times, censored_at) -> float:
    """Kaplan–Meier median of a time-to-event with right censoring: ``times`` of the runs that
    reached the event, ``censored_at`` the totals of those that did not; NaN when the survival
    curve never falls to 0.5 (fewer than half reach it)."""
    from scipy.stats import CensoredData, ecdf

    times = [float(x) for x in times if np.isfinite(x)]
    right = [float(x) for x in censored_at if np.isfinite(x)]
    if not times:
        return np.nan
    sf = ecdf(CensoredData(uncensored=times, right=right)).sf
    below = np.nonzero(sf.probabilities <= 0.5)[0]
    return float(sf.quantiles[below[0]]) if len(below) else np.nan


def heldout_crossing(eval_df: pd.DataFrame, steps: pd.DataFrame, target: float, metric: str,
                     set_name: str = "average") -> pd.DataFrame:
    """Per run: final held-out score, reached (final ≥ target), and the rollouts at which the
    straight line from (0, before) to (total, after) crosses the target (NaN if not reached)."""
    e = eval_df[(eval_df["metric"] == metric) & (eval_df["set"] == set_name)]
    if e.empty:
        raise ValueError(f"no held-out rows for metric {metric!r} on set {set_name!r}")
    piv = e.pivot_table(index=["arm", "seed"], columns="phase", values="value")
    totals = steps.groupby(["arm", "seed"])["rollouts"].sum()
    rows = []
    for (arm, seed), r in piv.iterrows():
        before, after = float(r.get("before", np.nan)), float(r.get("after", np.nan))
        total = float(totals.get((arm, seed), np.nan))
        reached = after >= target
        if not reached:
            x = np.nan
        elif before >= target:
            x = 0.0
        else:
            x = total * (target - before) / (after - before)
        rows.append({"arm": arm, "seed": seed, "before": before, "after": after, "reached": bool(reached),
                     "censored": not reached,
                     "rollouts_interp": x, "rollouts_total": total})
    return pd.DataFrame(rows)


def _ci_text(values, digits: int = 0, scale: float = 1.0) -> tuple[float, float, float, str]:
    v = np.asarray([x for x in values if np.isfinite(x)], dtype=float) * scale
    if len(v) == 0:
        return np.nan, np.nan, np.nan, "not reached"
    ci = mean_ci(v)
    if len(v) < 2 or not np.isfinite(ci.lo):
        return ci.mean, np.nan, np.nan, f"{ci.mean:,.{digits}f}"
    return ci.mean, ci.lo, ci.hi, f"{ci.mean:,.{digits}f} [{ci.lo:,.{digits}f}, {ci.hi:,.{digits}f}]"


def sample_efficiency(steps: pd.DataFrame, eval_df: pd.DataFrame, baseline: str, metric: str = "mean@8",
                      set_name: str = "average", window: int = 20) -> pd.DataFrame:
    """One row per arm: final training score, rollouts to the baseline's final training score
    (mean [95 % CI] over the seeds that reach it; ``reached`` = k/n seeds), the same for the
    held-out score (linear interpolation, see the module docstring), and final held-out score."""
    # a run shorter than the window (smoke/quick profiles) uses its whole length as the window
    window = int(min(window, steps.groupby(["arm", "seed"]).size().min()))
    curves = training_curves(steps, window)
    if baseline not in set(curves["arm"]):
        raise ValueError(f"baseline arm {baseline!r} not in the runs; arms: {sorted(set(curves['arm']))}")
    finals = curves.groupby(["arm", "seed"])["smooth"].last()  # last full window
    train_target = float(finals.loc[baseline].mean())
    hit = rollouts_to_target(curves, train_target)
    held = heldout_crossing(eval_df, steps, 0.0, metric, set_name)  # for the baseline's final score
    held_target = float(held[held["arm"] == baseline]["after"].mean())
    held = heldout_crossing(eval_df, steps, held_target, metric, set_name)
    rows = []
    for arm in dict.fromkeys(curves["arm"]):
        h, hh = hit[hit["arm"] == arm], held[held["arm"] == arm]
        _, _, _, final_txt = _ci_text(finals.loc[arm].to_numpy(), 3)
        r_mean, r_lo, r_hi, r_txt = _ci_text(h["rollouts"])
        hr_mean, _, _, hr_txt = _ci_text(hh["rollouts_interp"])
        r_km = km_median(h["rollouts"], h.loc[h["censored"], "rollouts_total"])
        hr_km = km_median(hh["rollouts_interp"], hh.loc[hh["censored"], "rollouts_total"])
        n_cens, nh_cens = int(h["censored"].sum()), int(hh["censored"].sum())
        _, _, _, hfinal_txt = _ci_text(hh["after"], 3)
        rows.append({
            "arm": arm,
            "final train score": final_txt,
            "rollouts to baseline train score (KM median)": _km_text(r_km),
            "train reached": f"{len(h) - n_cens}/{len(h)} ({n_cens} censored)",
            "mean over seeds that reach it": r_txt,
            "rollouts_km_median": r_km, "censored": n_cens,
            "rollouts_mean": r_mean, "rollouts_lo": r_lo, "rollouts_hi": r_hi,
            "final held-out": hfinal_txt,
            "rollouts to baseline held-out (interp., KM median)": _km_text(hr_km),
            "held-out reached": f"{len(hh) - nh_cens}/{len(hh)} ({nh_cens} censored)",
            "heldout_rollouts_mean": hr_mean, "heldout_rollouts_km_median": hr_km,
        })
    out = pd.DataFrame(rows)
    out.attrs.update(train_target=train_target, heldout_target=held_target, window=window, metric=metric,
                     set_name=set_name, baseline=baseline)
    return out


def _km_text(x: float) -> str:
    return "not reached" if not np.isfinite(x) else f"{x:,.0f}"


def describe_sample_efficiency(table: pd.DataFrame) -> str:
    a = table.attrs
    head = (f"Targets (baseline {a.get('baseline')}): final training score (mean over prompts of per-prompt "
            f"success, {a.get('window')}-step rolling mean over full windows) {a.get('train_target', np.nan):.3f}; "
            f"final held-out {a.get('metric')} ({a.get('set_name')}) {a.get('heldout_target', np.nan):.3f}. Seeds that "
            f"never reach a target are censored at their total rollouts (Kaplan–Meier median).")
    cols = ["arm", "final train score", "rollouts to baseline train score (KM median)", "train reached",
            "mean over seeds that reach it", "final held-out",
            "rollouts to baseline held-out (interp., KM median)", "held-out reached"]
    return head + "\n" + table[cols].to_string(index=False)
