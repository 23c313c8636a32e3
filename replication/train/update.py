"""The policy update of one step: PPO-clip over mini-batches of a variable-count rollout batch.

Advantages arrive per row (already weighted by Prompt-GDRO when enabled); DynaMO's token
modulation is applied per mini-batch, where its H_min/H_max and max Ξ are taken (dynamo.md §B).
Rows whose advantage is exactly zero carry no policy gradient; when there is no KL term they are
skipped in the backward pass, but the token-mean denominator still counts their tokens, so the
gradient is identical to the full computation (a measured 40–70 % saving, notes/tiny-loop.md).
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
from replication.rollout.base import RolloutBatch


@dataclasses.dataclass
class UpdateResult:
    row_loss: np.ndarray
    """Per-row token-mean clipped surrogate loss + β·KL, at the time the row was trained, with
    the Prompt-GDRO weight divided back out of the surrogate: the adversary scores the loss of
    the unweighted objective (a positive weight passes through min/clip, so this is exact)."""
    stats: dict
    """Means over mini-batches: grad_norm, clipfrac, entropy, approx_kl, modulation stats."""


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
) -> UpdateResult:
    n = batch.n_rows
    adv_rows = torch.as_tensor(row_advantages, dtype=torch.float32)
    row_loss = np.zeros(n)
    collected: dict[str, list[float]] = {}
    use_kl = ref_model is not None and ppo_cfg.kl_coef > 0
    model.train()
    for _ in range(ppo_epochs):
        order = rng.permutation(n)
        for mb in np.array_split(order, min(mini_batches, n)):
            mb_t = torch.as_tensor(np.sort(mb))
            mask = batch.completion_mask[mb_t].float()
            # token-mean divides by the mini-batch's valid tokens, seq-mean modes by its rows.
            if ppo_cfg.aggregation == "token-mean":
                denom = mask.sum().clamp_min(1.0)
            else:
                denom = torch.tensor(float(len(mb_t)))
            # Zero-advantage rows contribute no gradient (without KL): train only the others,
            # with the full mini-batch's token count as the token-mean denominator.
            # DynaMO's H_min/H_max range over ALL valid tokens of the mini-batch, so with
            # modulation on every row is kept too.
            keep = mb_t if (use_kl or modulation is not None) else mb_t[adv_rows[mb_t] != 0]
            stats = {"entropy": float("nan")}
            if len(keep) > 0:
                ids, attn = batch.input_ids[keep], batch.attention_mask[keep]
                kmask = batch.completion_mask[keep].float()
                logp, ent = token_logprobs_and_entropy(model, ids, attn, temperature, completion_mask=kmask)
                old = batch.old_logprobs[keep]
                adv_tok = adv_rows[keep].unsqueeze(1) * kmask
                if modulation is not None:
                    adv_tok, mod_stats = modulate_advantages(
                        adv_tok, logp.detach(), old, ent.detach(), kmask, modulation, ppo_cfg
                    )
                else:
                    mod_stats = {}
                ref_logp = None
                if use_kl:
                    with torch.no_grad():
                        ref_logp, _ = token_logprobs_and_entropy(
                            ref_model, ids, attn, temperature, completion_mask=kmask
                        )
                res = ppo_clip_loss(logp, old, adv_tok, kmask, ppo_cfg, ref_logp=ref_logp, denominator=denom)
                loss, stats = res.loss, res.stats
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                stats = {**stats, **mod_stats, "grad_norm": float(gn)}
                stats["entropy"] = float((ent.detach() * kmask).sum() / kmask.sum().clamp_min(1))
                surrogate = (res.row_loss - res.row_kl).numpy()
                w = 1.0 if row_weights is None else row_weights[keep.numpy()]
                row_loss[keep.numpy()] = surrogate / w + res.row_kl.numpy()
            else:
                # Nothing to learn from, but the optimizer still steps (Adam moments, decay),
                # exactly as the full computation with an all-zero gradient would.
                for p in model.parameters():
                    p.grad = torch.zeros_like(p)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                stats = {"grad_norm": 0.0}
            for k, v in stats.items():
                if isinstance(v, (int, float)):
                    collected.setdefault(k, []).append(float(v))
    means = {k: float(np.nanmean(v)) if len(v) else float("nan") for k, v in collected.items()}
    return UpdateResult(row_loss=row_loss, stats=means)
