"""Prompt-GDRO, the data adversary of GDRO: per-bin advantage weights (docs/papers/gdro.md,
"Prompt-GDRO").

Not an allocator: it re-weights the advantages of the rollouts the allocator already produced
(compute-neutral, no resampling). Per step t, over the B difficulty bins:

    ℓ̄_t(b)  mean prompt loss of the batch's prompts in bin b,  q̂_t(b) = |B_b| / |B|
    S_b     ← (1 − β) S_b + β · ℓ̄_t(b) [/ max(q̂_t(b), floor)]     (bins present in the batch)
    ω_b     = exp(η · clip(S_b, −C, C))
    q_b     = (1 − γ) ω_b / Σ_j ω_j + γ / B
    A_ij    ← A_ij · w_i   with  w_i = min(ω_b(i), ω_max)            (paper, default)
                          or  w_i = min(q_b(i) · R / Σ_k n_k q_b(k), ω_max)   (official code)

where R = Σ_k n_k is the number of rollout rows, so the code's weights have mean 1 over ROWS
(prompts with more rollouts count more).

Theory. Exponential weights are entropic mirror ascent for the adversary of the soft
worst-group objective  R_η(L) = (1/η) log Σ_b exp(η L_b):  its gradient in L is the softmax
distribution ∝ exp(η L_b), i.e. the adversary's q without the γ mixing, and mirror ascent with
the negative-entropy mirror map on the simplex gives exactly the multiplicative update
q_b ∝ q_b exp(η ·gain_b). R_η is a smooth upper bound on the worst group:
max_b L_b ≤ R_η ≤ max_b L_b + log(B)/η (the sum holds the max term and at most B terms of that
size), so large η approaches group DRO and small η approaches the average loss (uniform q).
``soft_worst_group`` computes R_η.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from replication.allocation.base import PROMPT_WEIGHTS

WEIGHT_MODES = ("omega", "q_mean1")


def soft_worst_group(losses: Sequence[float], eta: float) -> float:
    """R_η = (1/η) log Σ_b exp(η L_b), computed stably."""
    x = np.asarray(losses, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("soft_worst_group needs at least one group loss")
    if not eta > 0:
        raise ValueError(f"eta must be > 0, got {eta!r}")
    m = float(x.max())
    return m + math.log(float(np.exp(eta * (x - m)).sum())) / eta


@dataclasses.dataclass
class PromptGDROConfig:
    n_bins: int = 10
    """B, number of difficulty bins (paper: 10; must match the classifier's)."""
    beta: float = 0.12
    """β, EMA weight of the new bin mean loss in the score S_b (paper: 0.12)."""
    eta: float = 0.65
    """η, exponential-weights rate: ω_b = exp(η · clip(S_b)) (paper: 0.65)."""
    gamma: float = 0.01
    """γ, uniform mixing of the distribution q (paper: 0.01)."""
    clip: float | None = None
    """C, scores are clipped to [−C, C] before exponentiation. Not given in the paper; None =
    ln(ω_max)/η (≈ 4.17 at the defaults), so ω ∈ [1/ω_max, ω_max] and the cap never cuts ω."""
    omega_max: float = 15.0
    """ω_max, cap of a per-prompt weight (paper and code: 15)."""
    debias: bool = True
    """Divide the bin mean loss by the realised share max(q̂_t(b), floor) — the paper's
    "optional" normalisation (EMA-debiased GDRO), which its reported runs used (gdro.md), hence
    on by default; ``debias=False`` is plain class GDRO."""
    share_floor: float = 0.05
    """Floor of the realised share under ``debias`` (not given in the paper; 0.05 = half the
    uniform share of 10 bins), so a bin with one prompt cannot multiply its loss by |B|."""
    clip_scores: bool = True
    """Clip S_b to [−C, C] before exponentiation (paper). Official code: False (no clip)."""
    exploration: str = "all_bins"
    """Uniform mixing of q: 'all_bins' = γ/B (paper); 'present_bins' = γ/|bins present in the
    batch| on those bins only (official code). Only q (``mode='q_mean1'``) uses it."""
    first_score: str = "ema"
    """'ema': S_b starts at 0 and every observation is an EMA step (paper's formula);
    'first_value': S_b = the first observed (debiased) bin loss, EMA afterwards (official code)."""
    mode: str = "omega"
    """'omega': w_i = min(ω_b(i), ω_max), unnormalised (paper). 'q_mean1': q rescaled to mean 1
    over the batch's rollout rows, then capped (official code)."""
    focus_map: dict[int, float] | None = None
    """Official code only (``passk_focus_map`` of its ``hardf``/``softf`` run cases; not in the
    paper): a hand-set multiplier per bin; in ``q_mean1`` mode applied to q before the mean-1
    rescale, as the code does (``omega`` mode: after the cap). It is where the code's scripts get
    weights that depart from uniform at all, since the loss signal is ≈ 0 by construction
    (docs/fidelity/gdro.md #11, #11a). E.g. hardf's {0: 0.0, 6: 0.0} over its 7 bins drops the
    pass rates < 0.1 and ≥ 0.9 once ramped in. None = off (paper)."""
    focus_warmup_steps: int = 0
    """Steps (observed updates) before the focus map acts (code's hardf/softf: 50 of its
    script's 500)."""
    focus_ramp_steps: int = 0
    """Steps over which the focus multiplier moves linearly from 1 to its target after the
    warm-up; 0 = at once (code's hardf/softf: 200 of its script's 500 steps)."""
    classifier: dict | None = None
    """Options of the DifficultyClassifier (difficulty.py) that bins the prompts for these
    weights when the allocator keeps none; None = the paper's classifier. Its ``n_bins`` (all
    classes, an excluded class included) must equal ``n_bins`` here. Official code: its run
    case's ``passk_*`` options (docs/fidelity/gdro.md #11a)."""

    def __post_init__(self) -> None:
        if self.focus_map is not None:
            if not isinstance(self.focus_map, Mapping):
                raise ValueError(f"focus_map must be a mapping bin -> multiplier, got {self.focus_map!r}")
            try:
                self.focus_map = {int(k): float(v) for k, v in self.focus_map.items()}
            except (TypeError, ValueError):
                raise ValueError(f"focus_map must map integer bins to numbers, got {self.focus_map!r}") from None
        self.validate()

    def validate(self) -> None:
        if isinstance(self.n_bins, bool) or int(self.n_bins) != self.n_bins or self.n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {self.n_bins!r}")
        if not 0.0 < float(self.beta) <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {self.beta!r}")
        if not float(self.eta) > 0:
            raise ValueError(f"eta must be > 0, got {self.eta!r}")
        if not 0.0 <= float(self.gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma!r}")
        if self.clip is not None and not float(self.clip) > 0:
            raise ValueError(f"clip must be > 0 or None, got {self.clip!r}")
        if not float(self.omega_max) > 0:
            raise ValueError(f"omega_max must be > 0, got {self.omega_max!r}")
        if not 0.0 < float(self.share_floor) <= 1.0:
            raise ValueError(f"share_floor must be in (0, 1], got {self.share_floor!r}")
        if self.exploration not in ("all_bins", "present_bins"):
            raise ValueError(f"exploration must be 'all_bins' or 'present_bins', got {self.exploration!r}")
        if self.first_score not in ("ema", "first_value"):
            raise ValueError(f"first_score must be 'ema' or 'first_value', got {self.first_score!r}")
        if self.mode not in WEIGHT_MODES:
            raise ValueError(f"mode must be one of {WEIGHT_MODES}, got {self.mode!r}")
        for name in ("focus_warmup_steps", "focus_ramp_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        if self.classifier is not None:
            if not isinstance(self.classifier, Mapping):
                raise ValueError(f"classifier must be a mapping of DifficultyConfig options, got {self.classifier!r}")
            from replication.allocation.difficulty import DifficultyConfig

            try:
                clf = DifficultyConfig(**self.classifier)
            except TypeError as e:
                raise ValueError(f"classifier: {e}") from None
            clf.validate()
            if int(clf.n_bins) != int(self.n_bins):
                raise ValueError(f"classifier.n_bins = {clf.n_bins} but n_bins = {self.n_bins}: the weights need one score per class")
        for b, m in (self.focus_map or {}).items():
            if not 0 <= b < int(self.n_bins):
                raise ValueError(f"focus_map bin {b} is outside [0, {int(self.n_bins) - 1}]")
            if not (math.isfinite(m) and m >= 0):
                raise ValueError(f"focus_map multiplier of bin {b} must be finite and >= 0, got {m!r}")


@PROMPT_WEIGHTS.register("gdro")
class PromptGDRO:
    """EMA-debiased GDRO-EXP3P prompt weighter over difficulty bins."""

    Config = PromptGDROConfig

    def __init__(self, config: PromptGDROConfig | None = None, **options: Any) -> None:
        if config is None:
            config = PromptGDROConfig(**options)
        elif options:
            raise ValueError("pass either config= or keyword options, not both")
        config.validate()
        self.config = config
        self.n_bins = int(config.n_bins)
        self.scores = np.zeros(self.n_bins)
        self.steps = 0
        self.observed = np.zeros(self.n_bins, dtype=bool)
        self._last_mass = np.full(self.n_bins, np.nan)

    @property
    def clip_value(self) -> float:
        c = self.config.clip
        return math.log(float(self.config.omega_max)) / float(self.config.eta) if c is None else float(c)

    def omega(self) -> np.ndarray:
        """ω_b = exp(η · clip(S_b, −C, C)) per bin (uncapped)."""
        c = self.clip_value
        s = np.clip(self.scores, -c, c) if self.config.clip_scores else self.scores
        return np.exp(float(self.config.eta) * s)

    def distribution(self, present: np.ndarray | None = None) -> np.ndarray:
        """q_b = (1 − γ) ω_b / Σ ω + γ / B; with ``exploration='present_bins'`` and a boolean
        ``present`` mask, the γ mass is split over the present bins only (official code)."""
        w = self.omega()
        g = float(self.config.gamma)
        if self.config.exploration == "present_bins" and present is not None and present.any():
            return (1.0 - g) * w / w.sum() + g * present / present.sum()
        return (1.0 - g) * w / w.sum() + g / self.n_bins

    # ----------------------------------------------------------------- weights
    def weights(
        self, prompt_ids: Sequence[Hashable], bins: Sequence[int], counts: Sequence[int]
    ) -> np.ndarray:
        """Per-prompt advantage multipliers (every rollout row of prompt i gets w_i)."""
        ids, b, n = self._check(prompt_ids, bins, counts)
        cap = float(self.config.omega_max)
        if self.config.mode == "omega":
            w = np.minimum(self.omega()[b], cap)
            w = w * self.focus()[b]
        else:
            # The code applies the focus multiplier inside compute_weights, BEFORE the mean-1
            # rescale (ray_trainer.py: w_vec * n/s, skipped when s = 0), so masked rows hand their
            # mass to the others; when every row is masked all weights stay 0.
            q = self.distribution(np.bincount(b, minlength=self.n_bins) > 0)[b] * self.focus()[b]
            rows = float(n.sum())
            if rows <= 0:
                raise ValueError("q_mean1 mode needs at least one rollout row (counts sum to 0)")
            mass = float((n * q).sum())
            w = np.minimum(q * rows / mass, cap) if mass > 0 else q
        mass = np.bincount(b, weights=w * n, minlength=self.n_bins)
        total = mass.sum()
        self._last_mass = mass / total if total > 0 else np.full(self.n_bins, np.nan)
        return w

    def focus(self) -> np.ndarray:
        """Per-bin multiplier of the official code's focus schedule at the current step (all 1
        without ``focus_map``): 1 up to ``focus_warmup_steps`` observed steps, then linear to the
        target over ``focus_ramp_steps``."""
        scale = np.ones(self.n_bins)
        cfg = self.config
        if not cfg.focus_map or self.steps <= int(cfg.focus_warmup_steps):
            return scale
        ramp = int(cfg.focus_ramp_steps)
        t = 1.0 if ramp == 0 else min(1.0, (self.steps - int(cfg.focus_warmup_steps)) / ramp)
        for b, target in cfg.focus_map.items():
            scale[b] = 1.0 + t * (target - 1.0)
        return scale

    def bin_mass(self) -> np.ndarray:
        """Share of the total advantage-weight mass (Σ over rows of w) per bin in the last
        ``weights`` call; NaN before the first call."""
        return self._last_mass.copy()

    # ----------------------------------------------------------------- learning
    def bin_means(self, prompt_ids: Sequence[Hashable], bins: Sequence[int],
                  prompt_losses: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        """(ℓ̄_t(b) per bin — divided by max(q̂_t(b), floor) under ``debias`` —, present mask):
        the value one step's losses feed into the bin scores; 0 for bins absent from the batch."""
        ids, b, _ = self._check(prompt_ids, bins, None)
        losses = np.asarray(prompt_losses, dtype=np.float64).reshape(-1)
        if losses.shape[0] != len(ids):
            raise ValueError(f"prompt_losses has {losses.shape[0]} entries for {len(ids)} prompt ids")
        if not np.all(np.isfinite(losses)):
            raise ValueError("prompt_losses contains a non-finite value")
        size = np.bincount(b, minlength=self.n_bins).astype(np.float64)
        present = size > 0
        mean_loss = np.zeros(self.n_bins)
        mean_loss[present] = np.bincount(b, weights=losses, minlength=self.n_bins)[present] / size[present]
        if self.config.debias:
            share = size / len(ids)
            mean_loss[present] /= np.maximum(share[present], float(self.config.share_floor))
        return mean_loss, present

    def observe(self, prompt_ids: Sequence[Hashable], bins: Sequence[int], prompt_losses: Sequence[float]) -> None:
        """Update the bin scores from one step's per-prompt losses (bins as used for weights)."""
        mean_loss, present = self.bin_means(prompt_ids, bins, prompt_losses)
        beta = float(self.config.beta)
        # Bins absent from the batch carry no evidence this step: their score is left alone.
        self.scores[present] = (1.0 - beta) * self.scores[present] + beta * mean_loss[present]
        if self.config.first_score == "first_value":
            first = present & ~self.observed
            self.scores[first] = mean_loss[first]
        self.observed |= present
        self.steps += 1

    def _check(self, prompt_ids, bins, counts):
        ids = list(prompt_ids)
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate prompt id in one batch; ids must be unique per step")
        b = np.asarray(bins).reshape(-1)
        if b.shape[0] != len(ids):
            raise ValueError(f"bins has {b.shape[0]} entries for {len(ids)} prompt ids")
        if b.size and (not np.issubdtype(b.dtype, np.integer) or b.min() < 0 or b.max() >= self.n_bins):
            raise ValueError(f"bins must be integers in [0, {self.n_bins - 1}]")
        b = b.astype(np.int64)
        n = None
        if counts is not None:
            n = np.asarray(counts).reshape(-1)
            if n.shape[0] != len(ids):
                raise ValueError(f"counts has {n.shape[0]} entries for {len(ids)} prompt ids")
            if np.any(n < 0):
                raise ValueError("counts must be >= 0")
            n = n.astype(np.float64)
        return ids, b, n

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "config": dataclasses.asdict(self.config),
            "scores": self.scores.tolist(),
            "steps": self.steps,
            "observed": self.observed.tolist(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if dataclasses.asdict(PromptGDROConfig(**state["config"])) != dataclasses.asdict(self.config):
            raise ValueError("PromptGDRO state was saved under a different PromptGDROConfig")
        self.scores = np.asarray(state["scores"], dtype=np.float64).copy()
        self.steps = int(state["steps"])
        self.observed = np.asarray(state.get("observed", self.scores != 0), dtype=bool)
