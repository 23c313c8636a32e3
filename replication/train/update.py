"""The policy update of one step: PPO-clip over mini-batches of a variable-count rollout batch.

Advantages arrive per row (already weighted by Prompt-GDRO when enabled); DynaMO's token
modulation is applied per mini-batch, where its H_min/H_max and max Ξ are taken
(docs/papers/dynamo.md, B). Rows whose advantage is exactly zero carry no policy gradient; when
there is no KL term they are skipped in the backward pass, but the token-mean denominator still
counts their tokens, so the gradient is identical to the full computation (a measured 40–70 %
saving, docs/papers/measurements.md).

With several processes (``shard``, train/distributed.py) the mini-batches are drawn over the
step's GLOBAL rows by the same seeded permutation on every rank; every rank knows every row's
advantage and token counts (train/row_dispatch.py), each mini-batch's trainable rows are dealt
out evenly over the ranks (a row stays on the rank that generated it unless the balance needs it
elsewhere, and the moved rows travel in one all-to-all), each rank backpropagates its share over
the mini-batch's global denominator, and the gradients are summed across ranks before clipping —
the gradient one process computes with the whole batch.
``model`` is then the DDP wrapper (train/ddp.py: bucketed SUM all-reduce overlapped with the
backward pass, one backward per rank and mini-batch) or the FSDP-sharded policy (train/fsdp.py:
reduce-scattered as a SUM). A rank that holds none of a mini-batch's trainable rows still runs
one zero-weight pass, so that every rank joins the same gradient collectives. The step's
numbers that ranks exchange travel as tensors: the rows' counts (two all-gathers) and the moved
rows (one all-to-all, skipped when nothing moves) once per update, one
all-reduce per mini-batch for DynaMO's extent, one all-gather per update for the diagnostics
(update_stats.py) and one all-reduce per update that returns each row's loss to its rank.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from replication.rl import (
    DynaMOConfig,
    PPOConfig,
    modulate_advantages,
    ppo_clip_loss,
    token_logprobs_and_entropy,
)
from replication.rl.modulation import entropy_change_magnitude
from replication.rollout.base import RolloutBatch
from replication.train.distributed import RowShard, World
from replication.train.fsdp import zero_pass
from replication.train.row_dispatch import deal, fetch_rows, own_rows, step_meta
from replication.train.update_stats import combine_over_ranks


@dataclasses.dataclass
class UpdateResult:
    row_loss: np.ndarray
    """Per-row token-mean clipped surrogate loss + β·KL, at the time the row was trained, with
    the Prompt-GDRO weight divided back out of the surrogate: the adversary scores the loss of
    the unweighted objective (a positive weight passes through min/clip, so this is exact).
    With several PPO epochs, the mean over the epochs."""
    stats: dict
    """Means over mini-batches: grad_norm, clipfrac, entropy, approx_kl, modulation stats."""
    row_kl: np.ndarray | None = None
    """The β·KL part of ``row_loss`` (same averaging); zeros without KL."""


def ppo_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    batch: RolloutBatch,
    row_advantages: np.ndarray,
    ppo_cfg: PPOConfig,
    *,
    temperature: float,
    mini_batches: int,
    ppo_epochs: int,
    grad_clip: float,
    rng: np.random.Generator,
    modulation: DynaMOConfig | None = None,
    ref_model: torch.nn.Module | None = None,
    row_weights: np.ndarray | None = None,
    shard: RowShard | None = None,
) -> UpdateResult:
    shard = shard if shard is not None else RowShard.whole(batch.n_rows)
    world = shard.world
    n = shard.n_global
    # what every rank knows of every row before any moves (one process: the batch's own)
    meta = step_meta(batch, torch.as_tensor(row_advantages, dtype=torch.float32), row_weights, shard)
    adv_rows = meta.advantages
    trainable = adv_rows.numpy() != 0
    row_loss = np.zeros(n)
    row_kl = np.zeros(n)
    collected: dict[str, list[float]] = {}
    per_mb: list[tuple[dict, float | None, dict | None]] = []
    use_kl = ref_model is not None and ppo_cfg.kl_coef > 0
    model.train()
    # Every epoch's mini-batches and every rank's share of them, planned before any row moves
    # (the same on every rank): the rows a rank trains are then fetched in one exchange.
    plan = []
    for _ in range(ppo_epochs):
        order = rng.permutation(n)
        for mb in np.array_split(order, min(mini_batches, n)):
            mb = np.sort(mb)
            # token-mean divides by the mini-batch's valid tokens, seq-mean modes by its rows
            tokens = float(meta.completion_tokens[mb].sum())
            # Zero-advantage rows contribute no gradient (without KL): train only the others,
            # with the full mini-batch's token count as the token-mean denominator.
            # DynaMO's H_min/H_max range over ALL valid tokens of the mini-batch, so with
            # modulation on every row is kept too.
            train = mb if (use_kl or modulation is not None) else mb[trainable[mb]]
            # the rows stay with the rank that generated them unless the balance needs a move
            shares = deal(train, meta.real_tokens[train], world.size, owner=meta.owner(train))
            plan.append((mb, shares, tokens, len(train)))
    mine = [np.concatenate([p[1][r] for p in plan] + [np.zeros(0, np.int64)]) for r in range(world.size)]
    rows = fetch_rows(batch, meta, shard, [np.unique(m).astype(np.int64) for m in mine])
    for mb, shares, tokens, kept in plan:
        keep = torch.as_tensor(shares[world.rank])  # this rank's share
        if ppo_cfg.aggregation == "token-mean":
            denom = torch.tensor(float(tokens)).clamp_min(1.0)
        else:
            denom = torch.tensor(float(len(mb)))
        stats, weight, n_pos = {"entropy": float("nan")}, 0.0, 0.0
        if kept > 0:
            optimizer.zero_grad(set_to_none=True)
            if len(keep) > 0:
                ids, attn, kmask, old = rows.take(keep)
                kmask = kmask.float()
                logp, ent = token_logprobs_and_entropy(model, ids, attn, temperature, completion_mask=kmask)
                adv_tok = adv_rows[keep].unsqueeze(1) * kmask
            else:  # this rank holds none of the mini-batch: it only joins the collectives
                logp = ent = old = adv_tok = kmask = None
                if world.distributed:  # DDP's all-reduce / FSDP's gathers run in the passes
                    zero_pass(model, batch.input_ids, batch.attention_mask, backward=True)
                    if use_kl and world.fsdp:  # the sharded reference model gathers too
                        zero_pass(ref_model, batch.input_ids, batch.attention_mask, backward=False)
            mod_stats = {}
            if modulation is not None:
                extent = _modulation_extent(world, adv_tok, logp, old, ent, kmask, ppo_cfg, modulation.delta_h)
                if len(keep) > 0:
                    adv_tok, mod_stats = modulate_advantages(
                        adv_tok, logp.detach(), old, ent.detach(), kmask, modulation, ppo_cfg, **extent
                    )
            if len(keep) > 0:
                ref_logp = None
                if use_kl:
                    with torch.no_grad():
                        ref_logp, _ = token_logprobs_and_entropy(
                            ref_model, ids, attn, temperature, completion_mask=kmask
                        )
                res = ppo_clip_loss(logp, old, adv_tok, kmask, ppo_cfg, ref_logp=ref_logp, denominator=denom)
                res.loss.backward()  # DDP: the gradient buckets are all-reduced meanwhile
                weight = float(kmask.sum())
                n_pos = float((kmask.bool() & (adv_tok > 0)).sum())  # β_comp_pos_mean's tokens
                stats = {**res.stats, **mod_stats}
                stats["entropy"] = float((ent.detach() * kmask).sum() / kmask.sum().clamp_min(1))
                surrogate = (res.row_loss - res.row_kl).numpy()
                w = 1.0 if meta.weights is None else meta.weights[keep.numpy()]
                # Mean over PPO epochs (gdro.md: the loss "as computed during the step's update").
                row_loss[keep.numpy()] += (surrogate / w + res.row_kl.numpy()) / ppo_epochs
                row_kl[keep.numpy()] += res.row_kl.numpy() / ppo_epochs
            # FSDP: the multi-tensor norm (one DTensor dispatch, not one per parameter)
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True if world.fsdp else None)
            gn = gn.full_tensor() if hasattr(gn, "full_tensor") else gn  # FSDP: a DTensor
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            stats["grad_norm"] = float(gn)
            per_mb.append((stats, weight, {"beta_comp_pos_mean": n_pos}))
        else:
            # Nothing to learn from, but the optimizer still steps (Adam moments, decay),
            # exactly as the full computation with an all-zero gradient would.
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            per_mb.append(({"grad_norm": 0.0}, None, None))  # the same on every rank
    # the mini-batches' diagnostics over all ranks: one all-gather for the whole update
    for stats in combine_over_ranks(world, per_mb, ppo_cfg, use_kl=use_kl, modulation=modulation):
        for k, v in stats.items():
            if isinstance(v, (int, float)):
                collected.setdefault(k, []).append(float(v))
    means = {k: float(np.nanmean(v)) if len(v) else float("nan") for k, v in collected.items()}
    row_loss, row_kl = own_rows(shard, row_loss, row_kl)  # each row's loss back to its prompt's rank
    return UpdateResult(row_loss=row_loss, row_kl=row_kl, stats=means)


def _modulation_extent(
    world: World, adv_tok, logp, old, ent, kmask, ppo_cfg: PPOConfig, delta_h: str = "token_centred"
) -> dict:
    """DynaMO's H_min/H_max and max Ξ over the mini-batch's valid tokens on EVERY rank (empty
    with one process: modulate_advantages then takes them from the rows it is given)."""
    if not world.distributed:
        return {}
    lo, hi, top = float("inf"), float("-inf"), 0.0
    if kmask is not None and bool(kmask.bool().any()):
        h = ent.detach()[kmask.bool()]
        lo, hi = float(h.min()), float(h.max())
        top = float(entropy_change_magnitude(adv_tok, logp.detach(), old, ent.detach(), kmask, ppo_cfg,
                                             delta_h).max())
    lo, neg_hi, neg_top = world.reduce([lo, -hi, -top], "min")  # one all-reduce: min, max, max
    return {"entropy_range": (float(lo), float(-neg_hi)), "xi_max": float(-neg_top)}
