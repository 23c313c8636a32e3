"""The allocation lab: the real allocators on a simulated prompt population whose true success
probabilities are known and drift as a policy learns.

Why: training runs only show noisy k/n; the lab measures what each allocator is designed to
improve — VIP's objective Σ_q p_q(1−p_q) f(n_q) (vip.md; f(n) = 1/(n−1) RLOO, (n−1)/n²
Dr. GRPO) and the number of rollouts with a non-zero advantage Σ_q n_q(1 − p_qⁿ − (1−p_q)ⁿ)
(DynaMO's and GDRO's motivation) — under the TRUE p, at equal budget, over many seeds.

Population model (fitted by ``fit_drift`` from a real run's per-prompt records):
    p_q(0) ~ Beta(α, β);   logit p_q(t+1) = logit p_q(t) + μ + σ ε,   ε ~ N(0, 1) i.i.d.
Every pool prompt drifts every step whether or not it is sampled (the policy learns from all
prompts); the drift does not depend on the allocation (a simplification: the lab isolates the
allocation, not its feedback on learning).

Fit (method of moments with common random numbers, so the criteria are smooth in μ, σ):
1. α, β: beta-binomial maximum likelihood on the first visits (k, n) of prompts first seen in
   the first ``init_steps`` steps (default: the first 10 % of the run) — the binomial sampling
   noise of k/n is modelled, so the fit is the shrunk spread of p, not of k/n.
2. μ: least squares between the run's per-step success rate Σk/Σn (weights Σn; batches are
   uniform samples of the pool, so this tracks the pool mean of p) and the simulated pool mean
   E[p(t)] of M trajectories.
3. σ: for every pair of consecutive visits of one prompt (t1, k1/n1) → (t2, k2/n2),
   D = (r2 − r1)² − r1(1−r1)/(n1−1) − r2(1−r2)/(n2−1) is unbiased for E[(p(t2) − p(t1))²];
   σ solves mean D = the simulated mean of (p(t2) − p(t1))² over the same (t1, t2) pairs
   (monotone in σ: bisection). Without revisits σ cannot be identified and is set to 0.
Steps 2–3 alternate four times. ``DriftModel.notes`` records the sample sizes.

Prompt embeddings (for the GP) are synthetic: z ~ N(0, I_d), embedding z/‖z‖, and the initial p
is tied to z₁ by a Gaussian copula with correlation ``embed_rho`` (0: embeddings carry no
information, 1: p₀ is a monotone function of z₁). The real runs do not identify this; it is a
knob of the lab, not a fitted value.

Methods (all at the same budget C = Q·n̄, bounds [L, U], built with make_allocator):
uniform; vip-oracle (true p + VIP's exact solver); vip-gp (the paper's GP); vip-ma (VIP with a
moving-average predictor); dynamo (water level on √ of the unbiased Bernoulli variance);
gdro-sqrt-law (square-root law over GDRO bins); inverse-accuracy (Σ n log p̂ with a moving
average p̂, VIP Table 3's allocation ablation). Batches, true p and the uniform draws that decide
each rollout's success are shared across methods (common random numbers), so differences
between methods are paired.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from replication.allocation import PromptPool, make_allocator
from replication.report.stats import mean_ci

# ----------------------------------------------------------------------------- drift model


@dataclasses.dataclass
class DriftModel:
    """p(0) ~ Beta(alpha, beta); logit p drifts by mu + sigma·N(0,1) per step. The defaults are
    placeholders (a broad population that slowly improves), not a fit: use ``fit_drift``."""

    alpha: float = 0.6
    beta: float = 0.8
    mu: float = 0.01
    sigma: float = 0.05
    notes: dict = dataclasses.field(default_factory=dict)

    def initial_logits(self, u: np.ndarray) -> np.ndarray:
        """logit p(0) from uniforms u via the Beta quantile (p clipped to [1e-4, 1 − 1e-4])."""
        p = stats.beta.ppf(u, self.alpha, self.beta)
        return special.logit(np.clip(p, 1e-4, 1 - 1e-4))

    def describe(self) -> str:
        n = self.notes
        src = " (defaults, not fitted)"
        if n:
            src = f" (fit on {n['n_first']} first visits, {n['n_pairs']} revisit pairs, {n['steps']} steps)"
        return (f"p(0) ~ Beta({self.alpha:.3g}, {self.beta:.3g}), mean {self.alpha / (self.alpha + self.beta):.3f}; "
                f"logit drift {self.mu:+.4f} ± {self.sigma:.4f} per step{src}")


def _beta_binomial_fit(k: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    def nll(theta: np.ndarray) -> float:
        a, b = np.exp(theta)
        return -float(stats.betabinom.logpmf(k, n, a, b).sum())

    m = float(np.clip(k.sum() / max(n.sum(), 1), 0.02, 0.98))
    res = optimize.minimize(nll, np.log([m, 1 - m]), method="Nelder-Mead",
                            options={"xatol": 1e-4, "fatol": 1e-6, "maxiter": 2000})
    a, b = np.exp(np.clip(res.x, -6, 6))
    return float(a), float(b)


def _revisit_pairs(prompts: pd.DataFrame) -> pd.DataFrame:
    keys = [k for k in ("arm", "seed") if k in prompts.columns] + ["prompt_id"]
    df = prompts[prompts["n"] >= 2].sort_values(keys + ["step"])
    nxt = df.groupby(keys, sort=False)[["step", "successes", "n"]].shift(-1)
    pairs = pd.DataFrame({"t1": df["step"], "k1": df["successes"], "n1": df["n"],
                          "t2": nxt["step"], "k2": nxt["successes"], "n2": nxt["n"]}).dropna()
    r1, r2 = pairs["k1"] / pairs["n1"], pairs["k2"] / pairs["n2"]
    pairs["d"] = (r2 - r1) ** 2 - r1 * (1 - r1) / (pairs["n1"] - 1) - r2 * (1 - r2) / (pairs["n2"] - 1)
    return pairs.astype({"t1": int, "t2": int})


def fit_drift(prompts: pd.DataFrame, init_steps: int | None = None, n_sim: int = 2000,
              max_pairs: int = 4000, seed: int = 0) -> DriftModel:
    """Fit the lab's population model to per-prompt records (runs.load_prompts; one or more
    runs, ideally uniform ones). See the module docstring for the three moment conditions."""
    if prompts.empty:
        raise ValueError("no per-prompt records to fit")
    keys = [k for k in ("arm", "seed") if k in prompts.columns]
    steps = int(prompts["step"].max()) + 1
    init_steps = max(1, math.ceil(0.1 * steps)) if init_steps is None else int(init_steps)
    first = prompts.sort_values("step").drop_duplicates(keys + ["prompt_id"])
    first = first[first["step"] < init_steps]
    alpha, beta = _beta_binomial_fit(first["successes"].to_numpy(), first["n"].to_numpy())

    per_step = prompts.groupby("step")[["successes", "n"]].sum()
    t_obs = per_step.index.to_numpy()
    m_obs = (per_step["successes"] / per_step["n"]).to_numpy()
    w_obs = per_step["n"].to_numpy(dtype=float)
    pairs = _revisit_pairs(prompts)
    rng = np.random.default_rng(seed)
    if len(pairs) > max_pairs:
        pairs = pairs.iloc[rng.choice(len(pairs), max_pairs, replace=False)]

    model = DriftModel(alpha, beta, 0.0, 0.0)
    g0 = model.initial_logits(rng.uniform(size=n_sim))
    walk = np.concatenate([np.zeros((n_sim, 1)), np.cumsum(rng.normal(size=(n_sim, steps - 1)), axis=1)], axis=1)
    which = rng.integers(0, n_sim, size=len(pairs))
    t1, t2 = pairs["t1"].to_numpy(), pairs["t2"].to_numpy()

    def mean_loss(mu: float, sigma: float) -> float:
        p = special.expit(g0[:, None] + mu * t_obs[None, :] + sigma * walk[:, t_obs])
        return float(np.sum(w_obs * (m_obs - p.mean(axis=0)) ** 2) / w_obs.sum())

    def pair_gap(mu: float, sigma: float) -> float:
        a = special.expit(g0[which] + mu * t1 + sigma * walk[which, t1])
        b = special.expit(g0[which] + mu * t2 + sigma * walk[which, t2])
        return float(np.mean((b - a) ** 2)) - float(pairs["d"].mean())

    mu, sigma = 0.0, 0.0
    for _ in range(4):
        mu = float(optimize.minimize_scalar(lambda m: mean_loss(m, sigma), bounds=(-1.0, 1.0),
                                            method="bounded", options={"xatol": 1e-6}).x)
        if len(pairs) == 0 or pair_gap(mu, 0.0) >= 0:
            sigma = 0.0
        elif pair_gap(mu, 2.0) <= 0:
            sigma = 2.0
        else:
            sigma = float(optimize.brentq(lambda s: pair_gap(mu, s), 0.0, 2.0, xtol=1e-6))
    notes = {"n_first": int(len(first)), "init_steps": init_steps, "n_pairs": int(len(pairs)),
             "steps": steps, "mean_rate_first": float(m_obs[0]), "mean_rate_last": float(m_obs[-1]),
             "pair_gap_target": float(pairs["d"].mean()) if len(pairs) else float("nan")}
    return DriftModel(alpha, beta, mu, sigma, notes)


# ----------------------------------------------------------------------------- the lab


@dataclasses.dataclass
class LabConfig:
    n_prompts: int = 192
    """Pool size N (small, so prompts are revisited and history-based predictors have data)."""
    prompts_per_step: int = 32
    """Q, prompts per step (the default profile's 32)."""
    mean_rollouts: int = 8
    """n̄; budget C = Q·n̄ (VIP's 8Q)."""
    lower: int = 3
    """L for every method (3: Dr. GRPO's f is convex only from n = 3)."""
    upper: int = 24
    """U for every method."""
    steps: int = 30
    """Simulated steps per seed."""
    seeds: int = 200
    """Seeds for every method except the GP one."""
    gp_seeds: int = 20
    """Seeds for vip-gp (its GP update dominates the run time)."""
    estimator: str = "rloo"
    """Objective VIP (oracle, GP, MA) minimises: "rloo" or "drgrpo"."""
    embed_dim: int = 8
    embed_rho: float = 0.7
    """Copula correlation between the initial p and the embedding (see module docstring)."""
    time_scale: float = 1.0
    """Real training steps per lab step (drift μ·s, noise σ·√s)."""
    methods: tuple[str, ...] = ("uniform", "vip-oracle", "vip-gp", "vip-ma", "dynamo", "gdro-sqrt-law",
                                "inverse-accuracy")


def _factories(cfg: LabConfig) -> dict[str, Callable]:
    b = {"lower": cfg.lower, "upper": cfg.upper}
    vip = {**b, "estimator": cfg.estimator}
    return {
        "uniform": lambda s, pool, truth: make_allocator("uniform", seed=s, **b),
        "vip-oracle": lambda s, pool, truth: make_allocator("oracle", seed=s, success_probability=truth, **vip),
        "vip-gp": lambda s, pool, truth: make_allocator("vip", seed=s, pool=pool, **vip),
        "vip-ma": lambda s, pool, truth: make_allocator("vip", seed=s, pool=pool, predictor="moving-average", **vip),
        "dynamo": lambda s, pool, truth: make_allocator("dynamo", seed=s, **b),
        "gdro-sqrt-law": lambda s, pool, truth: make_allocator("gdro-sqrt-law", seed=s, **b),
        "inverse-accuracy": lambda s, pool, truth: make_allocator("vip-inverse-accuracy", seed=s, pool=pool,
                                                                  predictor="moving-average", **b),
    }


def _population(model: DriftModel, cfg: LabConfig, n_seeds: int, rng: np.random.Generator):
    """True p [S, T, N], embeddings [S, N, d], batches [S, T, Q] (epoch-shuffled), uniforms
    [S, T, Q, U] deciding each potential rollout's success."""
    s_, t_, n_ = n_seeds, cfg.steps, cfg.n_prompts
    z = rng.normal(size=(s_, n_, cfg.embed_dim))
    emb = (z / np.linalg.norm(z, axis=2, keepdims=True)).astype(np.float32)
    rho = float(cfg.embed_rho)
    u0 = stats.norm.cdf(rho * z[:, :, 0] + math.sqrt(max(1 - rho**2, 0.0)) * rng.normal(size=(s_, n_)))
    g = model.initial_logits(u0)
    steps = model.mu * cfg.time_scale + model.sigma * math.sqrt(cfg.time_scale) * rng.normal(size=(s_, t_ - 1, n_))
    logits = np.concatenate([g[:, None, :], g[:, None, :] + np.cumsum(steps, axis=1)], axis=1)
    p = special.expit(logits)
    q = cfg.prompts_per_step
    per_epoch = n_ // q
    batches = np.empty((s_, t_, q), dtype=np.int64)
    for s in range(s_):
        for e in range(math.ceil(t_ / per_epoch)):
            perm = rng.permutation(n_)[: per_epoch * q].reshape(per_epoch, q)
            lo, hi = e * per_epoch, min((e + 1) * per_epoch, t_)
            batches[s, lo:hi] = perm[: hi - lo]
    draws = rng.uniform(size=(s_, t_, q, cfg.upper)).astype(np.float32)
    return p, emb, batches, draws


def _simulate(make: Callable, p, emb, batches, draws, cfg: LabConfig,
              n_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts [S, T, Q] and successes [S, T, Q] of one method."""
    _, t_, q = batches[:n_seeds].shape
    counts = np.empty((n_seeds, t_, q), dtype=np.int64)
    succ = np.empty_like(counts)
    budget = cfg.prompts_per_step * cfg.mean_rollouts
    ids_all = tuple(range(cfg.n_prompts))
    texts = tuple(f"prompt {i}" for i in ids_all)
    col = np.arange(cfg.upper)
    for s in range(n_seeds):
        current = {"p": p[s, 0]}
        pool = PromptPool(ids_all, texts, emb[s])
        alloc = make(s, pool, lambda pid, cur=current: float(cur["p"][pid]))
        for t in range(t_):
            current["p"] = p[s, t]
            ids = batches[s, t].tolist()
            n = alloc.plan(ids, budget)
            hit = draws[s, t] < p[s, t, batches[s, t]][:, None]
            mask = col[None, :] < n[:, None]
            alloc.observe(ids, n, hit[mask].astype(np.float64))
            counts[s, t], succ[s, t] = n, (hit & mask).sum(axis=1)
    return counts, succ


def _metrics(p_batch: np.ndarray, n: np.ndarray, k: np.ndarray) -> dict[str, np.ndarray]:
    """Per-seed means over steps of the true objectives (arrays [S, T, Q] in)."""
    a = p_batch * (1 - p_batch)
    nf = n.astype(np.float64)
    nonzero = nf * (1 - p_batch**nf - (1 - p_batch) ** nf)
    mixed = (k > 0) & (k < n)
    return {
        "variance_rloo": (a / (nf - 1)).sum(axis=2).mean(axis=1),
        "variance_drgrpo": (a * (nf - 1) / nf**2).sum(axis=2).mean(axis=1),
        "nonzero_expected": nonzero.sum(axis=2).mean(axis=1),
        "nonzero_realised": (nf * mixed).sum(axis=2).mean(axis=1),
    }


def run_lab(model: DriftModel | None = None, cfg: LabConfig | None = None, seed: int = 0) -> pd.DataFrame:
    """Simulate every method on the same population; tidy frame method, seed, metric, value.

    Metrics per seed (means over steps): variance_rloo, variance_drgrpo (Σ p(1−p) f(n) at the
    true p), nonzero_expected (Σ n(1 − pⁿ − (1−p)ⁿ)), nonzero_realised (rollouts of prompts
    whose simulated group was mixed), and *_vs_uniform: the ratio to uniform on the same seed.
    """
    model = model or DriftModel()
    cfg = cfg or LabConfig()
    if not cfg.lower <= cfg.mean_rollouts <= cfg.upper:
        raise ValueError(f"lab mean_rollouts {cfg.mean_rollouts} must lie in [lower, upper] = [{cfg.lower}, {cfg.upper}]")
    if not 1 <= cfg.prompts_per_step <= cfg.n_prompts:
        raise ValueError(f"lab prompts_per_step {cfg.prompts_per_step} must lie in [1, n_prompts={cfg.n_prompts}]")
    if cfg.lower < 2:
        raise ValueError("lab lower must be >= 2 (the RLOO objective is undefined at n = 1)")
    unknown = set(cfg.methods) - set(_factories(cfg))
    if unknown:
        raise ValueError(f"unknown lab methods {sorted(unknown)}; known: {sorted(_factories(cfg))}")
    rng = np.random.default_rng(seed)
    p, emb, batches, draws = _population(model, cfg, cfg.seeds, rng)
    p_batch = np.take_along_axis(p, batches, axis=2)
    from tqdm import tqdm  # tens of seconds (the GP method dominates)

    rows, per_method = [], {}
    for name in tqdm(cfg.methods, desc="allocation lab", unit="method"):
        n_seeds = min(cfg.gp_seeds, cfg.seeds) if name == "vip-gp" else cfg.seeds
        counts, succ = _simulate(_factories(cfg)[name], p, emb, batches, draws, cfg, n_seeds)
        per_method[name] = _metrics(p_batch[:n_seeds], counts, succ)
    base = per_method.get("uniform")
    for name, mets in per_method.items():
        for metric, vals in list(mets.items()):
            extra = {}
            if base is not None:
                extra[f"{metric}_vs_uniform"] = vals / base[metric][: len(vals)]
            for m, v in {metric: vals, **extra}.items():
                rows += [{"method": name, "seed": s, "metric": m, "value": float(x)} for s, x in enumerate(v)]
    return pd.DataFrame(rows)


def summarise_lab(lab: pd.DataFrame) -> pd.DataFrame:
    """Mean ± 95 % t CI over seeds per method and metric."""
    rows = []
    for (method, metric), g in lab.groupby(["method", "metric"], sort=False):
        ci = mean_ci(g["value"])
        rows.append({"method": method, "metric": metric, "mean": ci.mean, "lo": ci.lo, "hi": ci.hi, "n": ci.n})
    return pd.DataFrame(rows)


def plot_lab(lab: pd.DataFrame, path, metrics: Sequence[str] = ("variance_rloo_vs_uniform",
             "variance_drgrpo_vs_uniform", "nonzero_expected_vs_uniform")):
    """One panel per metric: mean ± 95 % CI over seeds per method (ratios to uniform: < 1 is a
    lower variance, > 1 more non-zero-advantage rollouts)."""
    from matplotlib.figure import Figure

    from replication.report.plots import save

    s = summarise_lab(lab)
    fig = Figure(figsize=(4.2 * len(metrics), 3.6))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics):
        part = s[s["metric"] == metric].reset_index(drop=True)
        y = np.arange(len(part))
        err = np.nan_to_num(np.vstack([part["mean"] - part["lo"], part["hi"] - part["mean"]]))
        ax.errorbar(part["mean"], y, xerr=err, fmt="o", capsize=3)
        ax.axvline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")  # ratios: ×0.5 and ×2 equally far from 1
        ax.set_yticks(y, part["method"])
        ax.invert_yaxis()
        ax.set_title(metric.replace("_", " "), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save(fig, path)
