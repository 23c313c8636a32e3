"""Group-relative advantage estimators for variable group sizes (GRPO, Dr. GRPO, RLOO).

Every rollout r has a scalar reward and belongs to the group of its prompt. With adaptive
allocation (VIP, DynaMO-DRA, Rollout-GDRO) the groups have DIFFERENT sizes, so every
estimator here works from per-group sums (``np.bincount``) and never assumes a fixed n.

An estimator is one registered function ``fn(rewards, group_index, group_sizes) -> advantages``
where ``rewards`` is float64 [N], ``group_index`` is a dense int64 [N] in ``0..G-1`` and
``group_sizes`` is int64 [G]. ``group_advantages`` does the validation and the id remapping.

Conventions (decided here, see docs/fidelity/rl.md):
- A group of one rollout gets advantage 0 for every estimator: there is no baseline to compare
  against, so it carries no group-relative signal. (verl instead uses mean 0 / std 1 for such a
  group, i.e. the raw reward — which is not group-relative at all.)
- "grpo" divides by the UNBIASED (ddof=1) group std plus 1e-6, as verl (``torch.std``) and TRL
  do. A group whose rewards are all equal gets exactly 0 (no 1e-6 amplification of round-off).
- numpy in -> numpy out (float64). torch in -> torch out, on the rewards' device, in the rewards'
  float dtype (the default float dtype for integer/bool rewards). The maths runs in float64 numpy
  either way: rewards are one scalar per rollout, so the copy is negligible.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from replication.registry import Registry

AdvantageFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")
"""Name → ``fn(rewards, group_index, group_sizes)``; config ``rl.estimator`` and the CLI's
``--estimator`` choices read it."""

GRPO_STD_EPS = 1e-6
"""Added to the group std before dividing (verl ``epsilon=1e-6``; TRL uses 1e-4)."""


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Decorator: register ``fn(rewards, group_index, group_sizes)`` under ``name``."""

    return ADVANTAGE_ESTIMATORS.register(name)


def _group_mean(rewards: np.ndarray, group_index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    return np.bincount(group_index, weights=rewards, minlength=len(sizes)) / sizes


def _constant_groups(rewards: np.ndarray, group_index: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group flag: all rewards of the group are equal (max == min)."""
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, group_index, rewards)
    np.minimum.at(lo, group_index, rewards)
    return hi == lo


def _centred(rewards: np.ndarray, group_index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """r - mean_g, exactly 0 for groups of one and for groups with all-equal rewards."""
    dev = rewards - _group_mean(rewards, group_index, sizes)[group_index]
    flat = _constant_groups(rewards, group_index, len(sizes)) | (sizes < 2)
    dev[flat[group_index]] = 0.0
    return dev


@register_advantage("drgrpo")
def drgrpo_advantage(rewards: np.ndarray, group_index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Dr. GRPO (Liu et al. 2025): A = r - mean_g, no std division (VIP's "grpo" in code)."""
    return _centred(rewards, group_index, sizes)


@register_advantage("grpo")
def grpo_advantage(rewards: np.ndarray, group_index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """GRPO (Shao et al. 2024): A = (r - mean_g) / (std_g + 1e-6), std with ddof=1.

    DynaMO and GDRO train with this std-normalised form (dynamo.md, gdro.md App. A).
    """
    dev = _centred(rewards, group_index, sizes)
    ss = np.bincount(group_index, weights=dev * dev, minlength=len(sizes))
    # ddof=1; groups of one already have dev == 0, the max() only avoids 0/0.
    std = np.sqrt(ss / np.maximum(sizes - 1, 1))
    return dev / (std[group_index] + GRPO_STD_EPS)


@register_advantage("rloo")
def rloo_advantage(rewards: np.ndarray, group_index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """RLOO (Ahmadian et al. 2024): A = r - mean of the OTHER members = n/(n-1) (r - mean_g)."""
    dev = _centred(rewards, group_index, sizes)
    n = sizes[group_index].astype(np.float64)
    # Groups of one have dev == 0; max() keeps the factor finite there.
    return dev * n / np.maximum(n - 1.0, 1.0)


def group_advantages(rewards, group_ids, estimator: str = "grpo"):
    """Per-rollout advantages from per-rollout rewards and group (prompt) ids.

    Args:
        rewards: [N] rewards (numpy array, sequence or torch tensor). Must be finite.
        group_ids: [N] group ids, any integers (not necessarily contiguous or sorted);
            rollouts with the same id form one group. Groups may have different sizes.
        estimator: a name in ``ADVANTAGE_ESTIMATORS`` ("grpo", "drgrpo", "rloo", ...).

    Returns:
        [N] advantages: float64 numpy for non-torch input; for torch ``rewards`` a tensor on
        the same device in the rewards' float dtype.

    Raises:
        ValueError: unknown estimator, empty input, length mismatch, NaN/inf rewards,
            non-1-D inputs.
    """
    fn = ADVANTAGE_ESTIMATORS.get(estimator)
    torch_like = None
    if _is_torch(rewards):
        torch_like = rewards
        r = rewards.detach().cpu().double().numpy()
    else:
        r = np.asarray(rewards, dtype=np.float64)
    g = group_ids.detach().cpu().numpy() if _is_torch(group_ids) else np.asarray(group_ids)
    if r.ndim != 1 or g.ndim != 1:
        raise ValueError(f"rewards and group_ids must be 1-D, got shapes {r.shape} and {g.shape}")
    if r.shape[0] == 0:
        raise ValueError("empty rewards: at least one rollout is needed")
    if r.shape[0] != g.shape[0]:
        raise ValueError(f"{r.shape[0]} rewards but {g.shape[0]} group ids")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards contain NaN or inf")
    _, group_index, sizes = np.unique(g, return_inverse=True, return_counts=True)
    group_index = group_index.reshape(-1).astype(np.int64)
    adv = np.asarray(fn(r, group_index, sizes), dtype=np.float64)
    if torch_like is None:
        return adv
    import torch

    dtype = torch_like.dtype if torch_like.is_floating_point() else torch.get_default_dtype()
    return torch.as_tensor(adv, dtype=dtype, device=torch_like.device)


def _is_torch(x) -> bool:
    # Checked by name so that numpy-only users never import torch.
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")
