"""The measurement itself: at each checkpoint of the uniform run, every method's draws on one fixed
batch, summarised; then every checkpoint into OUT/gradient_variance.csv (docs/gradient_variance.md)."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from replication.allocation import PromptPool
from replication.analysis.allocator_replay import build_method, embedded_pool, load_records, replay_history
from replication.analysis.gradient_draws import DrawSet, draw_gradients
from replication.analysis.gradvar_config import KIND, GradVarConfig
from replication.analysis.policy_gradient import PromptBatch, rollout_gradient
from replication.analysis.uniform_checkpoints import train_uniform_checkpoints
from replication.analysis.variance_statistics import summarise_draws
from replication.config import TrainConfig, to_dict
from replication.provenance import run_provenance
from replication.store import staged_dir, writer_lock


def measure_checkpoint(cfg: TrainConfig, model_path: str | Path, step: int, records: pd.DataFrame,
                       gv: GradVarConfig, log: Callable[[str], None] = print,
                       embeddings: dict | None = None) -> pd.DataFrame:
    """All methods' draws at one checkpoint; tidy summary rows with a ``step`` column.
    ``embeddings``: the pool embeddings already computed in this measurement (``embedded_pool``'s
    memo, shared by the checkpoints)."""
    from replication.train.components import build_components

    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(model_path),
                                                             threads=gv.threads or cfg.model.threads))
    c = build_components(cfg)
    q = int(gv.prompts or cfg.rollout.prompts_per_step)
    if q > len(c.train.ids):
        raise ValueError(f"grad-variance prompts={q} exceeds the pool's {len(c.train.ids)} prompts")
    pick = np.sort(np.random.default_rng([gv.seed, 7]).choice(len(c.train.ids), q, replace=False))
    prompts = PromptBatch([c.train.ids[i] for i in pick], [c.train.inputs[i] for i in pick],
                          [c.train.answers[i] for i in pick], [c.train.sources[i] for i in pick])
    sampling = cfg.rollout.sampling
    nbar = cfg.rollout.mean_rollouts
    budget = q * nbar
    pool = PromptPool(ids=tuple(c.train.ids), texts=tuple(c.train.texts))

    # The policy-gradient term only. With β_KL > 0 (the GDRO arms: 0.001) the trainer adds β·KL
    # to its reference model, whose gradient is 0 at step 0 and a small regulariser after; the
    # components built here would take the checkpoint itself as the reference, not the run's base.
    ppo_cfg = dataclasses.replace(c.ppo_cfg, kl_coef=0.0)

    def gradient(counts, gen):
        return rollout_gradient(c.model, c.engine, prompts, counts, c.verifier, cfg.rl.estimator, ppo_cfg,
                                sampling, gen, cfg.rl.reward_positive, cfg.rl.reward_negative)

    # true p from separate samples (the oracle's knowledge)
    t0 = time.perf_counter()
    ob = c.engine.generate(prompts.ids, prompts.inputs, prompts.answers, np.full(q, gv.oracle_samples), sampling,
                           generator=torch.Generator().manual_seed(gv.seed + 10_000 + step))
    hits = c.verifier.is_correct(ob.completions, ob.row_answers,
                                 [prompts.sources[g] for g in ob.group_index]).astype(float)
    p_true = np.bincount(ob.group_index, weights=hits, minlength=q) / gv.oracle_samples
    truth = dict(zip(prompts.ids, p_true.tolist()))

    uni = build_method("uniform", cfg, pool)
    ref = draw_gradients(lambda: uni.plan(prompts.ids, budget), gradient, gv.reference_draws,
                         [gv.seed, step, 999], nbar)
    direction = torch.as_tensor(ref.mean / max(np.linalg.norm(ref.mean), 1e-300))
    sets: dict[str, DrawSet] = {}
    info = []
    for j, name in enumerate(gv.methods):
        options = gv.method_options.get(name)
        alloc = build_method(name, cfg, embedded_pool(name, pool, options, embeddings), truth=truth, seed=gv.seed,
                             options=options)
        replayed = 0 if name == "vip-oracle" else replay_history(
            alloc, records, step, cfg.rl.reward_positive, cfg.rl.reward_negative)

        def plan(a=alloc):
            return copy.deepcopy(a).plan(prompts.ids, budget)

        sets[name] = draw_gradients(plan, gradient, gv.draws, [gv.seed, step, j], nbar, direction)
        info.append(f"{name}: {replayed} steps replayed, departure {sets[name].departure_share.mean():.2f}")
    out = summarise_draws(sets, gv.bootstrap, seed=gv.seed + step)
    extra = [{"method": "batch", "metric": m, "value": v, "lo": np.nan, "hi": np.nan, "n_draws": gv.oracle_samples}
             for m, v in (("p_mean", float(p_true.mean())), ("p_zero_share", float(np.mean(p_true == 0))),
                          ("p_one_share", float(np.mean(p_true == 1))), ("prompts", float(q)),
                          ("budget", float(budget)), ("parameters", float(len(direction))))]
    out = pd.concat([out, pd.DataFrame(extra)], ignore_index=True)
    out.insert(0, "step", step)
    log(f"step {step}: p̄={p_true.mean():.3f}, {time.perf_counter() - t0:.0f}s; " + "; ".join(info))
    return out


def run_grad_variance(cfg: TrainConfig, run_dir: str | Path, out_dir: str | Path, gv: GradVarConfig,
                      progress: bool = False, log: Callable[[str], None] = print,
                      extra: dict | None = None) -> pd.DataFrame:
    """Train (or reuse) the uniform run's checkpoints, measure every checkpoint, write
    OUT/gradient_variance.csv (tidy: step, method, metric, value, lo, hi, n_draws) and
    OUT/gradient_variance.json (the settings, and the provenance: ``replication.provenance``).

    OUT has one writer (``writer_lock``: a second measurement into it gets one line naming the
    folder and the holder, before any compute) and is complete or absent: written beside its
    place with a manifest (kind ``KIND``; ``extra`` and the steps in it) and renamed in at the end,
    so a killed measurement leaves the previous OUT, or none."""
    out_dir = Path(out_dir)
    with writer_lock(out_dir, "a gradient-variance measurement"):
        _remove_orphans(out_dir)
        ckpts = train_uniform_checkpoints(cfg, run_dir, gv.steps, progress=progress)
        records = load_records(run_dir) if max(gv.steps) > 0 else pd.DataFrame(
            columns=["step", "prompt_id", "n", "successes", "loss"])
        embeddings: dict = {}  # the pool is embedded once per embedder, not at every checkpoint
        frames = [measure_checkpoint(cfg, ckpts[s], s, records, gv, log=log, embeddings=embeddings)
                  for s in sorted(gv.steps)]
        df = pd.concat(frames, ignore_index=True)
        # how it was measured (one process: the measurement draws on one model, not a World)
        settings = {"grad_variance": dataclasses.asdict(gv), "profile": cfg.profile, "train_config": to_dict(cfg),
                    "run_dir": str(run_dir), "provenance": run_provenance(cfg, None, None)}
        with staged_dir(out_dir, kind=KIND, extra={"steps": sorted(gv.steps), **dict(extra or {})}) as tmp:
            df.to_csv(tmp / "gradient_variance.csv", index=False)
            (tmp / "gradient_variance.json").write_text(json.dumps(settings, indent=1, default=str))
    return df


def _remove_orphans(out_dir: Path) -> None:
    """Temporary folders a killed writer of ``out_dir`` left beside it (the caller holds its lock,
    so no live writer owns them)."""
    for orphan in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        shutil.rmtree(orphan, ignore_errors=True)
