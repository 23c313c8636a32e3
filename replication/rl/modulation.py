"""DynaMO token-level advantage modulation (docs/papers/dynamo.md, section B).

    A_final = A · β_comp · β_stab       (factors detached, applied before the PPO-clip loss)

Gradient compensation (positive-advantage tokens only): low-entropy tokens of correct answers
get small gradients from the softmax, so they are boosted,
    β_comp = 1 + α (H_max − H_t) / (H_max − H_min)   if A_t > 0, else 1,
with H_t the full-vocabulary entropy of the CURRENT policy at token t (temperature-scaled
logits) and H_min, H_max over the valid tokens of the tensors given (the micro-batch).

Update-magnitude stabilisation (all tokens): the predicted first-order entropy change of a token,
    ξ_t = 1_clip · r_t · A_t,  Λ_t = log π_θ(a_t) + H_t,
    ΔH_t = −ξ_t (π_θ(a_t) Λ_t − mean over the sequence's valid tokens of πΛ),
    Ξ_t = |ΔH_t|,  x_t = Ξ_t / max Ξ (micro-batch),
    β_stab = λ_min + (1 − λ_min) / (1 + exp(γ (x_t − τ))),
damps the few tokens whose update would move the entropy most. With the defaults β_stab(0.99)
= 0.8 exactly and β_stab(1) = 0.6 + 0.4/(1 + e^0.5) ≈ 0.75102; β_stab(0.9) ≈ 0.9956,
β_stab(0.8) ≈ 0.99997.

This is the README/figure formula, which is also the official code after its 2026-04-12 fix
(``delta_h="token_centred"``, default). The code that produced the paper's numbers (before that
fix) used the per-sequence SUM of −η π² Λ ξ over valid tokens, broadcast to every token, no
centring: ``delta_h="sequence_sum"``. Other code details (min/max over padded positions too;
+1e-8 instead of guards) — see docs/fidelity/rl.md. The learning rate η of the code is dropped:
it cancels in x = Ξ / max Ξ.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from replication.registry import Registry
from replication.rl.ppo import PPOConfig, policy_ratio, ppo_clip_active

MODULATIONS: Registry[type] = Registry("modulation")
"""Token-level advantage modulation name → its config dataclass (config ``rl.modulation``,
options ``rl.modulation_options``; the CLI's ``--modulation`` choices)."""

DELTA_H_FORMS = ("token_centred", "sequence_sum")


@MODULATIONS.register("dynamo")
@dataclasses.dataclass(frozen=True)
class DynaMOConfig:
    """DynaMO modulation hyper-parameters (official code ``decay6_linearnorm`` by default)."""

    alpha: float = 0.2
    """α: maximal boost of gradient compensation, β_comp ∈ [1, 1+α] (code: mu_max = 1.2;
    the alternative mode ``decay5_linearnorm`` uses α = 0.4)."""
    lambda_min: float = 0.6
    """λ_min: floor of β_stab (code default 0.6; the alt mode sets λ_min = 1 − α = 0.6)."""
    gamma: float = 50.0
    """γ: steepness of the β_stab sigmoid (code: 50 in both modes)."""
    tau: float = 0.99
    """τ: midpoint of the β_stab sigmoid in x = Ξ/max Ξ (code: 0.99; alt mode 0.9)."""
    enable_comp: bool = True
    """Apply gradient compensation (the paper's GC ablation switches it off)."""
    enable_stab: bool = True
    """Apply update-magnitude stabilisation (the paper's UMS ablation switches it off)."""
    delta_h: str = "token_centred"
    """Form of ΔH: "token_centred" = −ξ(πΛ − mean_seq πΛ) per token (README; official code
    after its 2026-04-12 fix); "sequence_sum" = |Σ_seq π²Λξ| broadcast to every token of the
    sequence (the pre-fix code that produced the paper's numbers)."""

    def __post_init__(self) -> None:
        if not self.alpha >= 0:
            raise ValueError(f"DynaMOConfig.alpha must be >= 0, got {self.alpha}")
        if not 0.0 <= self.lambda_min <= 1.0:
            raise ValueError(f"DynaMOConfig.lambda_min must be in [0, 1], got {self.lambda_min}")
        if not self.gamma > 0:
            raise ValueError(f"DynaMOConfig.gamma must be > 0, got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"DynaMOConfig.tau must be in (0, 1], got {self.tau}")
        if self.delta_h not in DELTA_H_FORMS:
            raise ValueError(f"DynaMOConfig.delta_h must be one of {DELTA_H_FORMS}, got {self.delta_h!r}")

    @classmethod
    def alt_mode(cls) -> "DynaMOConfig":
        """The code's ``decay5_linearnorm``: α = 0.4, λ_min = 1 − α = 0.6, τ = 0.9, γ = 50."""
        return cls(alpha=0.4, lambda_min=0.6, gamma=50.0, tau=0.9)


def _per_token(adv: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return adv[:, None].expand_as(like) if adv.dim() == 1 else adv


def gradient_compensation(
    adv: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor, alpha: float,
    entropy_range: tuple[float, float] | None = None,
) -> torch.Tensor:
    """β_comp [N, L] (detached): 1 + α(H_max − H_t)/(H_max − H_min) on valid A > 0 tokens, else 1.

    H_min / H_max are over the valid tokens of ``entropy`` (or ``entropy_range``, when the
    mini-batch spans several processes); if they coincide (or no token is valid) every factor is
    1 — there is no entropy contrast to compensate.
    """
    with torch.no_grad():
        h = entropy.detach()
        m = mask.to(torch.bool)
        a = _per_token(adv.detach(), h)
        one = torch.ones_like(h)
        if not m.any():
            return one
        hv = h[m]
        h_min, h_max = hv.min(), hv.max()
        if entropy_range is not None:
            h_min, h_max = (torch.tensor(v, dtype=h.dtype, device=h.device) for v in entropy_range)
        if not h_max > h_min:
            return one
        boost = 1.0 + alpha * (h_max - h) / (h_max - h_min)
        return torch.where(m & (a > 0), boost, one)


def stabilisation_factor(x: torch.Tensor, lambda_min: float, gamma: float, tau: float) -> torch.Tensor:
    """β_stab(x) = λ_min + (1 − λ_min) / (1 + exp(γ (x − τ)))."""
    return lambda_min + (1.0 - lambda_min) * torch.sigmoid(-gamma * (x - tau))


def entropy_change_magnitude(
    adv: torch.Tensor,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    ppo_cfg: PPOConfig,
    form: str = "token_centred",
) -> torch.Tensor:
    """Ξ_t = |ΔH_t| [N, L] (detached, 0 outside the mask); ΔH_t as in the module docstring, or
    with ``form="sequence_sum"`` the pre-fix code's |Σ_seq π²Λξ| on every token of the sequence."""
    with torch.no_grad():
        m = mask.to(torch.bool)
        lp = logp.detach()
        a = _per_token(adv.detach(), lp).to(lp.dtype)
        ratio = policy_ratio(lp, old_logp.detach())
        xi = ppo_clip_active(ratio, a, ppo_cfg).to(lp.dtype) * ratio * a
        pi_lam = torch.exp(lp) * (lp + entropy.detach())
        pi_lam = torch.where(m, pi_lam, torch.zeros_like(pi_lam))
        if form == "sequence_sum":
            per_seq = (torch.exp(lp) * pi_lam * xi * m).sum(-1, keepdim=True).abs()
            return torch.where(m, per_seq.expand_as(lp), torch.zeros_like(lp))
        seq_mean = pi_lam.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
        delta_h = -xi * (pi_lam - seq_mean)
        return torch.where(m, delta_h.abs(), torch.zeros_like(delta_h))


def update_stabilisation(
    adv: torch.Tensor,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    cfg: DynaMOConfig,
    ppo_cfg: PPOConfig,
    xi_max: float | None = None,
) -> torch.Tensor:
    """β_stab [N, L] (detached) from x = Ξ / max Ξ over the valid tokens given (or ``xi_max``,
    when the mini-batch spans several processes); 1 outside the mask.

    If every Ξ is 0 (e.g. all advantages 0) x is taken as 0, so β_stab = β_stab(0) ≈ 1.
    """
    with torch.no_grad():
        m = mask.to(torch.bool)
        big_xi = entropy_change_magnitude(adv, logp, old_logp, entropy, mask, ppo_cfg, cfg.delta_h)
        top = big_xi.max() if m.any() else big_xi.new_zeros(())
        if xi_max is not None:
            top = torch.tensor(xi_max, dtype=big_xi.dtype, device=big_xi.device)
        x = big_xi / top if top > 0 else torch.zeros_like(big_xi)
        beta = stabilisation_factor(x, cfg.lambda_min, cfg.gamma, cfg.tau)
        return torch.where(m, beta, torch.ones_like(beta))


def modulate_advantages(
    adv: torch.Tensor,
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    cfg: DynaMOConfig,
    ppo_cfg: PPOConfig,
    entropy_range: tuple[float, float] | None = None,
    xi_max: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """A · β_comp · β_stab with both factors detached, and diagnostics.

    Args:
        adv: [N, L] per-token or [N] per-sequence advantages.
        logp: [N, L] log π_θ of the sampled tokens (current policy; only read, not differentiated).
        old_logp: [N, L] log π_old.
        entropy: [N, L] H_t of the current policy at temperature T (``token_logprobs_and_entropy``).
        mask: [N, L] valid completion tokens. The extent of H_min/H_max and max Ξ is exactly
            the rows given: pass one micro-batch (as the paper) or a whole mini-batch.
        cfg, ppo_cfg: DynaMO and PPO settings (ε_low, ε_high, dual clip define 1_clip).
        entropy_range, xi_max: (H_min, H_max) and max Ξ of the whole mini-batch when it is
            split across processes (train/distributed.py) or into micro-batches
            (``rl.micro_batch_rows``, train/update.py); None = from the rows given.

    Returns:
        (advantages [N, L], stats) — stats: beta_comp_mean, beta_comp_pos_mean (over A > 0
        tokens), beta_stab_mean, beta_stab_min, frac_damped (valid tokens with x > τ, i.e.
        β_stab below the midpoint (1+λ_min)/2), entropy_min, entropy_max.
    """
    a = _per_token(adv, logp)
    m = mask.to(torch.bool)
    one = torch.ones_like(logp, dtype=a.dtype if a.is_floating_point() else logp.dtype).detach()
    comp = (
        gradient_compensation(a, entropy, m, cfg.alpha, entropy_range).to(one.dtype)
        if cfg.enable_comp
        else one
    )
    stab = (
        update_stabilisation(a, logp, old_logp, entropy, m, cfg, ppo_cfg, xi_max).to(one.dtype)
        if cfg.enable_stab
        else one
    )
    factor = (comp * stab).detach()
    out = a * factor

    with torch.no_grad():
        n = int(m.sum())
        pos = m & (a > 0)
        mid = cfg.lambda_min + 0.5 * (1.0 - cfg.lambda_min)
        h = entropy.detach()[m]
        stats = {
            "beta_comp_mean": float(comp[m].mean()) if n else 1.0,
            "beta_comp_pos_mean": float(comp[pos].mean()) if pos.any() else 1.0,
            "beta_stab_mean": float(stab[m].mean()) if n else 1.0,
            "beta_stab_min": float(stab[m].min()) if n else 1.0,
            "frac_damped": float((stab[m] < mid).float().mean()) if n and cfg.enable_stab else 0.0,
            "entropy_min": float(h.min()) if n else math.nan,
            "entropy_max": float(h.max()) if n else math.nan,
        }
    return out, stats
