"""One update's diagnostics over all ranks, as tensors: the 1-process values of every mini-batch.

Each rank records, per mini-batch, the diagnostics of the rows it trained (``ppo_clip_loss``'s
and DynaMO's stats, the entropy, the gradient norm) with the weight of each (its valid tokens,
or a sub-population's: β_comp_pos_mean is a mean over positive-advantage tokens). After the
update every rank's table — mini-batches × stat names × (value, weight) — is all-gathered once
as a float64 tensor and combined per mini-batch the way one process computes them:
``*_min`` → min, ``*_max`` → max, ``n_tokens`` and the losses (already over the mini-batch's
global denominator) → sum, ``grad_norm`` (taken after the all-reduce: equal on every rank) →
any rank's, the rest → mean weighted by each rank's weight. A rank that trained no row of a
mini-batch sends NaN, which is left out (as an absent value).

The stat names are the same on every rank, so the table needs no name exchange: they are read
off the loss functions themselves on a 1-token dummy batch (``stat_names``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from replication.rl import DynaMOConfig, PPOConfig, modulate_advantages, ppo_clip_loss
from replication.train.distributed import World

SUMMED = ("n_tokens", "loss", "pg_loss", "kl")
"""Already divided by the mini-batch's global denominator on each rank: their sum is the total."""


def stat_names(ppo_cfg: PPOConfig, *, use_kl: bool, modulation: DynaMOConfig | None) -> list[str]:
    """Every diagnostic a rank that trains rows reports, in a fixed order (sorted)."""
    x = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    names = set(ppo_clip_loss(x, x, x, mask, ppo_cfg, ref_logp=x if use_kl else None, denominator=1.0).stats)
    if modulation is not None:
        names |= set(modulate_advantages(x, x, x, x, mask, modulation, ppo_cfg)[1])
    return sorted(names | {"entropy", "grad_norm"})


def combine_over_ranks(
    world: World,
    per_mb: list[tuple[dict, float | None, dict | None]],
    ppo_cfg: PPOConfig,
    *,
    use_kl: bool,
    modulation: DynaMOConfig | None,
) -> list[dict]:
    """The mini-batches' stats over all ranks, in mini-batch order. ``per_mb``: (stats, weight,
    weights per stat) per mini-batch; weight None = the same on every rank (nothing trained
    anywhere), passed through. One process: the stats unchanged."""
    if not world.distributed:
        return [stats for stats, _, _ in per_mb]
    names = stat_names(ppo_cfg, use_kl=use_kl, modulation=modulation)
    index = {k: i for i, k in enumerate(names)}
    local = [j for j, (_, w, _) in enumerate(per_mb) if w is not None]
    table = np.full((len(local), len(names), 2), np.nan)
    for row, j in enumerate(local):
        stats, weight, weights = per_mb[j]
        unknown = set(stats) - set(index)
        if unknown:
            raise KeyError(f"update diagnostics {sorted(unknown)} are not in stat_names(): add them there")
        for k, v in stats.items():
            table[row, index[k]] = (v, (weights or {}).get(k, float(weight)))
    parts = world.gather_arrays(table.reshape(-1), [table.size] * world.size)
    tables = [p.reshape(table.shape) for p in parts]
    out = [stats for stats, _, _ in per_mb]
    for row, j in enumerate(local):
        out[j] = _combine([t[row] for t in tables], names)
    return out


def combine_parts(parts: list[tuple[dict, float, dict]]) -> tuple[dict, float, dict]:
    """One rank's micro-batches of a mini-batch as that rank's one entry of it: (stats, weight,
    weights per stat) with the same rules as across ranks (``_combine``), so a split share
    reports what the whole share in one pass would, up to float summation order. A micro-batch
    without a valid token (weight 0) is left out unless every one is such (its stats are the
    loss functions' empty-batch values, which the unsplit share's tokens would not show)."""
    if len(parts) == 1:
        return parts[0]
    names = sorted(set().union(*(p[0] for p in parts)))
    live = [p for p in parts if p[1] > 0] or parts[:1]
    rows = [np.array([[float(s.get(k, math.nan)), float((ws or {}).get(k, w))] for k in names])
            for s, w, ws in live]
    weights: dict[str, float] = {}
    for _, _, ws in parts:
        for k, v in (ws or {}).items():
            weights[k] = weights.get(k, 0.0) + float(v)
    return _combine(rows, names), float(sum(p[1] for p in parts)), weights


def _combine(rank_rows: list[np.ndarray], names: list[str]) -> dict[str, float]:
    """One mini-batch: ``rank_rows[r][i] = (value, weight)`` of stat ``names[i]`` on rank r."""
    out: dict[str, float] = {}
    for i, k in enumerate(names):
        vals = [(float(r[i, 0]), float(r[i, 1])) for r in rank_rows if math.isfinite(r[i, 0])]
        if not vals:
            if any(not math.isnan(r[i, 1]) for r in rank_rows):  # reported, but non-finite
                out[k] = float("nan")
            continue
        if k.endswith("_min"):
            out[k] = min(v for v, _ in vals)
        elif k.endswith("_max"):
            out[k] = max(v for v, _ in vals)
        elif k in SUMMED:
            out[k] = float(sum(v for v, _ in vals))
        elif k == "grad_norm":
            out[k] = vals[0][0]
        else:
            w = sum(wt for _, wt in vals)
            out[k] = float(sum(v * wt for v, wt in vals) / w) if w > 0 else vals[0][0]
    return out
