"""Square-root-law allocation over GDRO difficulty bins (gdro.md, Rollout-GDRO theory, Thm 4.2).

If the gradient estimate of a bin-b prompt with n rollouts has variance ≤ v_b / n, minimising
Σ_b q̄_b v_b / n_b subject to Σ_b q̄_b n_b = n̄ gives the Neyman / square-root law

    n_b* = n̄ · √v_b / Σ_j q̄_j √v_j.

This allocator is that optimum, not one of the paper's trained arms (the paper trains the
bandit; the law is its theoretical target and its WSE diagnostic). The text read leaves v_b
abstract, so v_b is estimated per bin from observations:

- 'pass_rate' (default): v_b = p_b (1 − p_b), p_b an EMA of the bin's per-rollout success rate —
  the Bernoulli reward variance, which the gradient variance of binary-reward estimators scales
  with;
- 'loss_spread': v_b = an EMA of the variance across the bin's prompts of their step losses (the
  spread σ̂_b² that the paper's WSE diagnostic uses).

Shares q̄_b are the batch's realised bin shares. When the law's n_b leave [lower, upper], the
bounded optimum n_i = clip(c √v_b(i), lower, upper) is used instead (the water level with
σ = √v, identical to the law where no bound binds). Per-prompt targets are rounded to an exact
budget within the bounds by ``round_to_budget`` (fractional ties to the larger v). Bins
without a statistic yet take the mean √v of the bins that have one (so they get about n̄);
with no statistic at all the plan is uniform.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from replication.allocation.base import Allocator, register_allocator
from replication.allocation.difficulty import (
    DifficultyClassifier,
    DifficultyConfig,
    any_correct,
    classifier_config_from,
)
from replication.allocation.water_level import (
    round_to_budget,
    sqrt_law_allocation,
    water_level_continuous,
)

VARIANCE_SOURCES = ("pass_rate", "loss_spread")


@register_allocator("gdro-sqrt-law")
class GDROSqrtLaw(Allocator):
    """n_b ∝ √v_b over difficulty bins, exact budget, bounds [lower, upper]."""

    @dataclasses.dataclass
    class Config(Allocator.Config, DifficultyConfig):
        lower: int = 2
        """Smallest per-prompt count (GDRO's n_min: 2)."""
        upper: int = 12
        """Largest per-prompt count (GDRO's n_max: 12)."""
        variance: str = "pass_rate"
        """Source of v_b: 'pass_rate' = p_b(1 − p_b) of the bin's per-rollout success rate;
        'loss_spread' = variance of the bin's prompt losses (needs prompt_losses in observe)."""
        stat_ema: float = 0.12
        """Weight of the newest step in the per-bin statistic's EMA (bins drift as the model
        learns). Not from the paper; 0.12 mirrors Prompt-GDRO's β."""

    config: Config

    def validate_config(self) -> None:
        super().validate_config()
        cfg = self.config
        classifier_config_from(cfg).validate()
        if cfg.variance not in VARIANCE_SOURCES:
            raise ValueError(f"{self.name}: variance must be one of {VARIANCE_SOURCES}, got {cfg.variance!r}")
        if not 0.0 < float(cfg.stat_ema) <= 1.0:
            raise ValueError(f"{self.name}: stat_ema must be in (0, 1], got {cfg.stat_ema!r}")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.classifier = DifficultyClassifier(classifier_config_from(self.config))
        # Per-bin statistic (pass rate or loss variance); NaN = not observed yet.
        self.stat = np.full(int(self.config.n_bins), np.nan)

    def bin_variance(self) -> np.ndarray:
        """v_b per bin (NaN where the bin has no statistic yet)."""
        if self.config.variance == "pass_rate":
            return self.stat * (1.0 - self.stat)
        return self.stat.copy()

    # ----------------------------------------------------------------- plan
    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        bins = self.classifier.bins(prompt_ids)
        present, inverse, sizes = np.unique(bins, return_inverse=True, return_counts=True)
        v = self.bin_variance()[present]
        known = np.isfinite(v)
        q = len(prompt_ids)
        lo, hi = int(self.config.lower), int(self.config.upper)
        root = np.sqrt(np.where(known, v, 0.0))
        root[~known] = root[known].mean() if known.any() else 1.0
        n_bin = sqrt_law_allocation(root**2, sizes / q, budget / q)  # uniform when all v = 0
        if n_bin.min() >= lo - 1e-9 and n_bin.max() <= hi + 1e-9:
            target = n_bin[inverse]
        else:
            # A bound is active: the optimum of Σ v_i / n_i s.t. Σ n_i = C, lo <= n_i <= hi is
            # n_i = clip(c √v_i, lo, hi) (KKT), i.e. the water level with σ = √v; it equals the
            # square-root law wherever the bounds do not bind.
            target = water_level_continuous(root[inverse], budget, lo, hi)
        counts = round_to_budget(target, budget, lo, hi, tie_break=root[inverse])
        self._last_details = {"bin": bins, "v": self.bin_variance()[bins]}
        return counts

    # ----------------------------------------------------------------- observe
    def _observe(
        self,
        prompt_ids: list[Hashable],
        counts: np.ndarray,
        rewards: np.ndarray,
        prompt_losses: np.ndarray | None,
    ) -> None:
        cfg = self.config
        bins = self.classifier.bins(prompt_ids)  # the bins the plan used
        rolled = counts > 0
        new = np.full(int(cfg.n_bins), np.nan)
        if cfg.variance == "pass_rate":
            owner_bin = np.repeat(bins, counts)
            rows = np.bincount(owner_bin, minlength=len(new)).astype(np.float64)
            hits = np.bincount(owner_bin, weights=(rewards > 0).astype(np.float64), minlength=len(new))
            seen = rows > 0
            new[seen] = hits[seen] / rows[seen]
        else:
            if prompt_losses is None:
                raise ValueError(f"{self.name}: variance='loss_spread' needs prompt_losses in observe()")
            for b in np.unique(bins[rolled]):
                x = prompt_losses[rolled & (bins == b)]
                if x.size >= 2:  # a spread needs two prompts
                    new[b] = float(np.var(x, ddof=1))
        lam = float(cfg.stat_ema)
        fresh = np.isfinite(new)
        first = fresh & ~np.isfinite(self.stat)
        self.stat[first] = new[first]  # the first observation initialises the EMA
        both = fresh & ~first
        self.stat[both] = (1.0 - lam) * self.stat[both] + lam * new[both]
        ids = [pid for pid, r in zip(prompt_ids, rolled) if r]
        self.classifier.update(ids, any_correct(counts, rewards)[rolled])

    # ----------------------------------------------------------------- state
    def _state(self) -> dict[str, Any]:
        # NaN is not JSON: store unobserved bins as None.
        return {
            "stat": [None if not np.isfinite(s) else float(s) for s in self.stat],
            "classifier": self.classifier.state_dict(),
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        stat = np.array([np.nan if s is None else float(s) for s in state["stat"]])
        if stat.shape != self.stat.shape:
            raise ValueError(f"state has {stat.size} bins, config has {self.stat.size}")
        self.stat = stat
        self.classifier.load_state_dict(state["classifier"])
