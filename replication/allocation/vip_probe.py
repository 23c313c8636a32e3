"""VIP told p̂ by a probe of the current policy (issue 20, point 9): an estimate of p, so a
noisy-p arm, not an upper bound of VIP's allocation (issue 37).

VIP predicts each prompt's p with a GP and allocates by the convex program of vip.py. When the
allocation does not help, either the prediction is not good enough or allocation cannot matter
in this regime. This arm separates the two: before each step's allocation the trainer draws
``probe_rollouts`` (m) extra samples per prompt from the current policy (train/probe.py), and the
allocator is *told* p̂ = successes / m — it predicts nothing. The allocation is VIP's own
(``Oracle`` → ``VIP._plan``: the same program, integer solver, degenerate fallback and p clip).
The probe's rollouts count neither toward the budget C nor toward the gradient, and they are
never observed: there is no GP to feed. Their cost is logged per step (``probe_rollouts``,
``probe_seconds``). Not an arm of the paper.

Protocol: ``tell_probe(ids, successes, m)`` then ``plan(ids, C)``; a plan without a probe of
exactly those prompts raises, so a stale or missing probe is never used silently.

    make_allocator("vip-probe", probe_rollouts=16, estimator="rloo", lower=4, upper=24)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import numpy as np

from replication.allocation.base import as_int, check_prompt_ids, register_allocator
from replication.allocation.vip import VIPConfig, Oracle


@dataclasses.dataclass
class VIPProbeConfig(VIPConfig):
    probe_rollouts: int = 16
    """m: extra samples per prompt drawn with the current policy before each allocation to
    estimate p (issue 20.9; not in the VIP paper; an estimate, so no upper bound: issue 37). p̂ = k/m has standard
    error ≤ 0.5/√m (0.125 at m = 16). They are outside the budget and the loss."""
    warmup_steps: int = 0
    """Told p from the first step: no cold start (as the oracle)."""


@register_allocator("vip-probe")
class VIPProbe(Oracle):
    """VIP's allocation on p̂ from a Monte-Carlo probe of the current policy (issue 20.9)."""

    Config = VIPProbeConfig

    def validate_config(self) -> None:
        super().validate_config()
        m = self.config.probe_rollouts
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValueError(f"{self.name}: probe_rollouts must be an integer >= 1, got {m!r}")

    def _setup_pool(self) -> None:
        # told p by the probe, so nothing to configure; the pool (optional) still guards the ids
        self._row = self.pool.index_of() if self.pool is not None else None
        self._told: dict[Hashable, float] = {}

    @property
    def wants_probe(self) -> int:
        """Samples per prompt the trainer draws and passes to ``tell_probe`` before ``plan``."""
        return int(self.config.probe_rollouts)

    def tell_probe(self, prompt_ids: Sequence[Hashable], successes: Sequence[int], trials: int) -> None:
        """The probe's result for the next plan: ``successes[q]`` of ``trials`` samples of
        prompt q succeeded. Replaces any earlier, unused probe."""
        ids = check_prompt_ids(prompt_ids)
        self._check_in_pool(ids)
        m = as_int("trials", trials)
        k = np.asarray(successes)
        if k.shape != (len(ids),):
            raise ValueError(f"{self.name}: successes has shape {k.shape}, expected ({len(ids)},)")
        if m < 1 or not np.all(np.equal(np.mod(k, 1), 0)) or np.any((k < 0) | (k > m)):
            raise ValueError(f"{self.name}: successes must be integers in [0, trials={m}], got {k.tolist()}")
        self._told = {pid: float(kq) / m for pid, kq in zip(ids, k)}

    def predict(self, prompt_ids: list[Hashable]) -> np.ndarray:
        missing = [pid for pid in prompt_ids if pid not in self._told]
        if missing:
            raise ValueError(f"{self.name}: no probe estimate for prompt id {missing[0]!r}; call "
                             "tell_probe(ids, successes, m) before plan (the trainer does: train/probe.py)")
        return np.array([self._told[pid] for pid in prompt_ids], dtype=np.float64)

    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        try:
            return super()._plan(prompt_ids, budget)
        finally:
            self._told = {}  # one probe, one plan: never reuse an estimate of an older policy
