"""Per-token KL estimators between the current policy and a reference policy.

All take the log-probs of the SAMPLED tokens only (no full distributions), following
J. Schulman, "Approximating KL divergence" (2020), as verl's ``kl_penalty`` does. With
log r = log π_ref(a) − log π_θ(a) and a ~ π_θ:
- k1 = −log r               unbiased for KL(π_θ‖π_ref), high variance, can be negative;
- k2 = ½ (log r)²            biased, low variance, ≥ 0;
- k3 = r − 1 − log r         unbiased, low variance, ≥ 0 ("low_var_kl"). GDRO trains with
  KL coefficient 0.001 on this estimator (gdro.md, App. A; verl ``kl_loss_type=low_var_kl``).
k3 follows verl exactly: log r clamped to [−20, 20] before exp, the result clamped to ≤ 10
(outside the clamp the gradient is zero, which is verl's behaviour too).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from replication.registry import Registry

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")
"""Name → per-token KL estimator; config ``rl.kl_estimator`` reads it."""

LOW_VAR_KL_LOG_RATIO_CLAMP = 20.0
"""verl clamps log(π_ref/π_θ) to ±20 before exponentiating."""
LOW_VAR_KL_MAX = 10.0
"""verl clamps the k3 value to [−10, 10] (k3 ≥ 0, so only the upper bound acts)."""


def register_kl(*names: str) -> Callable[[KLFn], KLFn]:
    """Decorator: register a per-token KL estimator under one or more names."""

    def deco(fn: KLFn) -> KLFn:
        for name in names:
            KL_ESTIMATORS.register(name, fn)
        return fn

    return deco


@register_kl("k1", "kl")
def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log π_θ(a) − log π_ref(a)."""
    return logp - ref_logp


@register_kl("k2", "mse")
def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (log π_θ(a) − log π_ref(a))²."""
    return 0.5 * (logp - ref_logp).square()


@register_kl("low_var_kl", "k3")
def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = π_ref/π_θ − 1 − log(π_ref/π_θ), clamped as verl's ``low_var_kl``."""
    log_r = (ref_logp - logp).clamp(-LOW_VAR_KL_LOG_RATIO_CLAMP, LOW_VAR_KL_LOG_RATIO_CLAMP)
    return (log_r.exp() - 1.0 - log_r).clamp(-LOW_VAR_KL_MAX, LOW_VAR_KL_MAX)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "low_var_kl") -> torch.Tensor:
    """Per-token KL estimate by registered name ("k1", "k2", "low_var_kl"/"k3")."""
    return KL_ESTIMATORS.get(estimator)(logp, ref_logp)
