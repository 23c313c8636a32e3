"""EXP3P adversarial bandit over K arms, loss form, as GDRO's Rollout-GDRO uses it per bin.

Each arm a carries a score S_a (an estimate of its loss). The play distribution mixes
exponential weights with uniform exploration (Auer et al. 2002, EXP3/EXP3.P):

    P_a = (1 − γ) · exp(−η S_a) / Σ_j exp(−η S_j) + γ / K.

After arm a_t is played and its loss ℓ_t observed, every arm gets the importance-weighted
estimate ℓ̂_a = (ℓ_t · 1[a = a_t] − β) / P_a (β = EXP3.P's confidence bonus; the GDRO text read
gives none, so β = 0 by default, which is EXP3 with γ-mixing). ℓ̂ is unbiased for the loss of
every arm when a_t ~ P. Scores then either accumulate (S_a += ℓ̂_a, the textbook form) or follow
an EMA (S_a ← (1 − λ) S_a + λ ℓ̂_a for ALL arms, λ = 0.4 in GDRO: "arm-score EMA 0.4"). Applying
the EMA to every arm, the unplayed ones with ℓ̂ = 0, keeps S_a an EMA of unbiased estimates, i.e.
a tracking estimate of arm a's current loss; updating only the played arm would bias it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np


@dataclasses.dataclass
class EXP3PConfig:
    eta: float = 0.65
    """η, learning rate of the exponential weights (GDRO: 0.65)."""
    gamma: float = 0.01
    """γ, uniform-exploration mass mixed into the play distribution (GDRO: 0.01)."""
    ema: float | None = 0.4
    """λ, weight of the new loss estimate in the arm-score EMA (GDRO: 0.4); None = cumulative
    scores (textbook EXP3)."""
    bonus: float = 0.0
    """β, EXP3.P's confidence bonus subtracted from every arm's estimate before dividing by P_a;
    the GDRO text read gives none."""

    def validate(self) -> None:
        if not float(self.eta) > 0:
            raise ValueError(f"eta must be > 0, got {self.eta!r}")
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma!r}")
        if self.ema is not None and not 0.0 < float(self.ema) <= 1.0:
            raise ValueError(f"ema must be in (0, 1] or None, got {self.ema!r}")
        if not float(self.bonus) >= 0:
            raise ValueError(f"bonus must be >= 0, got {self.bonus!r}")


class EXP3P:
    """Loss-based EXP3P over ``n_arms`` arms (arm indices 0..K-1), seeded and serialisable."""

    def __init__(self, n_arms: int, config: EXP3PConfig | None = None, *, seed: int = 0, **options: Any):
        if isinstance(n_arms, bool) or int(n_arms) != n_arms or n_arms < 1:
            raise ValueError(f"n_arms must be an integer >= 1, got {n_arms!r}")
        if config is None:
            config = EXP3PConfig(**options)
        elif options:
            raise ValueError("pass either config= or keyword options, not both")
        config.validate()
        self.config = config
        self.n_arms = int(n_arms)
        self.scores = np.zeros(self.n_arms)
        self.steps = 0
        self.rng = np.random.default_rng(seed)

    def probabilities(self) -> np.ndarray:
        eta, gamma, k = float(self.config.eta), float(self.config.gamma), self.n_arms
        z = -eta * self.scores
        w = np.exp(z - z.max())  # shift: scores can be large after importance weighting
        return (1.0 - gamma) * w / w.sum() + gamma / k

    def sample(self) -> int:
        return int(self.rng.choice(self.n_arms, p=self.probabilities()))

    def update(
        self, arm: int, loss: float, prob: float | None = None, known: np.ndarray | None = None
    ) -> None:
        """Learn from playing ``arm`` with observed ``loss``.

        ``prob`` is the probability the arm had when it was chosen; by default the current one
        (correct whenever nothing else updated the bandit in between). ``known`` is an optional
        per-arm loss component that is known for EVERY arm (full information, e.g. a price
        μ·n): it is added to each arm's estimate as is, not importance-weighted, which keeps the
        estimate unbiased and removes that component's variance.
        """
        if isinstance(arm, bool) or int(arm) != arm or not 0 <= arm < self.n_arms:
            raise ValueError(f"arm must be an integer in [0, {self.n_arms - 1}], got {arm!r}")
        if not np.isfinite(loss):
            raise ValueError(f"loss must be finite, got {loss!r}")
        p = self.probabilities()
        if prob is not None:
            p[arm] = float(prob)
        played = np.zeros(self.n_arms)
        played[int(arm)] = float(loss)
        est = (played - float(self.config.bonus)) / p
        if known is not None:
            extra = np.asarray(known, dtype=np.float64).reshape(-1)
            if extra.shape != (self.n_arms,) or not np.all(np.isfinite(extra)):
                raise ValueError(f"known must be {self.n_arms} finite per-arm values")
            est = est + extra
        lam = self.config.ema
        if lam is None:
            self.scores = self.scores + est
        else:
            self.scores = (1.0 - float(lam)) * self.scores + float(lam) * est
        self.steps += 1

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "n_arms": self.n_arms,
            "config": dataclasses.asdict(self.config),
            "scores": self.scores.tolist(),
            "steps": self.steps,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["n_arms"]) != self.n_arms:
            raise ValueError(f"state has {state['n_arms']} arms, this bandit has {self.n_arms}")
        if dict(state["config"]) != dataclasses.asdict(self.config):
            raise ValueError("bandit state was saved under a different EXP3PConfig")
        self.scores = np.asarray(state["scores"], dtype=np.float64).copy()
        self.steps = int(state["steps"])
        self.rng.bit_generator.state = state["rng"]
