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
backward pass, one synchronising backward per rank and mini-batch) or the FSDP-sharded policy (train/fsdp.py:
reduce-scattered as a SUM). A rank that holds none of a mini-batch's trainable rows still runs
one zero-weight pass, so that every rank joins the same gradient collectives.

Micro-batches (``micro_batch_rows`` = ``rl.micro_batch_rows``; 0 = off, one pass per share):
a rank's share of a mini-batch is split into consecutive runs of at most that many rows, each
forwarded and backpropagated on its own with the loss over the MINI-batch's global
denominator, so the accumulated gradient is the whole share's (verl's
``ppo_micro_batch_size_per_gpu``; its accumulation differs, docs/fidelity/rl.md). Memory then
holds one micro-batch's logits and activations, not the share's. Under DDP only the last
micro-batch all-reduces (``no_sync()`` for the others); under FSDP every pass is a collective, so
every rank runs as many passes as the rank with the most micro-batches (the extra ones
zero-weight) and each backward reduce-scatters into the sharded gradient. The reference
policy's no-grad pass runs per micro-batch too. DynaMO's H_min/H_max and max Ξ stay the
mini-batch's: when any rank splits its share, a no-grad pass over the micro-batches finds them
first (one extra forward per mini-batch, about a third more compute per update step; its
log-probs and entropies are the ones modulated). Per-row losses and the diagnostics are the
unsplit computation's up to float summation order (tests/train/test_micro_batches.py). The step's
numbers that ranks exchange travel as tensors: the rows' counts (two all-gathers) and the moved
rows (one all-to-all, skipped when nothing moves) once per update, one
all-reduce per mini-batch for DynaMO's extent, one all-gather per update for the diagnostics
(update_stats.py) and one all-reduce per update that returns each row's loss to its rank.
"""

from __future__ import annotations

import contextlib
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
from replication.train.fsdp import zero_loss, zero_pass
from replication.train.row_dispatch import deal, fetch_rows, own_rows, step_meta
from replication.train.update_stats import combine_over_ranks, combine_parts


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
    micro_batch_rows: int = 0,
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
    sharded = world.fsdp and world.distributed
    for mb, shares, tokens, kept in plan:
        if ppo_cfg.aggregation == "token-mean":
            denom = torch.tensor(float(tokens)).clamp_min(1.0)
        else:
            denom = torch.tensor(float(len(mb)))
        if kept > 0:
            optimizer.zero_grad(set_to_none=True)
            # this rank's share in micro-batches; every rank knows every rank's count (the plan)
            parts = micro_batches(shares[world.rank], micro_batch_rows)
            most = max(len(micro_batches(s, micro_batch_rows)) for s in shares)
            # FSDP: every pass is a collective, so every rank runs the most passes (the extra
            # ones zero-weight); DDP: a rank's own passes, at least one (a rank holding none of
            # the mini-batch joins the all-reduce with a zero-weight pass); one process: its own
            n_pass = most if sharded else max(len(parts), 1)
            # DynaMO's extent over the whole mini-batch before the first loss: a no-grad pass
            # over the micro-batches when some rank splits its share (one pass: from that pass)
            first = modulation is not None and most > 1
            extent, seen = ({}, [None] * n_pass)
            if first:
                extent, seen = _extent_pass(model, world, rows, parts, n_pass, batch, adv_rows,
                                            temperature, ppo_cfg, modulation)
            # After the extent pass (and without KL) a micro-batch whose every advantage is 0
            # has a zero gradient: its row losses and diagnostics come from the extent pass's
            # values, with no forward or backward (DynaMO keeps such rows only for the extent).
            # The gradient passes are the others; FSDP: every rank runs the most of them.
            skip = [first and not use_kl and not bool(adv_rows[torch.as_tensor(p)].any()) for p in parts]
            n_grad = _gradient_passes(shares, micro_batch_rows, adv_rows, skip_zero=first and not use_kl,
                                      rank=world.rank, sharded=sharded)
            done: list[tuple[dict, float, dict]] = []
            k = 0  # gradient passes run
            for i in range(len(parts) + n_grad):
                part = parts[i] if i < len(parts) else None
                if part is not None and skip[i]:
                    out = _micro_step(model, rows, part, adv_rows, denom, temperature, ppo_cfg, modulation, None,
                                      world, extent, seen[i], backward=False)
                elif part is None and k >= n_grad:
                    break
                else:
                    # DDP: only the last pass all-reduces; FSDP reduce-scatters every pass into
                    # the sharded gradient (no unsharded gradient is kept between passes)
                    k += 1
                    with _grad_sync(model, sync=sharded or k == n_grad):
                        if part is None:  # nothing more of this mini-batch here: join the collectives
                            dummy = zero_loss(model, batch.input_ids, batch.attention_mask)
                            if modulation is not None and not first:
                                extent = _modulation_extent(world, None, None, None, None, None, ppo_cfg)
                            if use_kl and sharded:  # the sharded reference model gathers too
                                zero_pass(ref_model, batch.input_ids, batch.attention_mask, backward=False)
                            dummy.backward()
                            continue
                        out = _micro_step(model, rows, part, adv_rows, denom, temperature, ppo_cfg,
                                          modulation, ref_model if use_kl else None, world,
                                          extent if first else None, seen[i])
                done.append(out.stats)
                surrogate = (out.row_loss - out.row_kl).numpy()
                w = 1.0 if meta.weights is None else meta.weights[part]
                # Mean over PPO epochs (gdro.md: the loss "as computed during the step's update").
                row_loss[part] += (surrogate / w + out.row_kl.numpy()) / ppo_epochs
                row_kl[part] += out.row_kl.numpy() / ppo_epochs
            if done:
                stats, weight, weights = combine_parts(done)
            else:
                stats, weight, weights = {"entropy": float("nan")}, 0.0, {"beta_comp_pos_mean": 0.0}
            # FSDP: the multi-tensor norm (one DTensor dispatch, not one per parameter)
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True if world.fsdp else None)
            gn = gn.full_tensor() if hasattr(gn, "full_tensor") else gn  # FSDP: a DTensor
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            stats["grad_norm"] = float(gn)
            per_mb.append((stats, weight, weights))
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


def _gradient_passes(shares: list[np.ndarray], micro_batch_rows: int, adv_rows: torch.Tensor, *,
                     skip_zero: bool, rank: int, sharded: bool) -> int:
    """Forward-backward passes this rank runs for a mini-batch: its micro-batches, less those
    whose advantages are all 0 when ``skip_zero``; FSDP: the most of any rank (every pass is a
    collective; the extra ones zero-weight); DDP or one process: its own. At least one (a rank
    with none joins the all-reduce with a zero-weight pass, and the optimizer then steps on a
    zero gradient, as it would have after passes of zero advantages)."""
    def count(share: np.ndarray) -> int:
        parts = micro_batches(share, micro_batch_rows)
        if skip_zero:
            parts = [p for p in parts if bool(adv_rows[torch.as_tensor(p)].any())]
        return len(parts)

    return max(max(count(s) for s in shares) if sharded else count(shares[rank]), 1)


def micro_batches(rows: np.ndarray, size: int) -> list[np.ndarray]:
    """``rows`` (a rank's share of a mini-batch, ascending) in consecutive micro-batches of at
    most ``size`` rows; ``size`` 0 = one micro-batch of all of them; no rows = none."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    if size <= 0 or size >= len(rows):
        return [rows]
    return [rows[lo: lo + size] for lo in range(0, len(rows), size)]


@dataclasses.dataclass
class _MicroOut:
    stats: tuple[dict, float, dict]
    row_loss: torch.Tensor
    row_kl: torch.Tensor


def _micro_step(model, rows, part: np.ndarray, adv_rows: torch.Tensor, denom: torch.Tensor,
                temperature: float, ppo_cfg: PPOConfig, modulation: DynaMOConfig | None,
                ref_model, world: World, extent: dict | None, seen, backward: bool = True) -> _MicroOut:
    """One micro-batch's forward, loss over the mini-batch's ``denom`` and backward.
    ``extent`` None: DynaMO's extent from this pass (the mini-batch is one pass on every rank;
    with several ranks, the all-reduce runs here); else the whole mini-batch's, found by
    ``_extent_pass``, which also gave this micro-batch's detached log-probs and entropies
    (``seen``), so the extent is exactly the one of the values modulated. ``backward`` False
    (a micro-batch of zero advantages after the extent pass): no pass at all, the loss and
    diagnostics from ``seen``."""
    keep = torch.as_tensor(part)
    ids, attn, kmask, old = rows.take(keep)
    kmask = kmask.float()
    if backward:
        logp, ent = token_logprobs_and_entropy(model, ids, attn, temperature, completion_mask=kmask)
    else:
        logp, ent = seen
    adv_tok = adv_rows[keep].unsqueeze(1) * kmask
    mod_stats = {}
    if modulation is not None:
        if extent is None:
            extent = _modulation_extent(world, adv_tok, logp, old, ent, kmask, ppo_cfg, modulation.delta_h)
            seen = (logp.detach(), ent.detach())
        adv_tok, mod_stats = modulate_advantages(adv_tok, seen[0], old, seen[1], kmask, modulation, ppo_cfg,
                                                 **extent)
    ref_logp = None
    if ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs_and_entropy(ref_model, ids, attn, temperature, completion_mask=kmask)
    res = ppo_clip_loss(logp, old, adv_tok, kmask, ppo_cfg, ref_logp=ref_logp, denominator=denom)
    if backward:
        res.loss.backward()  # DDP: on the last micro-batch the gradient buckets are all-reduced meanwhile
    weight = float(kmask.sum())
    n_pos = float((kmask.bool() & (adv_tok > 0)).sum())  # β_comp_pos_mean's tokens
    stats = {**res.stats, **mod_stats}
    stats["entropy"] = float((ent.detach() * kmask).sum() / kmask.sum().clamp_min(1))
    return _MicroOut((stats, weight, {"beta_comp_pos_mean": n_pos}), res.row_loss, res.row_kl)


def _grad_sync(model: torch.nn.Module, sync: bool):
    """DDP's ``no_sync()`` for a pass whose gradient only accumulates; otherwise nothing."""
    if sync or not hasattr(model, "no_sync"):
        return contextlib.nullcontext()
    return model.no_sync()


def _extent_pass(model, world: World, rows, parts: list[np.ndarray], n_pass: int, batch: RolloutBatch,
                 adv_rows: torch.Tensor, temperature: float, ppo_cfg: PPOConfig,
                 modulation: DynaMOConfig) -> tuple[dict, list]:
    """DynaMO's H_min/H_max and max Ξ over the WHOLE mini-batch when it is split into
    micro-batches: one no-grad forward per micro-batch (FSDP: ``n_pass`` of them, the extra ones
    zero-weight), then the ranks' all-reduce. Returns the extent for ``modulate_advantages``
    (explicit even with one process) and each micro-batch's detached (log-probs, entropies).
    The cost: one extra forward over the share per mini-batch, about a third of its
    forward + backward (without activation checkpointing)."""
    lo, hi, top = float("inf"), float("-inf"), 0.0
    seen: list = [None] * n_pass
    with torch.no_grad():
        for i in range(n_pass):
            if i >= len(parts):
                if world.fsdp and world.distributed:
                    zero_pass(model, batch.input_ids, batch.attention_mask, backward=False)
                continue
            ids, attn, kmask, old = rows.take(torch.as_tensor(parts[i]))
            kmask = kmask.float()
            logp, ent = token_logprobs_and_entropy(model, ids, attn, temperature, completion_mask=kmask)
            seen[i] = (logp, ent)
            adv_tok = adv_rows[torch.as_tensor(parts[i])].unsqueeze(1) * kmask
            a, b, c = _local_extent(adv_tok, logp, old, ent, kmask, ppo_cfg, modulation.delta_h)
            lo, hi, top = min(lo, a), max(hi, b), max(top, c)
    if world.distributed:
        lo, neg_hi, neg_top = world.reduce([lo, -hi, -top], "min")  # one all-reduce: min, max, max
        lo, hi, top = float(lo), float(-neg_hi), float(-neg_top)
    return {"entropy_range": (lo, hi), "xi_max": top}, seen


def _local_extent(adv_tok, logp, old, ent, kmask, ppo_cfg: PPOConfig, delta_h: str) -> tuple[float, float, float]:
    """(H_min, H_max, max Ξ) over the valid tokens given; (inf, -inf, 0) when there are none."""
    if kmask is None or not bool(kmask.bool().any()):
        return float("inf"), float("-inf"), 0.0
    h = ent.detach()[kmask.bool()]
    top = float(entropy_change_magnitude(adv_tok, logp.detach(), old, ent.detach(), kmask, ppo_cfg, delta_h).max())
    return float(h.min()), float(h.max()), top


def _modulation_extent(
    world: World, adv_tok, logp, old, ent, kmask, ppo_cfg: PPOConfig, delta_h: str = "token_centred"
) -> dict:
    """DynaMO's H_min/H_max and max Ξ over the mini-batch's valid tokens on EVERY rank, when
    each rank's share is one pass (empty with one process: modulate_advantages then takes them
    from the rows it is given)."""
    if not world.distributed:
        return {}
    lo, hi, top = _local_extent(adv_tok, logp, old, ent, kmask, ppo_cfg, delta_h)
    lo, neg_hi, neg_top = world.reduce([lo, -hi, -top], "min")  # one all-reduce: min, max, max
    return {"entropy_range": (float(lo), float(-neg_hi)), "xi_max": float(-neg_top)}
