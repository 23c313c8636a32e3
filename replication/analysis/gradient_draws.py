"""D independent gradient draws of one allocator, reduced to what the statistics need (the Gram
matrix, the projections on a fixed direction, the shares, the mean): the vectors themselves are
dropped, so D draws of a P-parameter model cost O(D² + P) memory after the draws."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import torch


@dataclasses.dataclass
class DrawSet:
    """What is kept of one allocator's D gradient draws (the vectors themselves are dropped)."""

    gram: np.ndarray
    """[D, D] Gram matrix g_i·g_j (float64)."""
    projection: np.ndarray
    """[D] g_d·u on the reference direction (NaN when there is none)."""
    nonzero_share: np.ndarray
    """[D] share of rollouts with a non-zero advantage."""
    departure_share: np.ndarray
    """[D] share of prompts whose count differs from n̄."""
    mean: np.ndarray
    """[P] mean gradient (float64)."""


def draw_gradients(
    plan: Callable[[], np.ndarray],
    gradient: Callable[[np.ndarray, torch.Generator], tuple[torch.Tensor, np.ndarray]],
    draws: int,
    seeds: Sequence[int],
    mean_rollouts: int,
    direction: torch.Tensor | None = None,
) -> DrawSet:
    """D independent draws: ``plan()`` gives the counts, ``gradient(counts, generator)`` one
    flat gradient and its per-row advantages; generator d is seeded from ``seeds`` + [d]."""
    vecs, nonzero, depart = [], [], []
    for d in range(draws):
        counts = np.asarray(plan(), dtype=np.int64)
        state = np.random.SeedSequence([*map(int, seeds), d]).generate_state(1)[0]
        g, adv = gradient(counts, torch.Generator().manual_seed(int(state)))
        vecs.append(g.to(torch.float32))
        nonzero.append(float(np.mean(np.asarray(adv) != 0)))
        depart.append(float(np.mean(counts != mean_rollouts)))
    x = torch.stack(vecs).double()
    proj = (x @ direction.double()).numpy() if direction is not None else np.full(draws, np.nan)
    return DrawSet(gram=(x @ x.T).numpy(), projection=proj, nonzero_share=np.array(nonzero),
                   departure_share=np.array(depart), mean=x.mean(0).numpy())
