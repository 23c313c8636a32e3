"""The allocators as the measurement builds them, warmed on the uniform run's own history: every
per-prompt record before the checkpoint's step goes through ``plan`` (result discarded) and
``observe`` in step order, so stateful allocators hold what they would hold after the same
prompt visits (docs/gradient_variance.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from replication.allocation import ALLOCATORS, Allocator, PromptPool, make_allocator
from replication.analysis.gradvar_config import METHODS
from replication.config import TrainConfig


def build_method(name: str, cfg: TrainConfig, pool: PromptPool,
                 truth: dict | None = None, seed: int = 0, options: dict | None = None) -> Allocator:
    """The allocator of ``name`` with the profile's bounds and estimator (as build_components);
    ``options`` (GradVarConfig.method_options[name]) go over METHODS' own."""
    registered, extra = METHODS[name]
    opts = {"lower": cfg.rollout.lower, "upper": cfg.rollout.upper, **extra, **dict(options or {})}
    fields = {f.name for f in dataclasses.fields(ALLOCATORS[registered].Config)}
    if "estimator" in fields:
        opts["estimator"] = cfg.rl.estimator
    if registered == "oracle":
        if truth is None:
            raise ValueError("vip-oracle needs the estimated success probabilities (truth=)")
        opts["success_probability"] = dict(truth)
    return make_allocator(registered, seed=seed, pool=pool, **opts)


def embedded_pool(name: str, pool: PromptPool, options: dict | None = None,
                  memo: dict | None = None) -> PromptPool:
    """``pool`` with the embeddings the allocator of ``name`` would compute itself (its embedder
    and embedder options, METHODS' own under ``options``), so the whole pool (5,500 prompts under
    default) is embedded once per embedder and measurement, not at every checkpoint: ``memo``
    (embedder settings → (pool ids, embeddings)) carries them across checkpoints. Methods whose
    allocator embeds nothing get ``pool`` unchanged."""
    from replication.allocation import PREDICTORS
    from replication.allocation.embeddings import make_embedder

    registered, extra = METHODS[name]
    cls = ALLOCATORS[registered]
    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    if not getattr(cls, "uses_predictor", False) or "embedder" not in fields:
        return pool
    opts = {**extra, **dict(options or {})}

    def setting(key):
        f = fields[key]
        return opts[key] if key in opts else (f.default_factory() if f.default is dataclasses.MISSING else f.default)

    if not PREDICTORS.get(setting("predictor")).needs_embeddings:
        return pool
    embedder, embedder_options = setting("embedder"), dict(setting("embedder_options") or {})
    key = json.dumps([embedder, embedder_options], sort_keys=True, default=str)
    memo = {} if memo is None else memo
    if key not in memo or memo[key][0] != tuple(pool.ids):
        memo[key] = (tuple(pool.ids), make_embedder(embedder, **embedder_options)(list(pool.texts)))
    return dataclasses.replace(pool, embeddings=memo[key][1])


def replay_history(allocator: Allocator, records: pd.DataFrame, before_step: int,
                   reward_positive: float = 1.0, reward_negative: float = 0.0) -> int:
    """Warm ``allocator`` on a run's per-prompt records with step < before_step: per step, in
    order, ``plan`` (discarded) then ``observe`` with the logged counts, successes and losses.
    Returns the number of steps replayed."""
    past = records[records["step"] < before_step]
    steps = 0
    for _, g in past.groupby("step", sort=True):
        ids = g["prompt_id"].tolist()
        n = g["n"].to_numpy(dtype=np.int64)
        k = g["successes"].to_numpy(dtype=np.int64)
        allocator.plan(ids, int(n.sum()))
        rewards = np.concatenate([np.r_[np.full(ki, reward_positive), np.full(ni - ki, reward_negative)]
                                  for ni, ki in zip(n, k)])
        losses = None
        if "loss" in g and np.all(np.isfinite(pd.to_numeric(g["loss"], errors="coerce"))):
            losses = g["loss"].to_numpy(dtype=np.float64)
        allocator.observe(ids, n, rewards, prompt_losses=losses)
        steps += 1
    return steps


def load_records(run_dir: str | Path) -> pd.DataFrame:
    """The run's per-prompt records (prompts.jsonl or prompts.jsonl.gz)."""
    from replication.report.runs import _read_jsonl

    run_dir = Path(run_dir)
    for name in ("prompts.jsonl", "prompts.jsonl.gz"):
        if (run_dir / name).exists():
            return pd.DataFrame(_read_jsonl(run_dir / name))
    raise FileNotFoundError(f"{run_dir}: no prompts.jsonl(.gz) to warm the allocators on")
