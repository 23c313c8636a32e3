"""GDRO diagnostics from per-prompt records: WSE, and where the rollouts go by difficulty bin.

Weighted standard error (GDRO, Rollout-GDRO theory after Thm 4.2; gdro.md):

    WSE(t) = Σ_b q_t(b) σ̂_b / √n_b(t)

- q_t(b): share of step t's prompts in bin b;
- n_b(t): mean rollouts per prompt of bin b at step t;
- σ̂_b: per-bin standard deviation (ddof 1) of the per-prompt training signal across the bin's
  prompt records of the last ``window`` steps (t−window, t]. The signal is the per-prompt
  success rate k/n (``signal="rate"``, default: always logged, and the Bernoulli spread that
  drives the gradient variance of binary-reward estimators) or the per-prompt PPO loss
  (``signal="loss"``, the paper's "training signal" read literally; near zero for group-centred
  advantages at ratio 1). Only ``signal="loss"`` is the paper's σ̂; the frames carry a ``signal``
  column and the conclusion labels a rate-based WSE as a different quantity. Bins with fewer than two records in the window have no σ̂ and are left
  out of both WSE and its uniform counterpart.

The compute-matched uniform counterpart replaces n_b(t) by n̄(t), the step's mean rollouts per
prompt; the reported reduction is 1 − mean_t WSE / mean_t WSE_uniform (paper: 37.1 / 22.6 /
33.4 % for 1.7B / 4B / 8B, gdro_wse.csv).

Bins are the logged ones (GDRO arms log them); for runs without bins (uniform, VIP, DynaMO) they
are recomputed by replaying GDRO's difficulty classifier over the records in step order, which
is exactly what the trainer's classifier would have said at each step.

Prompt-GDRO's weights (issue 20, points 2 and 8): ``all_zero_weight_steps`` (share of steps at
which every prompt weight is 0: no policy-gradient step at all), ``bin_occupancy`` (share of
prompt records per bin over time, with their weights) and ``loss_signal`` (zero share of the
prompt losses, spread of the debiased bin means and of the weights; to set runs with and without
β·KL side by side).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.allocation.difficulty import DifficultyClassifier, DifficultyConfig

RUN_KEYS = ["arm", "seed"]


def _runs(prompts: pd.DataFrame):
    keys = [k for k in RUN_KEYS if k in prompts.columns]
    if not keys:
        yield (), prompts
        return
    yield from prompts.groupby(keys, sort=False)


def replay_bins(records: pd.DataFrame, **classifier_options) -> np.ndarray:
    """Bins that GDRO's online classifier (difficulty.py) assigns to one run's records: at each
    step, the bin from the visits of earlier steps, then an update with c(x) = any correct."""
    clf = DifficultyClassifier(DifficultyConfig(**classifier_options))
    out = np.empty(len(records), dtype=np.int64)
    pos = np.arange(len(records))
    for _, grp in records.assign(_pos=pos).groupby("step", sort=True):
        ids = grp["prompt_id"].tolist()
        out[grp["_pos"].to_numpy()] = clf.bins(ids)
        clf.update(ids, (grp["successes"] > 0).to_numpy())
    return out


def with_bins(prompts: pd.DataFrame, **classifier_options) -> pd.DataFrame:
    """Copy of the prompts frame with every record's difficulty bin: logged bins kept; runs
    without (any missing) logged bins replayed by ``replay_bins``."""
    parts = []
    for _, run in _runs(prompts):
        run = run.copy()
        if "bin" not in run or run["bin"].isna().any():
            run["bin"] = replay_bins(run, **classifier_options)
        run["bin"] = run["bin"].astype(np.int64)
        parts.append(run)
    return pd.concat(parts)


def wse(prompts: pd.DataFrame, signal: str = "rate", window: int = 5, **classifier_options) -> pd.DataFrame:
    """WSE(t) and its compute-matched uniform counterpart per run and step.

    Columns: arm, seed (when present), step, wse, wse_uniform, n_bar, bins_used.
    """
    if signal not in ("rate", "loss"):
        raise ValueError(f"signal must be 'rate' or 'loss', got {signal!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    df = with_bins(prompts, **classifier_options)
    df["signal"] = df["successes"] / df["n"] if signal == "rate" else df["loss"]
    from tqdm import tqdm  # tens of seconds over a paper's runs

    rows = []
    for key, run in tqdm(list(_runs(df)), desc="WSE", unit="run", leave=False):
        key = key if isinstance(key, tuple) else (key,)
        steps = np.sort(run["step"].unique())
        for t in steps:
            now = run[run["step"] == t]
            recent = run[(run["step"] > t - window) & (run["step"] <= t)]
            sd = recent.groupby("bin")["signal"].std(ddof=1)
            by_bin = now.groupby("bin").agg(count=("n", "size"), n_mean=("n", "mean"))
            by_bin["q"] = by_bin["count"] / len(now)
            by_bin["sd"] = sd.reindex(by_bin.index)
            use = by_bin[by_bin["sd"].notna()]
            n_bar = float(now["n"].mean())
            rows.append({
                **dict(zip([k for k in RUN_KEYS if k in df.columns], key)),
                "step": int(t),
                "wse": float((use["q"] * use["sd"] / np.sqrt(use["n_mean"])).sum()),
                "wse_uniform": float((use["q"] * use["sd"]).sum() / np.sqrt(n_bar)),
                "n_bar": n_bar,
                "bins_used": int(len(use)),
                "signal": signal,
            })
    return pd.DataFrame(rows)


def wse_reduction(wse_df: pd.DataFrame, from_step: int = 0) -> pd.DataFrame:
    """Per run: mean WSE, mean uniform WSE over steps ≥ from_step, and the relative reduction
    1 − WSE/WSE_uniform in % (GDRO's 37.1 / 22.6 / 33.4 %)."""
    keys = [k for k in RUN_KEYS if k in wse_df.columns]
    sel = wse_df[wse_df["step"] >= from_step]
    g = sel.groupby(keys, sort=False) if keys else [((), sel)]
    rows = []
    for key, run in g:
        key = key if isinstance(key, tuple) else (key,)
        w, u = float(run["wse"].mean()), float(run["wse_uniform"].mean())
        rows.append({**dict(zip(keys, key)), "wse": w, "wse_uniform": u,
                     "reduction_pct": 100.0 * (1.0 - w / u) if u > 0 else np.nan,
                     "signal": str(run["signal"].iloc[0]) if "signal" in run else "rate"})
    return pd.DataFrame(rows)


def rollout_share(prompts: pd.DataFrame, step_window: int = 10, **classifier_options) -> pd.DataFrame:
    """Share of rollouts and of prompts per bin in windows of ``step_window`` steps.

    Columns: arm, seed (when present), window_start, bin, rollout_share, prompt_share.
    Shares sum to 1 over bins within each (run, window).
    """
    df = with_bins(prompts, **classifier_options)
    df["window_start"] = (df["step"] // step_window) * step_window
    keys = [k for k in RUN_KEYS if k in df.columns] + ["window_start"]
    g = df.groupby(keys + ["bin"]).agg(rollouts=("n", "sum"), prompts=("n", "size")).reset_index()
    tot = g.groupby(keys)[["rollouts", "prompts"]].transform("sum")
    g["rollout_share"] = g["rollouts"] / tot["rollouts"]
    g["prompt_share"] = g["prompts"] / tot["prompts"]
    return g[keys + ["bin", "rollout_share", "prompt_share"]]


def high_bin_share(share_df: pd.DataFrame, min_bin: int = 5) -> pd.DataFrame:
    """Rollout and prompt share of bins ≥ ``min_bin`` per (run, window), and their ratio
    (GDRO, 4B at step 300: > 80 % of rollouts to bins ≥ 5 holding < 20 % of prompts)."""
    keys = [k for k in RUN_KEYS + ["window_start"] if k in share_df.columns]
    hi = share_df[share_df["bin"] >= min_bin].groupby(keys)[["rollout_share", "prompt_share"]].sum()
    hi = hi.reindex(share_df.groupby(keys).size().index, fill_value=0.0).reset_index()
    hi["ratio"] = hi["rollout_share"] / hi["prompt_share"].where(hi["prompt_share"] > 0)
    return hi


# --------------------------------------------------------------------------- Prompt-GDRO weights
def _keys(df: pd.DataFrame) -> list[str]:
    return [k for k in RUN_KEYS if k in df.columns]


def _check_columns(prompts: pd.DataFrame, needed: tuple[str, ...], what: str) -> None:
    missing = [c for c in needed if c not in prompts.columns]
    if missing:
        raise ValueError(f"{what} needs per-prompt column(s) {missing}; the records have {sorted(prompts.columns)}")


def _longest_true_run(flags: np.ndarray) -> int:
    best = cur = 0
    for f in flags:
        cur = cur + 1 if f else 0
        best = max(best, cur)
    return best


def all_zero_weight_steps(prompts: pd.DataFrame, from_step: int = 0) -> pd.DataFrame:
    """Per run: how often Prompt-GDRO trains on nothing (issue 20.8). A step is all-zero when
    every prompt record of the step has ``weight`` exactly 0: its policy-gradient term is 0
    (only β·KL would still move the policy).

    Columns: arm, seed (when present), steps, all_zero_steps, all_zero_share, longest_all_zero_run
    (consecutive steps), first_all_zero_step (−1 when none), zero_weight_share (share of the
    prompt records with weight 0). Steps before ``from_step`` are left out."""
    _check_columns(prompts, ("step", "weight"), "all_zero_weight_steps")
    keys = _keys(prompts)
    rows = []
    for key, run in _runs(prompts[prompts["step"] >= from_step]):
        key = key if isinstance(key, tuple) else (key,)
        if run["weight"].isna().any():
            raise ValueError(f"all_zero_weight_steps: run {dict(zip(keys, key))} has records without a weight")
        zero = run["weight"].to_numpy(np.float64) == 0.0
        per_step = pd.Series(zero, index=run.index).groupby(run["step"]).all().sort_index()
        flags = per_step.to_numpy(bool)
        rows.append({
            **dict(zip(keys, key)),
            "steps": int(len(flags)),
            "all_zero_steps": int(flags.sum()),
            "all_zero_share": float(flags.mean()) if len(flags) else np.nan,
            "longest_all_zero_run": _longest_true_run(flags),
            "first_all_zero_step": int(per_step.index[flags][0]) if flags.any() else -1,
            "zero_weight_share": float(zero.mean()) if len(zero) else np.nan,
        })
    return pd.DataFrame(rows)


def bin_occupancy(prompts: pd.DataFrame, step_window: int = 10, **classifier_options) -> pd.DataFrame:
    """Bins' occupancy over time: per run, window of ``step_window`` steps and bin, the share of
    the window's prompt records in the bin, and (when logged) their mean weight and the share of
    them with weight 0. Bins are the logged ones (replayed with ``classifier_options`` where
    missing, as ``with_bins``). Occupancy sums to 1 over bins within each (run, window).

    Columns: arm, seed (when present), window_start, bin, records, occupancy[, mean_weight,
    zero_weight_share]."""
    _check_columns(prompts, ("step", "prompt_id"), "bin_occupancy")
    if step_window < 1:
        raise ValueError(f"step_window must be >= 1, got {step_window}")
    df = with_bins(prompts, **classifier_options)
    df["window_start"] = (df["step"] // step_window) * step_window
    keys = _keys(df) + ["window_start"]
    agg = {"records": ("step", "size")}
    if "weight" in df.columns:
        df["_zero"] = (df["weight"] == 0.0).astype(np.float64)
        agg.update(mean_weight=("weight", "mean"), zero_weight_share=("_zero", "mean"))
    g = df.groupby(keys + ["bin"]).agg(**agg).reset_index()
    g["occupancy"] = g["records"] / g.groupby(keys)["records"].transform("sum")
    cols = keys + ["bin", "records", "occupancy"] + [c for c in ("mean_weight", "zero_weight_share") if c in g]
    return g[cols]


def loss_signal(prompts: pd.DataFrame, share_floor: float = 0.05, from_step: int = 0) -> pd.DataFrame:
    """What Prompt-GDRO's adversary sees, per run (issue 20.2: to compare runs with and without
    the β·KL term in ℓ(x); docs/fidelity/gdro.md #11b).

    From the per-prompt records (``loss`` = ℓ(x) as fed to the adversary, ``bin``, ``weight``):
    - loss_zero_share: share of records with ℓ exactly 0 (the surrogate alone is 0 at ratio 1);
      loss_positive_share: share with ℓ > 0 (β·KL ≥ 0 pushes ℓ up); loss_mean, loss_abs_median;
    - bin_mean_spread_median: median over steps of max_b − min_b of the step's bin means debiased
      by the realised share, ℓ̄_b / max(q̂_b, share_floor) (what the EMA score S_b averages);
    - weight_ratio_median: median over steps of max/min of the step's positive weights (1 = no
      re-weighting); weight_ratio_ge_1_2_share: share of steps whose max/min is ≥ 1.2 (issue 10's
      engagement threshold: a median can hide a re-weighting confined to part of the run);
      weight_sd_median: median over steps of the sd of the weights (ddof 0).

    Columns: arm, seed (when present), records, steps, and the figures above."""
    _check_columns(prompts, ("step", "prompt_id", "loss", "bin", "weight"), "loss_signal")
    if not 0.0 < share_floor <= 1.0:
        raise ValueError(f"share_floor must be in (0, 1], got {share_floor!r}")
    keys = _keys(prompts)
    rows = []
    for key, run in _runs(prompts[prompts["step"] >= from_step]):
        key = key if isinstance(key, tuple) else (key,)
        loss = run["loss"].to_numpy(np.float64)
        size = run.groupby("step")["prompt_id"].transform("size")
        per_bin = run.assign(_size=size).groupby(["step", "bin"]).agg(
            mean_loss=("loss", "mean"), n=("loss", "size"), total=("_size", "first"))
        per_bin["debiased"] = per_bin["mean_loss"] / np.maximum(per_bin["n"] / per_bin["total"], share_floor)
        spread = per_bin.groupby(level="step")["debiased"].agg(lambda s: s.max() - s.min())
        w = run[run["weight"] > 0].groupby("step")["weight"]
        ratio = w.max() / w.min()
        sd = run.groupby("step")["weight"].std(ddof=0)
        rows.append({
            **dict(zip(keys, key)),
            "records": int(len(run)),
            "steps": int(run["step"].nunique()),
            "loss_zero_share": float(np.mean(loss == 0.0)),
            "loss_positive_share": float(np.mean(loss > 0.0)),
            "loss_mean": float(loss.mean()),
            "loss_abs_median": float(np.median(np.abs(loss))),
            "bin_mean_spread_median": float(spread.median()),
            "weight_ratio_median": float(ratio.median()) if len(ratio) else np.nan,
            "weight_ratio_ge_1_2_share": float((ratio >= 1.2).mean()) if len(ratio) else np.nan,
            "weight_sd_median": float(sd.median()),
        })
    return pd.DataFrame(rows)


def weight_signal_by_arm(zero_steps: pd.DataFrame, signal: pd.DataFrame) -> pd.DataFrame:
    """One row per arm from the per-run tables of ``all_zero_weight_steps`` and ``loss_signal``
    (issue 20.2 and 20.8): runs; the share of steps with every weight 0 (mean over runs, and its
    min–max); runs with any such step; the medians over runs of the loss's zero share, the
    debiased bin-mean spread and the per-step max/min weight; and the mean over runs of the share
    of steps re-weighted by at least 1.2 (max/min)."""
    z = zero_steps.groupby("arm").agg(runs=("all_zero_share", "size"), all_zero_share_mean=("all_zero_share", "mean"),
                                      all_zero_share_min=("all_zero_share", "min"),
                                      all_zero_share_max=("all_zero_share", "max"),
                                      runs_with_all_zero_steps=("all_zero_steps", lambda x: int((x > 0).sum())),
                                      longest_all_zero_run_max=("longest_all_zero_run", "max"))
    s = signal.groupby("arm").agg(loss_zero_share=("loss_zero_share", "median"),
                                  loss_positive_share=("loss_positive_share", "median"),
                                  bin_mean_spread=("bin_mean_spread_median", "median"),
                                  weight_ratio=("weight_ratio_median", "median"),
                                  weight_ratio_ge_1_2_share=("weight_ratio_ge_1_2_share", "mean"))
    return z.join(s).reset_index()
