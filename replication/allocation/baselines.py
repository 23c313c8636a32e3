"""Baseline allocator: the fixed group size of GRPO / RLOO / Dr. GRPO, generalised to any budget.

The papers' baselines give every prompt n = C/Q rollouts (VIP: C = 8Q or 16Q; DynaMO: 16 per
prompt; GDRO: 4 per prompt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

import numpy as np

from replication.allocation.base import Allocator, register_allocator
from replication.allocation.solvers import even_split


@register_allocator("uniform")
class Uniform(Allocator):
    """Budget split as evenly as possible: budget // Q each, and when Q does not divide the
    budget the remainder goes one each to the first prompts of the batch (batch order).

    Batch order rather than an rng rotation: the plan is then independent of the seed and of
    the call history, and the sampler already shuffles which prompts come first. With the
    papers' budgets (a multiple of Q) there is no remainder at all.
    """

    @dataclasses.dataclass
    class Config(Allocator.Config):
        lower: int = 1
        """Smallest rollout count a prompt may get (L); only checked for feasibility."""
        upper: int = 64
        """Largest rollout count a prompt may get (U); only checked for feasibility."""

    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        counts = even_split(len(prompt_ids), budget)
        self._last_details = {"counts": counts.copy()}
        return counts
