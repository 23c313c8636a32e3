"""DynaMO's Dynamic Rollout Allocation (DRA): more rollouts to prompts whose rewards vary.

Paper: arXiv 2602.19208 (docs/papers/dynamo.md); official code GithubX-F/DynaMO-RL
(recipe/dynamo). Every prompt id keeps its cumulative history (G_i rollouts, k_i successes);
P_i = k_i (G_i - k_i) / (G_i (G_i - 1)) is the unbiased Bernoulli variance. The README calls
P_i "a proxy for sigma_i", so n_i ∝ P_i (as the official code allocates) is the default; the
Neyman reading of P_i as a variance, n_i ∝ sqrt(P_i), is ``proxy_power=0.5``. Bounded to
[G_min, G_max] the rule is a water level.

The defaults follow the paper; ``OFFICIAL_CODE_OPTIONS`` reproduces the official code
(priority ∝ P, floor-then-proportional split, mastery cut-off, epoch-wise refresh, uniform
first epoch). docs/fidelity/dynamo_allocation.md lists every difference.

Usage:  make_allocator("dynamo", lower=8, upper=24)  or  make_allocator("dynamo", **OFFICIAL_CODE_OPTIONS)
With ``refresh="epoch"`` or ``uniform_first_epoch`` the trainer calls ``end_epoch()`` after each
pass over the pool (or sets ``refresh_every`` to the number of steps per epoch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from replication.allocation.base import Allocator, register_allocator, successes_per_prompt
from replication.allocation.solvers import even_split
from replication.allocation.variance import bernoulli_variance
from replication.allocation.water_level import round_to_budget, water_level_allocation

RULES = ("water_level", "floor_proportional")
PROXIES = ("unbiased", "official", "recipe")
REFRESH = ("step", "epoch")
UNSEEN = ("optimistic", "batch_max", "zero")

OFFICIAL_MIN_HISTORY = 4
"""verl/utils/dataset/rl_dataset.py::update_rank: a prompt with G < initial_budget = 4 rollouts
gets priority −1, which the split treats as 0 (never eligible for extra rollouts)."""

# Largest value each proxy takes for a Bernoulli reward (p = 1/2, infinite history): the
# optimistic prior of a prompt with no usable history. 1.0 is also the official code's
# priority for never-sampled prompts.
PROXY_MAX = {"unbiased": 0.25, "official": 0.25, "recipe": 1.0}

OFFICIAL_CODE_OPTIONS: dict[str, Any] = {
    "lower": 8,
    "upper": 24,
    "proxy": "official",
    "unseen": "zero",
    "proxy_power": 1.0,
    "rule": "floor_proportional",
    "priority_floor": 0.01,
    "mastery_threshold": 0.85,
    "initial_budget": 4,
    "refresh": "epoch",
    "uniform_first_epoch": True,
}
"""Options reproducing GithubX-F/DynaMO-RL as it trains (run_qwen2.5-math-7b.sh: n_low 8,
n_high 24; priorities from verl/utils/dataset/rl_dataset.py::update_rank)."""


def floor_proportional_allocation(
    weights, budget: int, lower: int, upper: int, *, history=None, initial_budget: int = 0
) -> np.ndarray:
    """The official code's split (get_rollout_n_per_prompt), re-implemented with fixed ties.

    1. Exploration (only if ``initial_budget`` > 0 and ``history`` given): a prompt with fewer
       than ib = max(lower, initial_budget) past rollouts gets ib - history (at least lower).
       If that overshoots the budget the extras are scaled down (largest remainder).
    2. Everyone else gets ``lower``.
    3. Rounds: the remaining budget is split ∝ weight over prompts below ``upper`` with
       weight > 1e-8, floored, the leftover units one each to the largest fractional parts
       (ties: lowest index; the official argsort is not stable), capped at ``upper``; repeat
       until nothing is left. If no prompt is eligible the rest goes round-robin in index order
       to prompts below ``upper`` (the official round-robin can overshoot n_high; this cannot).
    """
    w = np.asarray(weights, dtype=np.float64)
    q = w.size
    counts = np.full(q, lower, dtype=np.int64)
    if initial_budget > 0 and history is not None:
        ib = max(lower, int(initial_budget))
        hist = np.asarray(history, dtype=np.int64)
        counts = np.maximum(lower, np.minimum(ib - hist, upper))
        if counts.sum() > budget:
            extra = (counts - lower).astype(np.float64)
            scaled = lower + extra * (budget - q * lower) / extra.sum()
            counts = round_to_budget(scaled, budget, lower, upper)
    remaining = budget - int(counts.sum())
    while remaining > 0:
        elig = np.flatnonzero((counts < upper) & (w > 1e-8))
        if elig.size == 0:
            while remaining > 0:
                below = np.flatnonzero(counts < upper)[:remaining]
                counts[below] += 1
                remaining -= below.size
            break
        ideal = remaining * w[elig] / w[elig].sum()
        add = np.floor(ideal).astype(np.int64)
        left = remaining - int(add.sum())
        if left > 0:
            order = np.lexsort((np.arange(elig.size), -(ideal - add)))
            add[order[:left]] += 1
        add = np.minimum(add, upper - counts[elig])
        counts[elig] += add
        remaining -= int(add.sum())
    return counts


def _key(pid: Hashable) -> Hashable:
    # numpy scalars hash like Python ones; storing the Python value keeps the state JSON-safe.
    return pid.item() if isinstance(pid, np.generic) else pid


@register_allocator("dynamo")
class DynamoDRA(Allocator):
    """DynaMO Dynamic Rollout Allocation over per-id cumulative Bernoulli statistics."""

    @dataclasses.dataclass
    class Config(Allocator.Config):
        lower: int = 8
        """G_min: fewest rollouts per prompt (official code n_low = 8)."""
        upper: int = 24
        """G_max: most rollouts per prompt (official code n_high = 24)."""
        proxy: str = "unbiased"
        """Variance proxy: "unbiased" P = k(G-k)/(G(G-1)) (DynaMO README); "official" = the
        file the official trainer uses (verl/utils/dataset/rl_dataset.py::update_rank): the same
        P plus a (1 − acc)·1e-6 tie-break, only for prompts with G >= 4 (fewer: priority −1,
        i.e. 0 — pair with ``unseen="zero"``); "recipe" = 4 acc (1 − acc), acc = k/G, of
        recipe/dynamo/rl_dataset.py, which the official trainer does NOT use."""
        proxy_power: float = 1.0
        """sigma = priority ** proxy_power. 1.0: n ∝ P — the README calls P "a proxy for σ" and
        the official code allocates ∝ P (default). 0.5: n ∝ sqrt(P), the Neyman optimum if P is
        read as a variance (our earlier reading, an option)."""
        rule: str = "water_level"
        """"water_level": n = clip(c sigma, lower, upper) (the KKT solution of the paper's
        objective); "floor_proportional": lower each, the rest ∝ sigma capped at upper
        (official code)."""
        priority_floor: float = 0.0
        """priority = max(proxy, floor). Paper: none (0.0); official code: 0.01."""
        mastery_threshold: float | None = None
        """If set, prompts with accuracy k/G >= threshold get the floor priority (official
        code: 0.85). None (paper): off."""
        unseen: str = "optimistic"
        """Prompts with no usable history (G < 2 for "unbiased", G = 0 for "official"):
        "optimistic" = the proxy's largest value (0.25 / 1.0, sigma = 0.5 / 1.0 at the default
        powers; official code: 1.0), "batch_max" = the largest proxy among this batch's seen
        prompts (optimistic prior if none)."""
        initial_budget: int = 0
        """floor_proportional only: prompts with fewer than max(lower, this) past rollouts are
        first topped up to it (official code: 4; a no-op when lower >= 4). 0: off."""
        refresh: str = "step"
        """"step": observations count from the next plan; "epoch": they are buffered and
        become visible at end_epoch() (official code refreshes priorities once per epoch)."""
        refresh_every: int = 0
        """Call end_epoch() automatically after this many observe() calls (0: only when the
        trainer calls it)."""
        uniform_first_epoch: bool = False
        """Plan uniformly until the first end_epoch() (official code's first epoch)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._visible: dict[Hashable, tuple[int, int]] = {}
        self._pending: dict[Hashable, tuple[int, int]] = {}
        self.epoch = 0
        self._observe_calls = 0

    def validate_config(self) -> None:
        super().validate_config()
        c = self.config
        for field, allowed in (("rule", RULES), ("proxy", PROXIES), ("refresh", REFRESH), ("unseen", UNSEEN)):
            if getattr(c, field) not in allowed:
                raise ValueError(f"dynamo: {field}={getattr(c, field)!r}; allowed: {list(allowed)}")
        if not (np.isfinite(c.proxy_power) and c.proxy_power > 0):
            raise ValueError(f"dynamo: proxy_power must be > 0, got {c.proxy_power}")
        if not (np.isfinite(c.priority_floor) and c.priority_floor >= 0):
            raise ValueError(f"dynamo: priority_floor must be >= 0, got {c.priority_floor}")
        if c.mastery_threshold is not None and not 0 < c.mastery_threshold <= 1:
            raise ValueError(f"dynamo: mastery_threshold must be in (0, 1] or None, got {c.mastery_threshold}")
        for field in ("initial_budget", "refresh_every"):
            value = getattr(c, field)
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"dynamo: {field} must be an integer >= 0, got {value!r}")

    # ------------------------------------------------------------------ statistics

    def end_epoch(self) -> None:
        """Publish buffered observations (refresh="epoch") and advance the epoch counter."""
        for pid, (g, k) in self._pending.items():
            g0, k0 = self._visible.get(pid, (0, 0))
            self._visible[pid] = (g0 + g, k0 + k)
        self._pending = {}
        self.epoch += 1

    def history(self, prompt_ids) -> tuple[np.ndarray, np.ndarray]:
        """Visible cumulative (rollouts G, successes k) per id; zeros for unseen ids."""
        stats = [self._visible.get(_key(pid), (0, 0)) for pid in prompt_ids]
        arr = np.array(stats, dtype=np.int64).reshape(-1, 2)
        return arr[:, 0], arr[:, 1]

    def priorities(self, prompt_ids) -> dict[str, np.ndarray]:
        """Proxy, priority and sigma per prompt from the visible statistics."""
        c = self.config
        g, k = self.history(prompt_ids)
        if c.proxy == "unbiased":
            seen = g >= 2
            proxy = bernoulli_variance(k, g)
        elif c.proxy == "official":
            seen = g >= OFFICIAL_MIN_HISTORY
            acc = np.divide(k, g, out=np.zeros(g.size), where=g > 0)
            proxy = np.where(seen, bernoulli_variance(k, g) + (1.0 - acc) * 1e-6, 0.0)
        else:
            seen = g >= 1
            acc = np.divide(k, g, out=np.zeros(g.size), where=seen)
            proxy = 4.0 * acc * (1.0 - acc)
        prior = 0.0 if c.unseen == "zero" else PROXY_MAX[c.proxy]
        if c.unseen == "batch_max" and seen.any():
            prior = float(proxy[seen].max())
        proxy = np.where(seen, proxy, prior)
        priority = np.where(seen, np.maximum(proxy, c.priority_floor),
                            prior if c.unseen == "zero" else np.maximum(prior, c.priority_floor))
        if c.mastery_threshold is not None:
            acc = np.divide(k, g, out=np.zeros(g.size), where=g > 0)
            priority = np.where(seen & (acc >= c.mastery_threshold), c.priority_floor, priority)
        return {
            "variance_proxy": proxy,
            "priority": priority,
            "sigma": priority**c.proxy_power,
            "seen": seen,
            "rollouts_seen": g,
            "successes_seen": k,
        }

    # ------------------------------------------------------------------ allocator hooks

    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        c = self.config
        details = self.priorities(prompt_ids)
        if c.uniform_first_epoch and self.epoch == 0:
            counts = even_split(len(prompt_ids), budget)
        elif c.rule == "water_level":
            counts = water_level_allocation(details["sigma"], budget, c.lower, c.upper)
        else:
            counts = floor_proportional_allocation(
                details["sigma"], budget, c.lower, c.upper,
                history=details["rollouts_seen"], initial_budget=c.initial_budget,
            )
        self._last_details = details
        return counts

    def _observe(self, prompt_ids, counts, rewards, prompt_losses) -> None:
        successes = successes_per_prompt(counts, rewards)
        target = self._visible if self.config.refresh == "step" else self._pending
        for pid, n, s in zip(prompt_ids, counts.tolist(), successes.tolist()):
            if n > 0:
                g0, k0 = target.get(_key(pid), (0, 0))
                target[_key(pid)] = (g0 + n, k0 + s)
        self._observe_calls += 1
        if self.config.refresh_every and self._observe_calls % self.config.refresh_every == 0:
            self.end_epoch()

    def _state(self) -> dict[str, Any]:
        def table(d: dict) -> dict[str, list]:
            return {
                "ids": list(d),
                "rollouts": [int(g) for g, _ in d.values()],
                "successes": [int(k) for _, k in d.values()],
            }

        return {
            "visible": table(self._visible),
            "pending": table(self._pending),
            "epoch": self.epoch,
            "observe_calls": self._observe_calls,
        }

    def _load_state(self, state: Mapping[str, Any]) -> None:
        def untable(t: Mapping[str, list]) -> dict:
            if not len(t["ids"]) == len(t["rollouts"]) == len(t["successes"]):
                raise ValueError("dynamo state: ids, rollouts and successes differ in length")
            return {_key(i): (int(g), int(k)) for i, g, k in zip(t["ids"], t["rollouts"], t["successes"])}

        self._visible = untable(state["visible"])
        self._pending = untable(state["pending"])
        self.epoch = int(state["epoch"])
        self._observe_calls = int(state["observe_calls"])
