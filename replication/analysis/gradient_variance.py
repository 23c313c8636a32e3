"""Gradient variance on the real model: the papers' claim, measured directly (issue 10, point 2).

VIP, DynaMO and Rollout-GDRO all argue that their allocation lowers the variance of the policy
gradient at an equal rollout budget; none measures it. Here, at checkpoints of a uniform run and
for one fixed batch of Q training prompts, each allocator plans the same budget C = Q·n̄ many
times; every plan gets fresh rollouts, and each rollout set gives one flattened policy-gradient
vector g — the trainer's own loss (``rl.ppo_clip_loss``, token-mean over the whole set, one PPO
pass at ratio 1 = the on-policy policy gradient; the estimator's ``group_advantages``; the
trainer's rollout engine, verifier and model). Over the D draws of one allocator:

- total variance  tr Cov(g) = (1/(D−1)) Σ_d ‖g_d − ḡ‖²;
- variance along a fixed direction u (the mean gradient of a separate set of uniform draws, so
  every allocator is projected on the same, independent direction): Var(g·u);
- signal ‖E g‖², estimated without bias as ‖ḡ‖² − tr Cov/D, and the noise-to-signal ratio
  tr Cov / ‖E g‖². With token-mean aggregation over a fixed budget the step's target itself
  depends on the allocation (a prompt's weight is its rollout count), so an allocation that
  sends rollouts to informative prompts raises both the signal and the raw variance; the
  noise-to-signal ratio is the scale-free comparison, the raw variance the literal one;
- the share of rollouts with a non-zero advantage, and the share of prompts with n ≠ n̄.
Each is reported as a ratio to uniform with a bootstrap 95 % CI (draws resampled within each
allocator, independently).

Allocators with state are warmed on the run's own history: every per-prompt record of the
uniform run before the checkpoint's step is replayed in step order through ``plan`` (result
discarded, so plan counters such as VIP's cold start advance as in training) and ``observe``
(the logged n, successes as n rewards, and the logged per-prompt loss). GP, moving average,
DynaMO's cumulative counts, the GDRO classifier's bins and Rollout-GDRO's bandits therefore hold
what they would hold after the same prompt visits, with uniform counts (the uniform run's). The
oracle is told p estimated from ``oracle_samples`` separate rollouts per prompt at the checkpoint.
The warmed allocator is deep-copied before every draw, so the draws are independent given it.

Command (checkpoints are trained first when missing; ~1 min per checkpoint on 2 cores):
    python -m replication grad-variance --profile default --run runs/gradvar-uniform \
        --steps 0,100,300 --draws 30 --out results/gradvar
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from replication.allocation import ALLOCATORS, Allocator, PromptPool, make_allocator
from replication.config import TrainConfig, to_dict
from replication.rl import PPOConfig, group_advantages, ppo_clip_loss, token_logprobs_and_entropy
from replication.rollout.base import RolloutBatch, SamplingConfig
from replication.tasks.verify import Verifier

METHODS: dict[str, tuple[str, dict]] = {
    "uniform": ("uniform", {}),
    "vip-oracle": ("oracle", {}),
    "vip-gp": ("vip", {}),
    "vip-ma": ("vip", {"predictor": "moving-average"}),
    "dynamo": ("dynamo", {}),
    "rollout-gdro": ("rollout-gdro", {}),
    "gdro-sqrt-law": ("gdro-sqrt-law", {}),
    "inverse-accuracy": ("vip-inverse-accuracy", {"predictor": "moving-average"}),
}
"""Method name (the allocation lab's names, report/lab.py) → (registered allocator, options).
VIP with true p is ``vip-oracle``; ``inverse-accuracy`` uses a moving-average p̂ as in the lab."""

METRICS = ("total_variance", "projected_variance", "signal", "noise_to_signal", "projected_noise_to_signal",
           "nonzero_share", "departure_share")
RATIO_METRICS = ("total_variance", "projected_variance", "noise_to_signal", "projected_noise_to_signal",
                 "nonzero_share")


@dataclasses.dataclass
class GradVarConfig:
    """Settings of the measurement (the training settings come from the profile)."""

    steps: tuple[int, ...] = (0, 100, 300)
    """Checkpoint steps of the uniform run (0 = the base model). Issue 10: at least 3."""
    draws: int = 30
    """Independent rollout sets per allocator and checkpoint (issue 10: at least 30)."""
    reference_draws: int = 30
    """Extra uniform draws whose mean gradient is the projection direction u."""
    oracle_samples: int = 64
    """Rollouts per prompt that estimate the true p told to vip-oracle."""
    prompts: int | None = None
    """Q, size of the fixed batch; None = the profile's rollout.prompts_per_step."""
    methods: tuple[str, ...] = tuple(METHODS)
    """Methods to measure (keys of METHODS); uniform is always included (the ratios' base)."""
    method_options: dict[str, dict] = dataclasses.field(default_factory=dict)
    """Allocator options per method, over METHODS' own (e.g. ``{"vip-gp": {"bandwidth": 0.4}}``,
    the VIP arm's GP settings from params.yaml), so each method is measured as its arm runs it."""
    bootstrap: int = 2000
    """Bootstrap resamples for the ratio CIs."""
    seed: int = 0
    """Seeds the batch choice, the rollouts and the bootstrap."""

    def __post_init__(self) -> None:
        self.steps = tuple(int(s) for s in self.steps)
        self.methods = tuple(self.methods)
        if not self.steps or min(self.steps) < 0 or len(set(self.steps)) != len(self.steps):
            raise ValueError(f"grad-variance steps must be distinct integers >= 0, got {self.steps}")
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise ValueError(f"grad-variance: unknown method(s) {unknown}; known: {sorted(METHODS)}")
        if "uniform" not in self.methods:
            self.methods = ("uniform", *self.methods)
        self.method_options = {str(k): dict(v or {}) for k, v in dict(self.method_options or {}).items()}
        stray = sorted(set(self.method_options) - set(self.methods))
        if stray:
            raise ValueError(f"grad-variance method_options for method(s) not measured: {stray}; "
                             f"measured: {list(self.methods)}")
        for name in ("draws", "reference_draws"):
            if int(getattr(self, name)) < 3:
                raise ValueError(f"grad-variance {name} must be >= 3, got {getattr(self, name)}")
        if self.oracle_samples < 2:
            raise ValueError(f"grad-variance oracle_samples must be >= 2, got {self.oracle_samples}")
        if self.bootstrap < 100:
            raise ValueError(f"grad-variance bootstrap must be >= 100, got {self.bootstrap}")


# ----------------------------------------------------------------------------- the gradient


def flat_policy_gradient(
    model: torch.nn.Module,
    batch: RolloutBatch,
    row_advantages: np.ndarray,
    ppo_cfg: PPOConfig,
    temperature: float,
) -> torch.Tensor:
    """∇θ of the trainer's clipped loss on the whole rollout set as ONE mini-batch (token-mean
    over all valid tokens), flattened over the model's parameters in ``parameters()`` order.

    At the sampling policy the ratio is 1, so this is the on-policy policy gradient the first
    PPO step uses. As in train/update.py, rows with a zero advantage are left out of the forward
    pass but their tokens stay in the token-mean denominator (identical gradient). The KL term is
    not included (its gradient vanishes at the reference policy; none of the default arms uses it).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    adv = torch.as_tensor(np.asarray(row_advantages, dtype=np.float32))
    if adv.shape != (batch.n_rows,):
        raise ValueError(f"{adv.shape[0] if adv.dim() else 0} advantages for {batch.n_rows} rows")
    mask_all = batch.completion_mask.float()
    if ppo_cfg.aggregation == "token-mean":
        denom = mask_all.sum().clamp_min(1.0)
    else:
        denom = torch.tensor(float(batch.n_rows))
    keep = torch.nonzero(adv != 0).flatten()
    if len(keep) == 0:
        return torch.zeros(sum(p.numel() for p in params))
    was_training = model.training
    model.train()
    try:
        kmask = batch.completion_mask[keep].float()
        logp, _ = token_logprobs_and_entropy(model, batch.input_ids[keep], batch.attention_mask[keep],
                                             temperature, completion_mask=kmask)
        adv_tok = adv[keep].unsqueeze(1) * kmask
        res = ppo_clip_loss(logp, batch.old_logprobs[keep], adv_tok, kmask, ppo_cfg, denominator=denom)
        grads = torch.autograd.grad(res.loss, params, allow_unused=True)
    finally:
        model.train(was_training)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                      for g, p in zip(grads, params)]).detach()


# ----------------------------------------------------------------------------- draws


@dataclasses.dataclass
class PromptBatch:
    """The fixed batch: aligned per-prompt fields (a slice of the trainer's PromptSet)."""

    ids: list
    inputs: list[str]
    answers: list[str]
    sources: list[str]


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


def rollout_gradient(
    model: torch.nn.Module,
    engine,
    prompts: PromptBatch,
    counts: np.ndarray,
    verifier: Verifier,
    estimator: str,
    ppo_cfg: PPOConfig,
    sampling: SamplingConfig,
    generator: torch.Generator,
    reward_positive: float = 1.0,
    reward_negative: float = 0.0,
) -> tuple[torch.Tensor, np.ndarray]:
    """One draw, as the trainer's step does it: rollouts → verifier → rewards → group
    advantages → gradient. Returns (flat gradient, per-row advantages)."""
    batch = engine.generate(prompts.ids, prompts.inputs, prompts.answers, counts, sampling, generator=generator)
    batch.check_alignment()
    correct = verifier.is_correct(batch.completions, batch.row_answers,
                                  [prompts.sources[g] for g in batch.group_index])
    rewards = np.where(correct, reward_positive, reward_negative)
    adv = group_advantages(rewards, batch.group_index, estimator)
    return flat_policy_gradient(model, batch, adv, ppo_cfg, sampling.temperature), adv


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


# ----------------------------------------------------------------------------- statistics


def _stats(ds: DrawSet, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of the resamples idx [B, D] (row 0 may be the identity)."""
    d = idx.shape[1]
    g = ds.gram
    diag = np.diag(g)[idx].mean(axis=1)
    mean_sq = g[idx[:, :, None], idx[:, None, :]].mean(axis=(1, 2))  # ‖ḡ‖²
    tr = (diag - mean_sq) * d / (d - 1)
    signal = mean_sq - tr / d
    proj = ds.projection[idx]
    pvar = proj.var(axis=1, ddof=1)
    pmean = proj.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        nsr = np.where(signal > 0, tr / signal, np.nan)
        psig = pmean**2 - pvar / d
        pnsr = np.where(psig > 0, pvar / psig, np.nan)
    return {"total_variance": tr, "projected_variance": pvar, "signal": signal, "noise_to_signal": nsr,
            "projected_noise_to_signal": pnsr, "nonzero_share": ds.nonzero_share[idx].mean(axis=1),
            "departure_share": ds.departure_share[idx].mean(axis=1)}


def summarise_draws(sets: dict[str, DrawSet], n_boot: int = 2000, seed: int = 0,
                    level: float = 0.95) -> pd.DataFrame:
    """Tidy rows (method, metric, value, lo, hi, n_draws): each metric with a bootstrap CI, and
    ``<metric>_vs_uniform`` ratios whose CI resamples the method's and uniform's draws
    independently. Uniform's own ratio is exactly 1 (no CI)."""
    if "uniform" not in sets:
        raise ValueError("summarise_draws needs the 'uniform' draws (the ratios' base)")
    rng = np.random.default_rng(seed)
    a = (1 - level) / 2

    def boot(ds: DrawSet) -> dict[str, np.ndarray]:
        d = len(ds.nonzero_share)
        idx = np.vstack([np.arange(d)[None, :], rng.integers(0, d, size=(n_boot, d))])
        return _stats(ds, idx)

    stats = {name: boot(ds) for name, ds in sets.items()}
    base = stats["uniform"]
    ref = sets["uniform"].mean
    rows = []
    for name, st in stats.items():
        n = len(sets[name].nonzero_share)

        def ci(values: np.ndarray) -> tuple[float, float]:
            v = values[1:][np.isfinite(values[1:])]
            if len(v) < 0.9 * n_boot:  # an unstable ratio (signal ≤ 0 in many resamples)
                return float("nan"), float("nan")
            return float(np.quantile(v, a)), float(np.quantile(v, 1 - a))

        for metric in METRICS:
            lo, hi = ci(st[metric])
            rows.append({"method": name, "metric": metric, "value": float(st[metric][0]), "lo": lo, "hi": hi,
                         "n_draws": n})
        for metric in RATIO_METRICS:
            if name == "uniform":
                rows.append({"method": name, "metric": f"{metric}_vs_uniform", "value": 1.0, "lo": np.nan,
                             "hi": np.nan, "n_draws": n})
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                r = st[metric] / base[metric]
            lo, hi = ci(r)
            rows.append({"method": name, "metric": f"{metric}_vs_uniform", "value": float(r[0]), "lo": lo,
                         "hi": hi, "n_draws": n})
        m = sets[name].mean
        cos = float(m @ ref / max(np.linalg.norm(m) * np.linalg.norm(ref), 1e-300))
        rows.append({"method": name, "metric": "cosine_to_uniform_mean", "value": cos, "lo": np.nan, "hi": np.nan,
                     "n_draws": n})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- allocators


def build_method(name: str, cfg: TrainConfig, pool: PromptPool,
                 truth: dict | None = None, seed: int = 0, options: dict | None = None) -> Allocator:
    """The allocator of ``name`` with the profile's bounds and estimator (as build_components);
    ``options`` (GradVarConfig.method_options[name]) go over METHODS' own."""
    registered, extra = METHODS[name]
    opts = {"lower": cfg.rollout.lower, "upper": cfg.rollout.upper, **extra, **dict(options or {})}
    fields = {f.name for f in dataclasses.fields(ALLOCATORS[registered].Config)}
    if "estimator" in fields:
        opts["estimator"] = cfg.rl.estimator
    if registered == "oracle":
        if truth is None:
            raise ValueError("vip-oracle needs the estimated success probabilities (truth=)")
        opts["success_probability"] = dict(truth)
    return make_allocator(registered, seed=seed, pool=pool, **opts)


def replay_history(allocator: Allocator, records: pd.DataFrame, before_step: int,
                   reward_positive: float = 1.0, reward_negative: float = 0.0) -> int:
    """Warm ``allocator`` on a run's per-prompt records with step < before_step: per step, in
    order, ``plan`` (discarded) then ``observe`` with the logged counts, successes and losses.
    Returns the number of steps replayed."""
    past = records[records["step"] < before_step]
    steps = 0
    for _, g in past.groupby("step", sort=True):
        ids = g["prompt_id"].tolist()
        n = g["n"].to_numpy(dtype=np.int64)
        k = g["successes"].to_numpy(dtype=np.int64)
        allocator.plan(ids, int(n.sum()))
        rewards = np.concatenate([np.r_[np.full(ki, reward_positive), np.full(ni - ki, reward_negative)]
                                  for ni, ki in zip(n, k)])
        losses = None
        if "loss" in g and np.all(np.isfinite(pd.to_numeric(g["loss"], errors="coerce"))):
            losses = g["loss"].to_numpy(dtype=np.float64)
        allocator.observe(ids, n, rewards, prompt_losses=losses)
        steps += 1
    return steps


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def train_uniform_checkpoints(cfg: TrainConfig, run_dir: str | Path, steps: Sequence[int],
                              progress: bool = False) -> dict[int, Path]:
    """Train the profile's uniform run in ``run_dir`` (resuming between checkpoints) and keep
    an HF model folder at each step; step 0 is the profile's base model. Existing folders are
    reused, so a second call trains nothing."""
    from replication.train.loop import train

    run_dir = Path(run_dir)
    cfg = dataclasses.replace(cfg, allocator=dataclasses.replace(cfg.allocator, name="uniform", options={}))
    out: dict[int, Path] = {}
    for s in sorted(steps):
        if s == 0:
            out[0] = Path(cfg.model.path)
            continue
        dest = checkpoint_dir(run_dir, s)
        if not (dest / "config.json").exists():
            from replication.train.checkpoint import load_checkpoint

            ck = load_checkpoint(run_dir)
            if ck is not None and ck["step"] > s:
                raise ValueError(f"{run_dir} is already past step {s} (at {ck['step']}) and has no "
                                 f"checkpoint folder for it; use a fresh --run folder")
            train(cfg, run_dir, max_steps=s, resume=ck is not None, overwrite=ck is None,
                  progress=progress)
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(run_dir / "model", dest)
        out[s] = dest
    return out


def load_records(run_dir: str | Path) -> pd.DataFrame:
    """The run's per-prompt records (prompts.jsonl or prompts.jsonl.gz)."""
    from replication.report.runs import _read_jsonl

    run_dir = Path(run_dir)
    for name in ("prompts.jsonl", "prompts.jsonl.gz"):
        if (run_dir / name).exists():
            return pd.DataFrame(_read_jsonl(run_dir / name))
    raise FileNotFoundError(f"{run_dir}: no prompts.jsonl(.gz) to warm the allocators on")


# ----------------------------------------------------------------------------- one checkpoint


def measure_checkpoint(cfg: TrainConfig, model_path: str | Path, step: int, records: pd.DataFrame,
                       gv: GradVarConfig, log: Callable[[str], None] = print) -> pd.DataFrame:
    """All methods' draws at one checkpoint; tidy summary rows with a ``step`` column."""
    from replication.train.components import build_components

    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=str(model_path)))
    c = build_components(cfg)
    q = int(gv.prompts or cfg.rollout.prompts_per_step)
    if q > len(c.train.ids):
        raise ValueError(f"grad-variance prompts={q} exceeds the pool's {len(c.train.ids)} prompts")
    pick = np.sort(np.random.default_rng([gv.seed, 7]).choice(len(c.train.ids), q, replace=False))
    prompts = PromptBatch([c.train.ids[i] for i in pick], [c.train.inputs[i] for i in pick],
                          [c.train.answers[i] for i in pick], [c.train.sources[i] for i in pick])
    sampling = cfg.rollout.sampling
    nbar = cfg.rollout.mean_rollouts
    budget = q * nbar
    pool = PromptPool(ids=tuple(c.train.ids), texts=tuple(c.train.texts))

    def gradient(counts, gen):
        return rollout_gradient(c.model, c.engine, prompts, counts, c.verifier, cfg.rl.estimator, c.ppo_cfg,
                                sampling, gen, cfg.rl.reward_positive, cfg.rl.reward_negative)

    # true p from separate samples (the oracle's knowledge)
    t0 = time.perf_counter()
    ob = c.engine.generate(prompts.ids, prompts.inputs, prompts.answers, np.full(q, gv.oracle_samples), sampling,
                           generator=torch.Generator().manual_seed(gv.seed + 10_000 + step))
    hits = c.verifier.is_correct(ob.completions, ob.row_answers,
                                 [prompts.sources[g] for g in ob.group_index]).astype(float)
    p_true = np.bincount(ob.group_index, weights=hits, minlength=q) / gv.oracle_samples
    truth = dict(zip(prompts.ids, p_true.tolist()))

    uni = build_method("uniform", cfg, pool)
    ref = draw_gradients(lambda: uni.plan(prompts.ids, budget), gradient, gv.reference_draws,
                         [gv.seed, step, 999], nbar)
    direction = torch.as_tensor(ref.mean / max(np.linalg.norm(ref.mean), 1e-300))
    sets: dict[str, DrawSet] = {}
    info = []
    for j, name in enumerate(gv.methods):
        alloc = build_method(name, cfg, pool, truth=truth, seed=gv.seed, options=gv.method_options.get(name))
        replayed = 0 if name == "vip-oracle" else replay_history(
            alloc, records, step, cfg.rl.reward_positive, cfg.rl.reward_negative)

        def plan(a=alloc):
            return copy.deepcopy(a).plan(prompts.ids, budget)

        sets[name] = draw_gradients(plan, gradient, gv.draws, [gv.seed, step, j], nbar, direction)
        info.append(f"{name}: {replayed} steps replayed, departure {sets[name].departure_share.mean():.2f}")
    out = summarise_draws(sets, gv.bootstrap, seed=gv.seed + step)
    extra = [{"method": "batch", "metric": m, "value": v, "lo": np.nan, "hi": np.nan, "n_draws": gv.oracle_samples}
             for m, v in (("p_mean", float(p_true.mean())), ("p_zero_share", float(np.mean(p_true == 0))),
                          ("p_one_share", float(np.mean(p_true == 1))), ("prompts", float(q)),
                          ("budget", float(budget)), ("parameters", float(len(direction))))]
    out = pd.concat([out, pd.DataFrame(extra)], ignore_index=True)
    out.insert(0, "step", step)
    log(f"step {step}: p̄={p_true.mean():.3f}, {time.perf_counter() - t0:.0f}s; " + "; ".join(info))
    return out


def run_grad_variance(cfg: TrainConfig, run_dir: str | Path, out_dir: str | Path, gv: GradVarConfig,
                      progress: bool = False, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Train (or reuse) the uniform run's checkpoints, measure every checkpoint, write
    OUT/gradient_variance.csv (tidy: step, method, metric, value, lo, hi, n_draws) and
    OUT/gradient_variance.json (the settings)."""
    out_dir = Path(out_dir)
    ckpts = train_uniform_checkpoints(cfg, run_dir, gv.steps, progress=progress)
    records = load_records(run_dir) if max(gv.steps) > 0 else pd.DataFrame(
        columns=["step", "prompt_id", "n", "successes", "loss"])
    frames = [measure_checkpoint(cfg, ckpts[s], s, records, gv, log=log) for s in sorted(gv.steps)]
    df = pd.concat(frames, ignore_index=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    df.to_csv(out_dir / "gradient_variance.csv", index=False)
    settings = {"grad_variance": dataclasses.asdict(gv), "profile": cfg.profile, "train_config": to_dict(cfg),
                "run_dir": str(run_dir)}
    (out_dir / "gradient_variance.json").write_text(json.dumps(settings, indent=1, default=str))
    return df


# ----------------------------------------------------------------------------- notebooks


def baseline_overrides(section: str, baseline: str, params_file: str | Path = "params.yaml",
                       overrides: dict | None = None) -> dict:
    """The config overrides of a paper's baseline arm: params.yaml's ``base`` + the arm's keys +
    the notebook's ``overrides`` (what the measured uniform run must share with the paper's arms)."""
    from replication.orchestration.grid import load_section

    sec = load_section(section, params_file)
    if baseline not in (sec.get("arms") or {}):
        raise ValueError(f"{section}: no arm {baseline!r} in {params_file}; arms: {sorted(sec.get('arms') or {})}")
    return {**(sec.get("base") or {}), **sec["arms"][baseline], **dict(overrides or {})}


def measure(profile: str, overrides: dict | None, out_dir: str | Path, cache_root: str | Path | None = None,
            log: Callable[[str], None] = print, **settings) -> pd.DataFrame:
    """What a paper notebook calls: ``run_grad_variance`` for ``profile`` + ``overrides`` (the
    paper's base keys), cached under ``cache_root/<key>`` where the key hashes the resolved
    training config, the measurement settings, the base model's files and this module's source —
    so the papers that share a base (DynaMO and GDRO) measure once. Copies the CSV/JSON to
    ``out_dir`` and returns the frame. ``settings``: GradVarConfig fields (steps, draws, ...);
    steps None = (0, a third of the profile's steps, all of them). ``cache_root`` None =
    $REPLICATION_RUN_CACHE/gradvar (the run cache's root, default .cache/runs)."""
    import hashlib
    import os

    from replication.config import load_profile

    cfg = load_profile(profile, dict(overrides or {}))
    if settings.get("steps") is None:
        settings["steps"] = tuple(dict.fromkeys((0, max(1, cfg.steps // 3), cfg.steps)))
    if cache_root is None:
        cache_root = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs")) / "gradvar"
    gv = GradVarConfig(**settings)
    h = hashlib.sha256()
    h.update(json.dumps({"cfg": to_dict(cfg), "gv": dataclasses.asdict(gv)}, sort_keys=True, default=str).encode())
    model_dir = Path(cfg.model.path)
    if model_dir.is_dir():
        for f in sorted(model_dir.iterdir()):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".model", ".txt"):
                h.update(f.name.encode())
                h.update(f.read_bytes())
    h.update(Path(__file__).read_bytes())
    cache = Path(cache_root) / h.hexdigest()[:16]
    out_dir = Path(out_dir)
    if not (cache / "gradient_variance.csv").exists():
        run_grad_variance(cfg, cache / "run", cache, gv, log=log)
        shutil.rmtree(cache / "run", ignore_errors=True)  # checkpoints are not needed once measured
    else:
        log(f"grad-variance: cached {cache}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("gradient_variance.csv", "gradient_variance.json"):
        shutil.copy2(cache / name, out_dir / name)
    return pd.read_csv(out_dir / "gradient_variance.csv")
