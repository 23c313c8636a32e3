"""Prompt order: epochs over the train pool, each a fresh seeded permutation.

State is (epoch, position); the permutation of an epoch is derived from (seed, epoch), so a
resumed run draws exactly the prompts an uninterrupted run would have drawn.
"""

from __future__ import annotations

import numpy as np


class EpochSampler:
    def __init__(self, n_items: int, seed: int) -> None:
        if n_items < 1:
            raise ValueError("the train pool is empty")
        self.n_items = n_items
        self.seed = seed
        self.epoch = 0
        self.position = 0

    def _perm(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n_items)

    def next_batch(self, size: int) -> np.ndarray:
        """Indices of the next ``size`` distinct prompts (a batch never repeats a prompt)."""
        if size > self.n_items:
            raise ValueError(f"prompts_per_step={size} exceeds the train pool size {self.n_items}")
        out: list[int] = []
        chosen: set[int] = set()
        perm = self._perm(self.epoch)
        while len(out) < size:
            i = int(perm[self.position])
            self.position += 1
            if self.position == self.n_items:
                self.epoch, self.position = self.epoch + 1, 0
                perm = self._perm(self.epoch)
            # At an epoch boundary a prompt may come up twice in one batch: skip the repeat.
            if i not in chosen:
                chosen.add(i)
                out.append(i)
        return np.asarray(out, dtype=np.int64)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "n": self.n_items}

    def load_state_dict(self, state: dict) -> None:
        if state["n"] != self.n_items or state["seed"] != self.seed:
            raise ValueError("sampler state is for a different pool or seed")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
