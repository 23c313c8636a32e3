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
