"""VIP — Variance-Informed Predictive rollout allocation (arXiv 2602.01601), and its ablations.

Each step: predict every batch prompt's success probability p_q (a recursive GP over prompt
embeddings), then choose integer counts minimising the summed gradient variance

    minimise Σ_q a_q f(n_q)   s.t.  Σ n_q = C,  L ≤ n_q ≤ U,   a_q = p_q(1 − p_q)

with f(n) = (n−1)/n² (Dr. GRPO) or 1/(n−1) (RLOO), solved exactly (solvers.solve_integer).
After the rollouts, ``observe`` feeds the successes back to the predictor.

Registered allocators
- ``vip``: GP + variance objective (the paper's method).
- ``vip-inverse-accuracy``: GP + minimise Σ n log p (paper Table 3 ablation).
- ``vip-inverse-variance``: GP + minimise Σ n log(p(1−p)) (ablation).
- ``vip-ridge``: ridge-regression predictor + VIP allocation (ablation).
- ``oracle``: the true p from a callable or mapping + VIP allocation (simulation studies).

Defaults follow the paper (where it is silent — GP noise σ_n², the clip ε — ours, explained in
the fidelity doc); ``official_code_options(estimator)`` gives the official code's settings.
docs/fidelity/vip.md lists every difference and which option selects the other side.

Usage: ``make_allocator("vip", pool=PromptPool(ids, texts), estimator="rloo", lower=4, upper=32)``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import Any, ClassVar

import numpy as np

from replication.allocation.base import Allocator, check_feasible, register_allocator, successes_per_prompt
from replication.allocation.predictors import PREDICTORS, make_predictor
from replication.allocation.solvers import even_split, solve_integer
from replication.allocation.variance import get_variance_estimator

ESTIMATORS = ("drgrpo", "rloo", "grpo")
GP_FIELDS = ("bandwidth", "prior_mean", "noise", "jitter", "clip_eps", "set_observed_to_target", "covariance",
             "median_subsample")


def official_code_options(estimator: str = "rloo") -> dict[str, Any]:
    """Options reproducing the official code (HieuNT91/VIP) where it departs from the paper.

    Tilt γ: 7e-4 for RLOO, 4e-4 for its "grpo" (which runs without std normalisation, i.e. our
    "drgrpo"). The README warm-starts VIP from step 15 of a uniform run: ``warmup_steps=15``.
    """
    if estimator not in ("rloo", "drgrpo"):
        raise ValueError(f"the official code has rloo and (Dr.)GRPO arms only, got {estimator!r}")
    return {
        "estimator": estimator,
        "lower": 4,
        "upper": 32,
        "bandwidth": 0.4,
        "prior_mean": -5.0,
        "noise": 0.0,
        "jitter": 1e-4,
        "clip_eps": 1e-6,
        "set_observed_to_target": True,
        "covariance": "reset",
        "tilt_gamma": 7e-4 if estimator == "rloo" else 4e-4,
        "warmup_steps": 15,
    }


@dataclasses.dataclass
class VIPConfig(Allocator.Config):
    lower: int = 4
    """L, fewest rollouts per prompt. Paper code: 4. Dr. GRPO needs L ≥ 3 (f convex only there)."""
    upper: int = 32
    """U, most rollouts per prompt. Paper code: 16 (n̄ = 8) or 32."""
    estimator: str = "rloo"
    """Advantage estimator whose variance is minimised: "rloo" or "drgrpo" (paper), or "grpo"
    (EXTENSION, not in the paper: unbiased-std GRPO, (n−1)/n²·(1−pⁿ−(1−p)ⁿ); non-convex, solved
    exactly by dynamic programming). The official code's "grpo" arm is our "drgrpo"."""
    predictor: str = "gp"
    """Success predictor: "gp" (paper), "ridge" (ablation), "moving-average" (baseline)."""
    predictor_options: dict = dataclasses.field(default_factory=dict)
    """Options of the predictor beyond the GP fields below, e.g. {"alpha": 1.0} for ridge,
    {"ema": 0.5} for moving-average, {"dtype": "float64"} for the GP (see predictors.py, gp.py)."""
    embedder: str = "hashed-tfidf"
    """Embedder used when the pool has no embeddings. Paper: all-MiniLM-L6-v2, i.e.
    "sentence-transformers" with embedder_options={"model_path": ...}; default is offline."""
    embedder_options: dict = dataclasses.field(default_factory=dict)
    """Options of the embedder (embeddings.py). For "policy-hidden" rather embed once and pass
    PromptPool(embeddings=...): configs are copied into every state_dict."""
    warmup_steps: int = 1
    """Plan calls that are uniform before VIP starts (cold start; the GP still observes them).
    Official README: VIP warm-starts from step 15 of a uniform run."""
    degenerate_tol: float = 1e-6
    """Uniform fallback when max p − min p < this (official code: std(p) < 1e-6)."""
    p_clip: float = 1e-6
    """p is clipped to [p_clip, 1 − p_clip] before a = p(1−p) and the logs (official code: 1e-6)."""
    tilt_gamma: float = 0.0
    """Official-code-only difficulty tilt: adds γ·log(p_q)·n_q to the objective (more rollouts to
    harder prompts). Paper: none (0). Official: 7e-4 RLOO, 4e-4 (Dr.)GRPO."""
    bandwidth: float | None = None
    """GP: RBF bandwidth h; None = median heuristic (paper). Official code: 0.27 / 0.4 / 0.5."""
    prior_mean: float = 0.0
    """GP: prior mean of logit p. Paper: 0. Official code: −5 (or −1)."""
    noise: float = 1.0
    """GP: observation noise σ_n² in logit space. Paper: value not found; official: none (0).
    1.0 ≈ the variance of logit(k/n) at n = 8 (see gp.GPConfig and docs/fidelity/vip.md)."""
    jitter: float = 1e-4
    """GP: diagonal jitter added with σ_n² (official code: 1e-4)."""
    clip_eps: float = 0.01
    """GP: ε of p̂ = clip(k/n, ε, 1−ε) before the logit. Paper: not found; official code: 1e-6."""
    set_observed_to_target: bool = False
    """GP: set m_B ← ĝ_B after each update (official code: on; not in the paper's formula)."""
    covariance: str = "reset"
    """GP: "reset" (vip.md's update with the prior K each step; official code) or "carry"
    (exact recursive posterior covariance; O(|observed|³) per step)."""
    median_subsample: int = 2048
    """GP: pool rows (seeded subsample) for the median-heuristic bandwidth."""


class VIP(Allocator):
    """GP-predicted success probabilities + exact variance-minimising integer allocation."""

    Config = VIPConfig
    objective: ClassVar[str] = "variance"
    """"variance" (VIP), "inverse-accuracy" (Σ n log p) or "inverse-variance" (Σ n log a)."""
    uses_predictor: ClassVar[bool] = True
    """False for the oracle, which is told the true p."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.last_mode = "none"
        self._plans = 0
        self._setup_pool()
        self.predictor = self._build_predictor()

    # ------------------------------------------------------------------ set-up

    def validate_config(self) -> None:
        super().validate_config()
        c = self.config
        if c.estimator not in ESTIMATORS:
            raise ValueError(f"{self.name}: estimator must be one of {ESTIMATORS}, got {c.estimator!r}")
        est = get_variance_estimator(c.estimator)
        if self.objective == "variance" and c.lower < est.min_lower:
            why = "f(n)=(n-1)/n^2 is convex only for n >= 3" if c.estimator == "drgrpo" else "f(1) is undefined"
            raise ValueError(f"{self.name}: estimator {c.estimator!r} needs lower >= {est.min_lower} ({why}); "
                             f"got lower={c.lower} (paper code uses 4)")
        if c.predictor not in PREDICTORS and self.uses_predictor:
            raise ValueError(f"{self.name}: unknown predictor {c.predictor!r}; known: {sorted(PREDICTORS)}")
        if int(c.warmup_steps) != c.warmup_steps or c.warmup_steps < 0:
            raise ValueError(f"{self.name}: warmup_steps must be an integer >= 0, got {c.warmup_steps}")
        if not c.degenerate_tol >= 0:
            raise ValueError(f"{self.name}: degenerate_tol must be >= 0, got {c.degenerate_tol}")
        if not 0 < c.p_clip < 0.5:
            raise ValueError(f"{self.name}: p_clip must be in (0, 0.5), got {c.p_clip}")
        if not np.isfinite(c.tilt_gamma):
            raise ValueError(f"{self.name}: tilt_gamma must be finite, got {c.tilt_gamma}")

    def _setup_pool(self) -> None:
        if self.pool is None:
            raise ValueError(
                f"{self.name} needs pool=PromptPool(ids, texts[, embeddings]): the GP predicts over the pool"
            )
        self._row = self.pool.index_of()

    def _embeddings(self) -> np.ndarray:
        if self.pool.embeddings is not None:
            emb = np.asarray(self.pool.embeddings, dtype=np.float32)
        else:
            from replication.allocation.embeddings import make_embedder

            emb = make_embedder(self.config.embedder, **self.config.embedder_options)(list(self.pool.texts))
        if emb.ndim != 2 or not np.all(np.isfinite(emb)):
            raise ValueError(f"{self.name}: pool embeddings must be a finite [N, d] array")
        return emb

    def _build_predictor(self) -> Any:
        c = self.config
        opts = dict(c.predictor_options)
        if c.predictor == "gp":
            clash = sorted(set(opts) & set(GP_FIELDS))
            if clash:
                raise ValueError(f"{self.name}: set {clash} as top-level options, not in predictor_options")
            opts.update({f: getattr(c, f) for f in GP_FIELDS})
        needs_emb = PREDICTORS[c.predictor].needs_embeddings
        emb = self._embeddings() if needs_emb else None
        return make_predictor(c.predictor, embeddings=emb, n_pool=len(self.pool.ids), **opts)

    def _rows(self, prompt_ids: list[Hashable]) -> np.ndarray:
        rows = np.empty(len(prompt_ids), dtype=np.int64)
        for i, pid in enumerate(prompt_ids):
            r = self._row.get(pid)
            if r is None:
                raise ValueError(f"{self.name}: prompt id {pid!r} is not in the pool")
            rows[i] = r
        return rows

    # ------------------------------------------------------------------ plan / observe

    def predict(self, prompt_ids: list[Hashable]) -> np.ndarray:
        """Predicted success probabilities of these prompts under the current state."""
        return np.asarray(self.predictor.predict(self._rows(list(prompt_ids))), dtype=np.float64)

    def _plan(self, prompt_ids: list[Hashable], budget: int) -> np.ndarray:
        p = self.predict(prompt_ids)
        self._plans += 1
        self._last_details = {"predicted_p": p.copy()}
        if self._plans <= self.config.warmup_steps:
            self.last_mode = "warmup"
        elif np.ptp(p) < self.config.degenerate_tol:
            # All predictions equal (e.g. an untouched prior): the objective cannot tell prompts
            # apart, so spend the budget evenly (official code: np.std(p) < 1e-6 → uniform).
            self.last_mode = "degenerate"
        else:
            self.last_mode = "vip"
            return self._allocate(p, budget)
        return even_split(len(prompt_ids), budget)

    def _allocate(self, p: np.ndarray, budget: int) -> np.ndarray:
        c = self.config
        p = np.clip(p, c.p_clip, 1.0 - c.p_clip)
        a = p * (1.0 - p)
        if self.objective == "inverse-accuracy":
            return allocate_separable(linear_costs(np.log(p), c.lower, c.upper), budget, c.lower)
        if self.objective == "inverse-variance":
            return allocate_separable(linear_costs(np.log(a), c.lower, c.upper), budget, c.lower)
        if c.estimator in ("drgrpo", "rloo") and c.tilt_gamma == 0.0:
            return solve_integer(a, budget, c.lower, c.upper, c.estimator)
        # grpo (non-convex) or the official tilt: exact solve over the per-prompt cost table.
        levels = np.arange(c.lower, c.upper + 1, dtype=np.float64)
        costs = get_variance_estimator(c.estimator).term(a[:, None], levels[None, :])
        costs = costs + c.tilt_gamma * np.log(p)[:, None] * levels[None, :]
        return allocate_separable(costs, budget, c.lower)

    def _observe(self, prompt_ids: list[Hashable], counts: np.ndarray, rewards: np.ndarray,
                 prompt_losses: np.ndarray | None) -> None:
        self.predictor.observe(self._rows(prompt_ids), successes_per_prompt(counts, rewards), counts)

    # ------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        return {"plans": self._plans, "n_pool": len(self.pool.ids), "predictor": self.predictor.state_dict()}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        if int(state["n_pool"]) != len(self.pool.ids):
            raise ValueError(
                f"{self.name}: state is for a pool of {state['n_pool']} prompts, this one has {len(self.pool.ids)}"
            )
        self._plans = int(state["plans"])
        self.predictor.load_state_dict(state["predictor"])


register_allocator("vip")(VIP)


@register_allocator("vip-inverse-accuracy")
class VIPInverseAccuracy(VIP):
    """Ablation: GP + minimise Σ n_q log p_q — a linear program, so a corner solution: the
    lowest-p prompts are filled to U first, the rest stay at L (paper Table 3, "GP+InvAcc")."""

    objective: ClassVar[str] = "inverse-accuracy"


@register_allocator("vip-inverse-variance")
class VIPInverseVariance(VIP):
    """Ablation: GP + minimise Σ n_q log(p_q(1−p_q)) — the same corner shape, lowest a first
    (paper Table 3, "GP+InvVar")."""

    objective: ClassVar[str] = "inverse-variance"


@dataclasses.dataclass
class RidgeVIPConfig(VIPConfig):
    predictor: str = "ridge"
    """Success predictor: ridge regression of logit p̂ on the embeddings (paper Table 3)."""


@register_allocator("vip-ridge")
class VIPRidge(VIP):
    """Ablation: ridge-regression predictor + VIP allocation (paper Table 3, "Ridge+VIP")."""

    Config = RidgeVIPConfig


@dataclasses.dataclass
class OracleConfig(VIPConfig):
    success_probability: Callable[[Hashable], float] | Mapping | None = None
    """The true p of each prompt: a mapping id → p or a callable id → p (it may change between
    steps, e.g. a simulated policy). Use a plain function or dict: configs are deep-copied."""
    warmup_steps: int = 0
    """The oracle needs no cold start."""


@register_allocator("oracle")
class Oracle(VIP):
    """True success probabilities + VIP allocation: the ceiling of any predictor (simulations).
    The pool is optional; when given, ids outside it are rejected."""

    Config = OracleConfig
    uses_predictor: ClassVar[bool] = False

    def _setup_pool(self) -> None:
        if self.config.success_probability is None:
            raise ValueError("oracle needs success_probability= (a mapping or callable id -> p)")
        self._row = self.pool.index_of() if self.pool is not None else None

    def _build_predictor(self) -> None:
        return None

    def _check_in_pool(self, prompt_ids: list[Hashable]) -> None:
        if self._row is not None:
            for pid in prompt_ids:
                if pid not in self._row:
                    raise ValueError(f"oracle: prompt id {pid!r} is not in the pool")

    def predict(self, prompt_ids: list[Hashable]) -> np.ndarray:
        self._check_in_pool(prompt_ids)
        truth = self.config.success_probability
        out = np.empty(len(prompt_ids))
        for i, pid in enumerate(prompt_ids):
            if isinstance(truth, Mapping):
                if pid not in truth:
                    raise ValueError(f"oracle: no success probability for prompt id {pid!r}")
                out[i] = truth[pid]
            else:
                out[i] = truth(pid)
        if not np.all(np.isfinite(out)) or np.any((out < 0) | (out > 1)):
            raise ValueError("oracle: success probabilities must lie in [0, 1]")
        return out

    def _observe(self, prompt_ids, counts, rewards, prompt_losses) -> None:
        """The oracle already knows p; observations only need valid ids."""
        self._check_in_pool(prompt_ids)

    def _state(self) -> dict[str, Any]:
        return {"plans": self._plans}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self._plans = int(state["plans"])


# ----------------------------------------------------------------------------- exact separable solver


def linear_costs(c: np.ndarray, lower: int, upper: int) -> np.ndarray:
    """Cost table of the linear objectives: φ_q(n) = c_q · n for n = L..U."""
    levels = np.arange(lower, upper + 1, dtype=np.float64)
    return np.asarray(c, dtype=np.float64)[:, None] * levels[None, :]


def allocate_separable(costs: np.ndarray, budget: int, lower: int) -> np.ndarray:
    """Exact integer minimiser of Σ_q φ_q(n_q), Σ n = budget, from a table costs[q, j] = φ_q(L + j).

    Convex rows (second differences ≥ 0 up to rounding): the budget − Q·L largest unit gains
    φ_q(n) − φ_q(n+1) — greedy marginal allocation, exact for separable convex objectives; ties
    to the lowest prompt index, as in solvers.solve_integer. Linear rows (the inverse ablations)
    are convex too, and give the corner solution. Non-convex rows (grpo): dynamic programming
    over the budget, O(Q · budget · (U − L)).
    """
    costs = np.asarray(costs, dtype=np.float64)
    q, width = costs.shape
    extra = int(budget) - q * int(lower)
    check_feasible(q, int(budget), int(lower), int(lower) + width - 1)
    if width == 1 or extra == 0:
        return np.full(q, lower, dtype=np.int64)
    gains = costs[:, :-1] - costs[:, 1:]
    scale = max(float(np.abs(costs).max()), 1e-300)
    if np.all(np.diff(gains, axis=1) <= 1e-12 * scale):
        # Rounding can break exact monotonicity of equal gains; the running minimum restores it
        # so that the chosen units form a prefix of every row.
        gains = np.minimum.accumulate(gains, axis=1)
        order = np.argsort(-gains.ravel(), kind="stable")[:extra]
        return lower + np.bincount(order // (width - 1), minlength=q).astype(np.int64)
    return lower + _dp_allocation(costs, extra)


def _dp_allocation(costs: np.ndarray, extra: int) -> np.ndarray:
    q, width = costs.shape
    w = width - 1
    value = np.full(extra + 1, np.inf)
    value[0] = 0.0
    choice = np.empty((q, extra + 1), dtype=np.int16 if w < 2**15 else np.int64)
    pad = np.full(w, np.inf)
    for i in range(q):
        # windows[s, t] = value[s + t − w]: taking j = w − t extra units for prompt i.
        windows = np.lib.stride_tricks.sliding_window_view(np.concatenate([pad, value]), w + 1)
        total = windows + costs[i, ::-1][None, :]
        t = np.argmin(total, axis=1)
        value = total[np.arange(extra + 1), t]
        choice[i] = w - t
    out = np.empty(q, dtype=np.int64)
    s = extra
    for i in range(q - 1, -1, -1):
        out[i] = choice[i, s]
        s -= out[i]
    return out
