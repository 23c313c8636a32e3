"""PPO clipped surrogate loss (asymmetric "clip-higher" + dual clip), KL term, aggregation.

Per token, with r = π_θ(a)/π_old(a) and advantage A (Schulman et al. 2017; DAPO's clip-higher,
Yu et al. 2025; dual clip, Ye et al. 2020, arXiv 1912.09729):
    A ≥ 0:  ℓ = −A · min(r, 1 + ε_high)
    A < 0:  ℓ = |A| · min(max(r, 1 − ε_low), c)        (c = dual clip; no min when c is None)
which equals verl's ``max(−A r, −A clip(r))`` (then ``min(·, −A c)`` for A < 0). The loss is
written as ``where(active, −A·r, −A·bound)`` so that the gradient is EXACTLY −A·r·∇log π where
``ppo_clip_active`` says the token is live and exactly 0 elsewhere (no tie ambiguity at the
boundaries); the values are the same as the max/min form.

Aggregation (verl ``agg_loss``): all three papers train with "token-mean" (dynamo.md script,
vip.md code, gdro.md App. A / verl default). "token-mean" divides by the number of valid tokens
of the batch it is given; when a mini-batch is split into micro-batches for gradient
accumulation, pass the mini-batch's token count as ``denominator`` to every micro-batch
call so the accumulated gradient is the mini-batch token-mean. (verl 0.4 instead token-means
each micro-batch and scales by 1/#micro-batches — a slightly different weighting.)
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from replication.rl.kl import KL_ESTIMATORS, kl_penalty

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

LOG_RATIO_CLAMP = 20.0
"""log r is clamped to ±20 before exp, as verl does, so a stale token cannot overflow."""


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Clipped-surrogate settings. Defaults are the common setting of all three papers."""

    clip_low: float = 0.2
    """ε_low: ratio floor 1−ε_low for A < 0 (all three papers: 0.2)."""
    clip_high: float = 0.28
    """ε_high: ratio cap 1+ε_high for A > 0 (all three: 0.28; DynaMO's script says 0.2 but its
    actor silently multiplies 0.2 by 1.4 — see docs/fidelity/rl.md)."""
    dual_clip: float | None = 10.0
    """Dual-clip bound c > 1 on the ratio for A < 0 (Ye et al. 2020). VIP and DynaMO scripts set
    ``clip_ratio_c=10``; GDRO inherits verl's default 3.0 (verl always applies it). None = off."""
    aggregation: str = "token-mean"
    """How token losses become a scalar: "token-mean" (all three papers), "seq-mean-token-mean",
    "seq-mean-token-sum" (verl names)."""
    kl_coef: float = 0.0
    """β of the KL-to-reference loss term. VIP and DynaMO: 0 (no KL); GDRO: 0.001 (App. A)."""
    kl_estimator: str = "low_var_kl"
    """Per-token KL estimator: "low_var_kl" (k3, clamped as verl; GDRO's), "k1", "k2"."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0:
            raise ValueError(f"PPOConfig.clip_low must be in [0, 1), got {self.clip_low}")
        if not self.clip_high >= 0.0:
            raise ValueError(f"PPOConfig.clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            # verl asserts the same (clip_ratio_c > 1).
            raise ValueError(f"PPOConfig.dual_clip must be None or > 1, got {self.dual_clip}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"PPOConfig.aggregation must be one of {AGGREGATIONS}, got {self.aggregation!r}")
        if not self.kl_coef >= 0.0:
            raise ValueError(f"PPOConfig.kl_coef must be >= 0, got {self.kl_coef}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"PPOConfig.kl_estimator must be one of {sorted(KL_ESTIMATORS)}, got {self.kl_estimator!r}"
            )


class PPOLoss(NamedTuple):
    loss: torch.Tensor
    """Scalar to backpropagate: aggregated clipped loss + kl_coef · aggregated KL."""
    stats: dict[str, float]
    """Diagnostics over valid tokens: clipfrac (+ _high/_low/_dual), approx_kl, ratio_mean/min/max,
    pg_loss, kl, loss, n_tokens."""
    row_loss: torch.Tensor
    """[N] detached per-sequence token-mean of (clipped loss + kl_coef·KL) — the per-rollout
    loss that Prompt-GDRO / Rollout-GDRO average per prompt (gdro.md: ℓ = −J_clip + β KL).
    Rows without valid tokens get 0."""
    row_kl: torch.Tensor | None = None
    """[N] detached per-sequence token-mean of kl_coef·KL (zeros without KL), so callers can
    split row_loss into its surrogate and KL parts (Prompt-GDRO needs the unweighted surrogate)."""


def policy_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """r = exp(clamp(log π_θ − log π_old, ±20))."""
    return torch.exp((logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def ppo_clip_active(ratio: torch.Tensor, adv: torch.Tensor, cfg: PPOConfig) -> torch.Tensor:
    """Bool mask: True where the clipped loss still passes gradient (DynaMO's 1_clip).

    False exactly where clipping zeroes it: A > 0 and r > 1+ε_high; A < 0 and r < 1−ε_low;
    A < 0 and r > c (dual clip). Boundaries count as live (as DynaMO's code: ``r <= 1+ε_high``).
    A = 0 tokens are live (nothing is clipped; their gradient is zero only because A is).
    """
    pos_ok = ratio <= 1.0 + cfg.clip_high
    neg_ok = ratio >= 1.0 - cfg.clip_low
    if cfg.dual_clip is not None:
        neg_ok = neg_ok & (ratio <= cfg.dual_clip)
    return torch.where(adv > 0, pos_ok, torch.where(adv < 0, neg_ok, torch.ones_like(pos_ok)))


def _clip_bound(ratio: torch.Tensor, adv: torch.Tensor, cfg: PPOConfig) -> torch.Tensor:
    """The constant the ratio is replaced by where the token is clipped."""
    neg_bound = torch.full_like(ratio, 1.0 - cfg.clip_low)
    if cfg.dual_clip is not None:
        neg_bound = torch.where(ratio > cfg.dual_clip, torch.full_like(ratio, cfg.dual_clip), neg_bound)
    return torch.where(adv > 0, torch.full_like(ratio, 1.0 + cfg.clip_high), neg_bound)


def aggregate(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token-mean",
    denominator: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a [N, L] token-loss matrix to a scalar over ``mask`` (verl's ``agg_loss``).

    - "token-mean": Σ masked / (#valid tokens)
    - "seq-mean-token-mean": mean over sequences of each sequence's token-mean
    - "seq-mean-token-sum": mean over sequences of each sequence's token-sum
    Sequences with no valid token are left out of the sequence means. ``denominator`` replaces
    the count (#tokens for token-mean, #sequences otherwise) — pass the whole mini-batch's count
    when calling once per micro-batch. An empty batch gives 0, never NaN.
    """
    m = mask.to(torch.bool)
    x = torch.where(m, loss_mat, torch.zeros_like(loss_mat))
    if mode == "token-mean":
        num = x.sum()
        den = m.sum().clamp_min(1) if denominator is None else denominator
        return num / den
    row_tokens = m.sum(-1)
    row_sum = x.sum(-1)
    if mode == "seq-mean-token-mean":
        row_val = row_sum / row_tokens.clamp_min(1)
    elif mode == "seq-mean-token-sum":
        row_val = row_sum
    else:
        raise ValueError(f"unknown aggregation {mode!r}; known: {AGGREGATIONS}")
    den = (row_tokens > 0).sum().clamp_min(1) if denominator is None else denominator
    return row_val.sum() / den


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages_per_token: torch.Tensor,
    mask: torch.Tensor,
    cfg: PPOConfig,
    ref_logp: torch.Tensor | None = None,
    denominator: float | torch.Tensor | None = None,
) -> PPOLoss:
    """Clipped surrogate loss (+ β·KL) over the valid tokens of a (micro-)batch.

    Args:
        logp: [N, L] log π_θ of the sampled tokens (with grad).
        old_logp: [N, L] log π_old of the same tokens (the sampling policy).
        advantages_per_token: [N, L] per-token advantages, or [N] per-sequence (broadcast).
            Any modulation (DynaMO factors, Prompt-GDRO weights) is applied before this call.
        mask: [N, L] 1 for tokens in the loss (completion tokens up to and including EOS).
        cfg: PPOConfig.
        ref_logp: [N, L] log π_ref, required when ``cfg.kl_coef > 0`` (used for stats otherwise).
        denominator: see ``aggregate``; None = this batch's own count.

    Returns:
        PPOLoss(loss, stats, row_loss).
    """
    adv = advantages_per_token
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)
    if not (logp.shape == old_logp.shape == adv.shape == mask.shape):
        raise ValueError(
            f"shape mismatch: logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)}, "
            f"advantages {tuple(adv.shape)}, mask {tuple(mask.shape)}"
        )
    if cfg.kl_coef > 0 and ref_logp is None:
        raise ValueError("PPOConfig.kl_coef > 0 needs ref_logp")
    m = mask.to(torch.bool)
    adv = adv.detach().to(logp.dtype)
    old_logp = old_logp.detach()
    ratio = policy_ratio(logp, old_logp)
    active = ppo_clip_active(ratio.detach(), adv, cfg)
    bound = _clip_bound(ratio.detach(), adv, cfg)
    pg_tok = torch.where(active, -adv * ratio, -adv * bound)

    tok = pg_tok
    kl_tok = None
    if ref_logp is not None:
        kl_tok = kl_penalty(logp, ref_logp.detach(), cfg.kl_estimator)
        if cfg.kl_coef > 0:
            tok = pg_tok + cfg.kl_coef * kl_tok

    pg_loss = aggregate(pg_tok, m, cfg.aggregation, denominator)
    loss = pg_loss
    kl_loss = None
    if kl_tok is not None:
        kl_loss = aggregate(kl_tok, m, cfg.aggregation, denominator)
        if cfg.kl_coef > 0:
            loss = pg_loss + cfg.kl_coef * kl_loss

    with torch.no_grad():
        row_tokens = m.sum(-1)
        row_loss = torch.where(m, tok, torch.zeros_like(tok)).sum(-1) / row_tokens.clamp_min(1)
        row_kl = torch.zeros_like(row_loss)
        if kl_tok is not None and cfg.kl_coef > 0:
            row_kl = cfg.kl_coef * torch.where(m, kl_tok, torch.zeros_like(kl_tok)).sum(-1) / row_tokens.clamp_min(1)
        stats = _stats(ratio.detach(), logp.detach(), old_logp, adv, m, cfg)
        stats["pg_loss"] = float(pg_loss)
        stats["loss"] = float(loss)
        if kl_loss is not None:
            stats["kl"] = float(kl_loss)
    return PPOLoss(loss, stats, row_loss.detach(), row_kl.detach())


def _stats(ratio, logp, old_logp, adv, m, cfg: PPOConfig) -> dict[str, float]:
    n = int(m.sum())
    if n == 0:
        return {"n_tokens": 0.0, "clipfrac": 0.0, "clipfrac_high": 0.0, "clipfrac_low": 0.0,
                "clipfrac_dual": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0, "ratio_min": 1.0,
                "ratio_max": 1.0}
    r = ratio[m]
    a = adv[m]
    high = (a > 0) & (r > 1.0 + cfg.clip_high)
    low = (a < 0) & (r < 1.0 - cfg.clip_low)
    dual = (a < 0) & (r > cfg.dual_clip) if cfg.dual_clip is not None else torch.zeros_like(high)
    return {
        "n_tokens": float(n),
        # verl's pg_clipfrac: tokens where the ε-clip (not the dual clip) binds.
        "clipfrac": float((high | low).float().mean()),
        "clipfrac_high": float(high.float().mean()),
        "clipfrac_low": float(low.float().mean()),
        "clipfrac_dual": float(dual.float().mean()),
        # verl's ppo_kl: mean of log π_old − log π_θ over valid tokens.
        "approx_kl": float((old_logp[m] - logp[m]).mean()),
        "ratio_mean": float(r.mean()),
        "ratio_min": float(r.min()),
        "ratio_max": float(r.max()),
    }
