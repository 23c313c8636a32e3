"""Rollout-GDRO, the compute adversary of GDRO (docs/papers/gdro.md, "Rollout-GDRO").

Every difficulty bin b (DifficultyClassifier, keyed by prompt id) runs its own EXP3P over the
arms n ∈ {n_min, ..., n_max} (paper 2..12). The arm loss is the Lagrangian

    L_b(n) = −Ĵ_b(n) + μ n,     Ĵ_b = −(mean prompt loss of bin b's prompts this step),

and each bin's EXP3P MINIMISES L_b: a bin whose prompts carried a large training loss makes the
arm it played LESS likely next time (maximising Ĵ_b = −loss, the paper's objective), and the
shadow price μ charges for compute. Each step the configuration of maximal joint
probability Π_b P_b(n_b) that spends the budget EXACTLY, Σ_b |B_b| n_b = C, is chosen by a
dynamic programme over bins (``max_joint_probability_config``). Then

    μ ← proj_[0, μ_max](μ + α_μ (n̂ − n̄)),   α_μ = 0.05.

Only −Ĵ_b is bandit feedback; the price μ·n is known for every arm, so by default it is added to
every arm's EXP3P estimate without importance weighting (``mu_cost='all_arms'``). Otherwise
(``'played_arm'``, the literal reading) unplayed arms never feel the price, the bins' demand does
not fall as μ rises and μ runs to μ_max (seen in simulation).

Property of the joint-probability rule (paper's design, kept): each bin counts once in
Σ_b log P_b(n_b) whatever its size, while the budget weighs n_b by |B_b|; with similar bin
distributions the DP therefore prefers to put the larger counts on the larger bins.

Choice of n̂ (the paper's "n̂_realised"): the realised mean count of an exact-budget plan is n̄
by construction, so μ would never move (as in the official code, where the μ update is
unreachable). The default takes n̂ = the bins' mean DEMAND, Σ_b q̂(b) E_{P_b}[n] — what the
bandits would spend unconstrained — so μ rises while they want more than n̄ and falls otherwise,
the textbook dual ascent. ``dual_signal='realised'`` keeps the literal reading.

Loss signal. ``observe(..., prompt_losses=...)`` should receive the per-prompt training loss of
the step (gdro.md: mean over the prompt's rollouts of the token-mean PPO clipped surrogate, plus
β_KL·KL in the paper). Without losses a fallback stands in for −Ĵ: 'nonzero_advantage' (default)
uses −(fraction of the prompt's rollouts whose reward differs from its group mean, i.e. that get
a non-zero group-centred advantage); 'success_variance' uses −p̂(1 − p̂) of the step. The
paper's loss is exactly 0 at ratio 1 for group-centred advantages (docs/fidelity/gdro.md #11),
so in training the bandits see almost nothing but μ·n; ``signal`` (not the paper's) makes one of
the success-based signals the bandits' feedback even when the trainer passes losses
(``allocator.options.signal``).
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
from replication.allocation.exp3p import EXP3P, EXP3PConfig

FALLBACK_SIGNALS = ("nonzero_advantage", "success_variance")
SIGNALS = ("loss", *FALLBACK_SIGNALS)
DUAL_SIGNALS = ("expected", "realised")
MU_COSTS = ("all_arms", "played_arm")


def max_joint_probability_config(
    sizes: np.ndarray, log_probs: np.ndarray, lower: int, budget: int
) -> tuple[np.ndarray, int]:
    """Arms n_b (one per bin) maximising Σ_b log_probs[b, n_b − lower] s.t. Σ_b sizes_b n_b = budget.

    ``log_probs`` has shape (bins, K) for arms lower..lower+K−1. If no configuration meets the
    budget exactly, the reachable total closest to it is used (ties: higher joint probability,
    then the smaller total). Returns (arms, total). Ties between configurations go to the first
    found with smaller arms in later bins; O(bins · K · Σ sizes · K) and vectorised.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    lp = np.asarray(log_probs, dtype=np.float64)
    n_bins, k = lp.shape
    # Work in excess over the all-lower configuration: e = Σ_b sizes_b (n_b − lower).
    target = int(budget) - int(lower) * int(sizes.sum())
    e_max = int(sizes.sum()) * (k - 1)
    value = np.full(e_max + 1, -np.inf)
    value[0] = 0.0
    choices = []
    for b in range(n_bins):
        new = np.full(e_max + 1, -np.inf)
        choice = np.full(e_max + 1, -1, dtype=np.int64)
        for a in range(k):
            shift = int(sizes[b]) * a
            if shift > e_max:
                break
            cand = value[: e_max + 1 - shift] + lp[b, a]
            better = cand > new[shift:]
            new[shift:][better] = cand[better]
            choice[shift:][better] = a
        value = new
        choices.append(choice)
    if 0 <= target <= e_max and np.isfinite(value[target]):
        e = target
    else:
        reach = np.flatnonzero(np.isfinite(value))
        dist = np.abs(reach - target)
        near = reach[dist == dist.min()]
        e = int(near[np.argmax(value[near])])  # argmax keeps the first (smaller) total on ties
    total = e + int(lower) * int(sizes.sum())
    arms = np.zeros(n_bins, dtype=np.int64)
    for b in range(n_bins - 1, -1, -1):
        a = int(choices[b][e])
        arms[b] = a
        e -= int(sizes[b]) * a
    return arms + int(lower), total


def fallback_prompt_loss(counts: np.ndarray, rewards: np.ndarray, kind: str) -> np.ndarray:
    """Stand-in for the per-prompt loss when the trainer passes none (larger = less useful)."""
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    safe = np.maximum(counts, 1).astype(np.float64)
    if kind == "nonzero_advantage":
        mean = np.bincount(owner, weights=rewards, minlength=len(counts)) / safe
        nonzero = ~np.isclose(rewards, mean[owner])
        return -np.bincount(owner, weights=nonzero.astype(np.float64), minlength=len(counts)) / safe
    p = np.bincount(owner, weights=(rewards > 0).astype(np.float64), minlength=len(counts)) / safe
    return -p * (1.0 - p)


@register_allocator("rollout-gdro")
class RolloutGDRO(Allocator):
    """Per-bin EXP3P over rollout counts with an exact-budget joint-argmax plan and dual ascent.

    ``plan(ids, budget)`` takes the step's TOTAL rollouts C = Q·n̄ (paper: n̄ = 4). Call
    ``observe(ids, counts, rewards, prompt_losses=...)`` once per step after the policy update,
    with the per-prompt losses of that update; it credits the bins of the plan, moves μ and only
    then updates ``self.classifier`` with the step's any-correct indicators.
    """

    @dataclasses.dataclass
    class Config(Allocator.Config, DifficultyConfig):
        lower: int = 2
        """n_min, smallest arm (paper: 2)."""
        upper: int = 12
        """n_max, largest arm (paper: 12)."""
        eta: float = 0.65
        """η of each bin's EXP3P (paper: 0.65)."""
        gamma: float = 0.01
        """γ, uniform exploration of each bin's EXP3P (paper: 0.01)."""
        arm_ema: float | None = 0.4
        """λ of the arm-score EMA (paper: 0.4); None = cumulative EXP3 scores."""
        bonus: float = 0.0
        """EXP3.P confidence bonus β (not given in the paper)."""
        mu_lr: float = 0.05
        """α_μ, dual-ascent step on the shadow price (paper: 0.05)."""
        mu_init: float = 0.0
        """Initial shadow price μ (not given in the paper; 0 = compute starts free)."""
        mu_max: float = 1.0
        """Upper end of μ's projection interval [0, μ_max] (the paper's projection set was not
        read); only a guard against runaway: μ·(n_max − n_min) = 10 dwarfs typical losses."""
        mu_cost: str = "all_arms"
        """How the price term μ·n of L_b(n) reaches the bandit. 'all_arms': μ·n is known for
        every arm, so it is added to every arm's estimate without importance weighting (the
        bandit feedback is only −Ĵ_b). 'played_arm': the literal reading — the whole L_b(n) of
        the played arm is importance-weighted; unplayed arms then never feel μ, so the bandits'
        demand does not answer the price (docs/fidelity/gdro.md)."""
        dual_signal: str = "expected"
        """n̂ in the dual step: 'expected' = Σ_b q̂(b) E_{P_b}[n] (the bandits' demand);
        'realised' = the observed mean count (= n̄ under exact plans, so μ stays put, like the
        official code)."""
        bin_loss_ema: float | None = None
        """EMA weight of the new value in a per-bin score of the loss signal fed to the bandit.
        None (paper): the bandit sees this step's bin mean loss and the 0.4 EMA is on the arm
        scores (``arm_ema``). Official code: 0.4 here, the bin score set to the first value it
        sees (S = m on first observation), with ``arm_ema=None`` (undecayed arm-score sums)."""
        fallback_signal: str = "nonzero_advantage"
        """Prompt loss used when observe() gets no prompt_losses: 'nonzero_advantage' =
        −fraction of rollouts with non-zero group-centred advantage; 'success_variance' =
        −p̂(1 − p̂). The paper always has losses."""
        signal: str = "loss"
        """What each bin's bandit minimises besides μ·n. 'loss' (paper): the per-prompt training
        loss the trainer passes to observe() (``fallback_signal`` only when it passes none, as
        the allocation lab does). 'nonzero_advantage' or 'success_variance' (ours, not the
        paper's): that success-based signal (``fallback_signal``'s definitions) even when losses
        are passed — the paper's loss is ≈ 0 by construction (docs/fidelity/gdro.md #11), so
        these are the signals the compute adversary can act on in training."""

    config: Config

    def validate_config(self) -> None:
        super().validate_config()
        cfg = self.config
        classifier_config_from(cfg).validate()
        self._bandit_config().validate()
        for key in ("mu_lr", "mu_init"):
            if not float(getattr(cfg, key)) >= 0:
                raise ValueError(f"{self.name}: {key} must be >= 0, got {getattr(cfg, key)!r}")
        if not float(cfg.mu_max) >= float(cfg.mu_init):
            raise ValueError(f"{self.name}: mu_max must be >= mu_init={cfg.mu_init}, got {cfg.mu_max!r}")
        if cfg.dual_signal not in DUAL_SIGNALS:
            raise ValueError(f"{self.name}: dual_signal must be one of {DUAL_SIGNALS}, got {cfg.dual_signal!r}")
        if cfg.mu_cost not in MU_COSTS:
            raise ValueError(f"{self.name}: mu_cost must be one of {MU_COSTS}, got {cfg.mu_cost!r}")
        if cfg.bin_loss_ema is not None and not 0.0 < float(cfg.bin_loss_ema) <= 1.0:
            raise ValueError(f"{self.name}: bin_loss_ema must be in (0, 1] or None, got {cfg.bin_loss_ema!r}")
        if cfg.signal not in SIGNALS:
            raise ValueError(f"{self.name}: signal must be one of {SIGNALS}, got {cfg.signal!r}")
        if cfg.fallback_signal not in FALLBACK_SIGNALS:
            raise ValueError(
                f"{self.name}: fallback_signal must be one of {FALLBACK_SIGNALS}, got {cfg.fallback_signal!r}"
            )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self.config
        self.arms = np.arange(int(cfg.lower), int(cfg.upper) + 1)
        self.classifier = DifficultyClassifier(classifier_config_from(cfg))
        self.bandits = [
            EXP3P(len(self.arms), self._bandit_config(), seed=self.seed + b) for b in range(int(cfg.n_bins))
        ]
        self.mu = float(cfg.mu_init)
        self.bin_score = np.full(int(cfg.n_bins), np.nan)  # only used with bin_loss_ema

    def _bandit_config(self) -> EXP3PConfig:
        c = self.config
        return EXP3PConfig(eta=c.eta, gamma=c.gamma, ema=c.arm_ema, bonus=c.bonus)

    # ----------------------------------------------------------------- plan
    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        bins = self.classifier.bins(prompt_ids)
        present, inverse, sizes = np.unique(bins, return_inverse=True, return_counts=True)
        # Floor: with γ = 0 a probability can underflow to 0, and −inf would make a feasible
        # total look unreachable to the DP.
        log_p = np.log(np.maximum(np.stack([self.bandits[b].probabilities() for b in present]), 1e-300))
        arms, total = max_joint_probability_config(sizes, log_p, int(self.config.lower), budget)
        counts = arms[inverse].copy()
        if total != budget:
            counts = self._adjust(counts, inverse, arms, log_p, budget)
        self._last_details = {"bin": bins, "mu": np.full(len(prompt_ids), self.mu)}
        return counts

    def _adjust(self, counts, inverse, arms, log_p, budget) -> np.ndarray:
        """Per-prompt ±1 steps when no bin-level configuration meets the budget (e.g. parity:
        every bin size even, odd budget). Prompts move in order of the log-probability their
        bin gives the neighbouring arm (least unlikely deviation first), ties in random order;
        a prompt moves again only if one pass over all prompts was not enough."""
        lo, hi = int(self.config.lower), int(self.config.upper)
        while (d := budget - int(counts.sum())) != 0:
            s = 1 if d > 0 else -1
            target = arms[inverse] + s
            ok = (counts + s >= lo) & (counts + s <= hi)
            in_range = (target >= lo) & (target <= hi)
            lp_next = np.where(in_range, log_p[inverse, np.clip(target - lo, 0, hi - lo)], -np.inf)
            tie = self.rng.permutation(len(counts))
            order = np.lexsort((tie, -lp_next))
            movers = [i for i in order if ok[i]][: abs(d)]
            counts[movers] += s
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
        lo, hi = int(cfg.lower), int(cfg.upper)
        # The classifier has not changed since plan(), so these are the bins the plan used.
        bins = self.classifier.bins(prompt_ids)
        rolled = counts > 0  # a prompt with no rollouts carries no signal this step
        if cfg.signal != "loss":  # a success-based signal chosen over the trainer's loss
            prompt_losses = fallback_prompt_loss(counts, rewards, cfg.signal)
        elif prompt_losses is None:
            prompt_losses = fallback_prompt_loss(counts, rewards, cfg.fallback_signal)
        probs = {int(b): self.bandits[int(b)].probabilities() for b in np.unique(bins)}
        demand = float(np.mean([probs[int(b)] @ self.arms for b in bins]))
        for b in np.unique(bins[rolled]):
            members = rolled & (bins == b)
            # The bin played its planned arm; after a ±1 fallback some prompts hold a neighbour,
            # so the arm is the bin's most common count (ties: smaller), clipped to the arm range.
            values, freq = np.unique(counts[members], return_counts=True)
            arm = int(np.clip(values[np.argmax(freq)], lo, hi))
            loss = float(prompt_losses[members].mean())  # −Ĵ_b
            if cfg.bin_loss_ema is not None:  # official code: EMA on the bin score, S = m at first
                old = self.bin_score[int(b)]
                lam = float(cfg.bin_loss_ema)
                loss = loss if not np.isfinite(old) else (1.0 - lam) * old + lam * loss
                self.bin_score[int(b)] = loss
            prob = float(probs[int(b)][arm - lo])
            if cfg.mu_cost == "all_arms":
                self.bandits[int(b)].update(arm - lo, loss, prob=prob, known=self.mu * self.arms)
            else:
                self.bandits[int(b)].update(arm - lo, loss + self.mu * arm, prob=prob)
        realised = float(counts.sum()) / len(prompt_ids)
        n_hat = demand if cfg.dual_signal == "expected" else realised
        self.mu = float(np.clip(self.mu + float(cfg.mu_lr) * (n_hat - realised), 0.0, float(cfg.mu_max)))
        ids = [pid for pid, r in zip(prompt_ids, rolled) if r]
        self.classifier.update(ids, any_correct(counts, rewards)[rolled])

    # ----------------------------------------------------------------- state
    def _state(self) -> dict[str, Any]:
        return {
            "mu": self.mu,
            "bin_score": [None if not np.isfinite(x) else float(x) for x in self.bin_score],
            "classifier": self.classifier.state_dict(),
            "bandits": [b.state_dict() for b in self.bandits],
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.mu = float(state["mu"])
        if "bin_score" in state:
            self.bin_score = np.array([np.nan if x is None else x for x in state["bin_score"]], dtype=np.float64)
        self.classifier.load_state_dict(state["classifier"])
        if len(state["bandits"]) != len(self.bandits):
            raise ValueError(f"state has {len(state['bandits'])} bin bandits, config has {len(self.bandits)}")
        for bandit, s in zip(self.bandits, state["bandits"]):
            bandit.load_state_dict(s)
