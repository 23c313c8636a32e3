"""Predictor study (VIP Fig. 3): how well does each success predictor anticipate k/n?

Replay a run's per-prompt records (runs.load_prompts; a uniform run, so that the allocation did
not depend on any predictor) step by step. At step t every predictor predicts the success
probability of each of the step's prompts from the records of steps < t only, then observes
step t. The error is |p̂ − k/n| against the observed rate at step t (VIP compares to the
observed accuracy too). Even a perfect predictor has a floor, E|k/n − p| > 0, from binomial
noise; the comparison between predictors is what counts.

Predictors are the ones VIP allocates with (replication.allocation.predictors):
- "gp": the paper's recursive GP on prompt embeddings;
- "moving-average": per-prompt EMA of k/n (unseen prompts: mean of everything seen so far);
- "ridge": ridge regression of logit k/n on the embeddings (paper Table 3 ablation).
Embeddings come from the prompt texts (the caller passes id → text; embedded once with
``embedder``, default the offline hashed TF-IDF) or are passed precomputed (id → vector).

MAE is reported per step for prompts seen in an earlier step ("seen"), never seen ("unseen") and
all together. Over several seeds (``replay_seeds``) each seed's run is replayed on its own, the
prompts are embedded once, and ``paired_mae`` tests the GP against the moving average over seeds
(paired t, stats.compare) — the check issue 20.5 asks to carry a CI over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from replication.allocation import make_predictor
from replication.allocation.embeddings import make_embedder

DEFAULT_PREDICTORS = ("gp", "moving-average", "ridge")


def gp_options(allocator_options: Mapping | None) -> dict:
    """The GP settings among a VIP arm's ``allocator.options`` (GPConfig fields, e.g. the
    bandwidth), so the replay runs the GP as the arm does; allocation-only keys are dropped."""
    import dataclasses

    from replication.allocation.gp import GPConfig

    fields = {f.name for f in dataclasses.fields(GPConfig)}
    return {k: v for k, v in dict(allocator_options or {}).items() if k in fields}


def embedder_settings(allocator_options: Mapping | None) -> dict:
    """The embedder a VIP arm's ``allocator.options`` selects (``embedder``, ``embedder_options``;
    VIPConfig's defaults where absent), as keyword arguments of ``replay_predictors`` — so the
    replay embeds the prompts with the arm's encoder (e.g. the paper's all-MiniLM-L6-v2)."""
    from replication.allocation.vip import VIPConfig

    opts = dict(allocator_options or {})
    default = VIPConfig()
    return {"embedder": opts.get("embedder", default.embedder),
            "embedder_options": dict(opts.get("embedder_options") or default.embedder_options)}


def _one_run(prompts: pd.DataFrame) -> pd.DataFrame:
    keys = [k for k in ("arm", "seed") if k in prompts.columns]
    if keys and len(prompts.groupby(keys)) > 1:
        raise ValueError(f"records hold several runs ({keys}); select one run first")
    return prompts.sort_values("step", kind="stable")


def _embeddings(ids: list, texts: Mapping | None, embeddings: Mapping | None, embedder: str,
                embedder_options: Mapping | None) -> np.ndarray:
    if embeddings is not None:
        missing = [i for i in ids if i not in embeddings]
        if missing:
            raise ValueError(f"no embedding for prompt id {missing[0]!r} ({len(missing)} missing)")
        return np.asarray([embeddings[i] for i in ids], dtype=np.float32)
    if texts is None:
        raise ValueError("pass texts (id → prompt text) or embeddings (id → vector)")
    missing = [i for i in ids if i not in texts]
    if missing:
        raise ValueError(f"no text for prompt id {missing[0]!r} ({len(missing)} missing)")
    return make_embedder(embedder, **dict(embedder_options or {}))([texts[i] for i in ids])


def replay_predictors(prompts: pd.DataFrame, texts: Mapping | None = None, *,
                      embeddings: Mapping | None = None,
                      predictors: Sequence[str] = DEFAULT_PREDICTORS,
                      predictor_options: Mapping[str, Mapping] | None = None,
                      embedder: str = "hashed-tfidf", embedder_options: Mapping | None = None,
                      max_steps: int | None = None) -> pd.DataFrame:
    """One row per (step, prompt, predictor): predicted (from steps < t), observed k/n,
    abs_error, seen (prompt observed at an earlier step). Records with n = 0 are skipped."""
    recs = _one_run(prompts)
    recs = recs[recs["n"] > 0]
    if max_steps is not None:
        recs = recs[recs["step"] < recs["step"].min() + max_steps]
    ids = list(dict.fromkeys(recs["prompt_id"].tolist()))
    row_of = {pid: i for i, pid in enumerate(ids)}
    opts = dict(predictor_options or {})
    needs_emb = any(name in ("gp", "ridge") for name in predictors)
    emb = _embeddings(ids, texts, embeddings, embedder, embedder_options) if needs_emb else None
    models = {name: make_predictor(name, embeddings=emb, n_pool=len(ids), **dict(opts.get(name, {})))
              for name in predictors}
    seen = np.zeros(len(ids), dtype=bool)
    out = []
    from tqdm import tqdm  # the GP replay takes minutes on the default profile

    for step, grp in tqdm(recs.groupby("step", sort=True), total=recs["step"].nunique(),
                          desc="predictor replay", unit="step"):
        rows = np.array([row_of[p] for p in grp["prompt_id"]], dtype=np.int64)
        k, n = grp["successes"].to_numpy(), grp["n"].to_numpy()
        observed = k / n
        for name, model in models.items():
            pred = np.asarray(model.predict(rows), dtype=np.float64)
            out.append(pd.DataFrame({"step": int(step), "prompt_id": grp["prompt_id"].to_numpy(),
                                     "predictor": name, "predicted": pred, "observed": observed,
                                     "abs_error": np.abs(pred - observed), "seen": seen[rows]}))
        for model in models.values():
            model.observe(rows, k, n)
        seen[rows] = True
    return pd.concat(out, ignore_index=True)


def replay_seeds(prompts: pd.DataFrame, texts: Mapping | None, seeds: Sequence[int], *,
                 embeddings: Mapping | None = None,
                 predictors: Sequence[str] = DEFAULT_PREDICTORS,
                 predictor_options: Mapping[str, Mapping] | None = None,
                 embedder: str = "hashed-tfidf", embedder_options: Mapping | None = None,
                 max_steps: int | None = None) -> pd.DataFrame:
    """``replay_predictors`` on each seed's run (``prompts`` holds one arm, several seeds), the
    prompts embedded once for all seeds; the rows carry ``seed``. A seed without records is an
    error naming it."""
    missing = [s for s in seeds if not (prompts["seed"] == s).any()]
    if missing:
        raise ValueError(f"no records for seed(s) {missing} (records hold {sorted(prompts['seed'].unique())})")
    recs = prompts[prompts["seed"].isin(list(seeds)) & (prompts["n"] > 0)]
    if embeddings is None and any(name in ("gp", "ridge") for name in predictors):
        ids = list(dict.fromkeys(recs["prompt_id"].tolist()))
        embeddings = dict(zip(ids, _embeddings(ids, texts, None, embedder, embedder_options)))
    return pd.concat([replay_predictors(recs[recs["seed"] == s], texts, embeddings=embeddings,
                                        predictors=predictors, predictor_options=predictor_options,
                                        max_steps=max_steps).assign(seed=s) for s in seeds],
                     ignore_index=True)


def mae_by_seed(replays: pd.DataFrame, from_step: int = 1) -> pd.DataFrame:
    """``mae_summary`` of each seed's replay (``replay_seeds``): seed, predictor, subset, mae, count."""
    return pd.concat([mae_summary(g, from_step).assign(seed=s) for s, g in replays.groupby("seed", sort=True)],
                     ignore_index=True)[["seed", "predictor", "subset", "mae", "count"]]


def seed_mean_summary(by_seed: pd.DataFrame) -> pd.DataFrame:
    """Per predictor and subset: the mean over seeds of each seed's MAE (every seed weighs the
    same), the records behind it and the number of seeds."""
    g = by_seed.groupby(["predictor", "subset"], sort=False)
    return g.agg(mae=("mae", "mean"), count=("count", "sum"), seeds=("seed", "nunique")).reset_index()


def paired_mae(by_seed: pd.DataFrame, predictor: str = "gp", reference: str = "moving-average",
               level: float = 0.95) -> pd.DataFrame:
    """``predictor`` − ``reference`` MAE per subset, paired over the seeds both have (stats.compare):
    subset, mae, reference_mae, diff, lo, hi, p, n. Negative = the predictor is better."""
    from replication.report.stats import compare

    rows = []
    for subset, g in by_seed.groupby("subset", sort=False):
        a = g[g["predictor"] == predictor].set_index("seed")["mae"]
        b = g[g["predictor"] == reference].set_index("seed")["mae"]
        if a.empty or b.empty:
            continue
        c = compare(a, b, level)
        rows.append({"predictor": predictor, "reference": reference, "subset": subset,
                     "mae": c.method_mean, "reference_mae": c.baseline_mean, "diff": c.diff,
                     "lo": c.lo, "hi": c.hi, "p": c.p, "n": c.n})
    return pd.DataFrame(rows)


def mae_by_step(replay: pd.DataFrame) -> pd.DataFrame:
    """MAE per step, predictor and subset ("seen", "unseen", "all"), with the record count."""
    parts = []
    for subset, sel in (("all", slice(None)), ("seen", replay["seen"]), ("unseen", ~replay["seen"])):
        g = replay[sel].groupby(["step", "predictor"])["abs_error"].agg(["mean", "size"]).reset_index()
        parts.append(g.rename(columns={"mean": "mae", "size": "count"}).assign(subset=subset))
    return pd.concat(parts, ignore_index=True)


def mae_summary(replay: pd.DataFrame, from_step: int = 1) -> pd.DataFrame:
    """Overall MAE per predictor and subset over steps ≥ from_step (step 0 has no history)."""
    r = replay[replay["step"] >= from_step]
    rows = []
    for subset, sel in (("all", slice(None)), ("seen", r["seen"]), ("unseen", ~r["seen"])):
        g = r[sel].groupby("predictor")["abs_error"].agg(["mean", "size"])
        for name, row in g.iterrows():
            rows.append({"predictor": name, "subset": subset, "mae": row["mean"], "count": int(row["size"])})
    return pd.DataFrame(rows)


def plot_mae(replay: pd.DataFrame, path: str | Path, smooth: int = 5, from_step: int = 1):
    """MAE vs step per predictor (rolling mean over ``smooth`` steps), one panel per subset —
    the layout of VIP's Fig. 3."""
    import seaborn as sns
    from matplotlib.figure import Figure

    from replication.report.plots import save

    m = mae_by_step(replay)
    m = m[m["step"] >= from_step]
    subsets = ["all", "seen", "unseen"]
    fig = Figure(figsize=(12.0, 3.4))
    axes = fig.subplots(1, 3, sharey=True)
    colors = dict(zip(pd.unique(m["predictor"]), sns.color_palette("colorblind")))
    for ax, subset in zip(axes, subsets):
        for name, g in m[m["subset"] == subset].groupby("predictor", sort=False):
            g = g.sort_values("step")
            ax.plot(g["step"], g["mae"].rolling(smooth, min_periods=1).mean(), label=name, color=colors[name])
        ax.set_title(f"{subset} prompts")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MAE |p̂ − k/n|")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)
