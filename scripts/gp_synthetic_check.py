"""VIP's GP observation noise σ_n² and logit clip ε on prompts whose success probability is known
(docs/fidelity/vip.md #5/#6; GPConfig.noise and clip_eps).

The official code runs the GP with no observation noise (jitter only) and ε = 1e-6, so an all-fail
group becomes a logit of −13.8 that the GP interpolates and extrapolates to its neighbours. The
paper gives neither value. This check scores settings on a synthetic pool where the truth is
known, so it needs no run:

- ``--prompts`` unit-norm ``--dim``-d embeddings in ``--clusters`` clusters (cluster centres plus
  Gaussian spread, normalised);
- each prompt's true logit is linear in its embedding (a random unit direction, scaled so that
  the logits spread over about ±``--spread``) plus a drift that raises every logit by ``--drift``
  over the run — the policy improving;
- each step draws ``--batch`` prompts without replacement, every predictor predicts their p from
  the earlier steps only, then ``--rollouts`` Bernoulli draws per prompt are observed;
- score: the mean absolute error of the predicted p against the TRUE p over steps
  ``--burn-in``..``--steps``−1 (no binomial floor: the truth is known).

Every setting is VIP's registered GP predictor with the median-heuristic bandwidth unless its
options say otherwise; the references are the per-prompt moving average and ridge regression on
the logit target (replication.allocation.predictors, the same ones the predictor study replays).

    python scripts/gp_synthetic_check.py --out results/regime/gp_synthetic_check.json

writes every row, the arguments and the command into one JSON file, written whole
(replication.store.write_atomic): the evidence behind docs/fidelity/vip.md's generated block
(replication.report.prose_regime, block ``gp-synthetic-check``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import expit
from tqdm.auto import tqdm

from replication.allocation import make_predictor

CODE_NOISE, CODE_EPS = 0.0, 1e-6
"""The official code's values: no observation noise (the GP keeps its jitter), ε = 1e-6."""
NOISES = (CODE_NOISE, 0.25, 0.5, 1.0, 2.0, 4.0)
"""σ_n² rows: the code's none, then around the sampling variance of logit(k/n) at n = 8."""
EPSILONS = (CODE_EPS, 0.01, 0.03, 0.0625, 0.125)
"""ε columns: the code's 1e-6 (logit ±13.8), then clips at up to 1/8, one rollout of 8."""
EXTRA = {  # single settings the doc discusses beside the grid
    "h = 0.4, code's σ_n² and ε": {"bandwidth": 0.4, "noise": CODE_NOISE, "clip_eps": CODE_EPS},
    "σ_n² = 0.5, ε = 0.01, set_observed_to_target": {"noise": 0.5, "clip_eps": 0.01,
                                                      "set_observed_to_target": True},
}


def synthetic_pool(args: argparse.Namespace, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(unit-norm embeddings [N, d], the logit at the run's start [N])."""
    centres = rng.standard_normal((args.clusters, args.dim))
    x = centres[rng.integers(args.clusters, size=args.prompts)] + args.cluster_spread * rng.standard_normal(
        (args.prompts, args.dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.standard_normal(args.dim)
    z = x @ (w / np.linalg.norm(w))
    logit = args.spread * (z - z.mean()) / (np.abs(z - z.mean()).max()) + args.offset
    return x.astype(np.float32), logit


def score(options: dict, name: str, x: np.ndarray, logit0: np.ndarray, args: argparse.Namespace) -> float:
    """MAE of ``name``'s predicted p against the true p, steps burn-in.. (same draws for every predictor)."""
    rng = np.random.default_rng([args.seed, 1])  # the batches and rollouts: identical for every setting
    model = make_predictor(name, embeddings=x, n_pool=len(x), **options)
    errors = []
    for step in range(args.steps):
        idx = rng.choice(len(x), size=args.batch, replace=False)
        p = expit(logit0[idx] + args.drift * step / args.steps)
        k = rng.binomial(args.rollouts, p)
        if step >= args.burn_in:
            errors.append(np.abs(np.asarray(model.predict(idx), dtype=np.float64) - p))
        model.observe(idx, k, np.full(len(idx), args.rollouts))
    return float(np.mean(np.concatenate(errors)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--clusters", type=int, default=30)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--cluster-spread", type=float, default=0.3, help="std of a prompt around its cluster centre")
    ap.add_argument("--spread", type=float, default=3.0, help="largest |true logit − mean| at the start")
    ap.add_argument("--offset", type=float, default=-0.5, help="mean true logit at the start")
    ap.add_argument("--drift", type=float, default=1.0, help="logit gained by every prompt over the run")
    ap.add_argument("--batch", type=int, default=256, help="prompts per step")
    ap.add_argument("--rollouts", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--burn-in", type=int, default=5, help="steps not scored")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the rows and their provenance to this JSON file")
    args = ap.parse_args()
    from replication.report.study_output import check_study_out

    check_study_out(args.out)  # results/ only from its dvc.yaml stage
    if not 0 <= args.burn_in < args.steps or args.batch > args.prompts:
        sys.exit(f"need 0 <= --burn-in < --steps and --batch <= --prompts (got {args.burn_in}, {args.steps}, "
                 f"{args.batch}, {args.prompts})")
    x, logit0 = synthetic_pool(args, np.random.default_rng(args.seed))
    jobs = [("moving-average", "moving-average", {}), ("ridge", "ridge", {})]
    jobs += [(f"σ_n² = {n:g}, ε = {e:g}", "gp", {"noise": n, "clip_eps": e}) for n in NOISES for e in EPSILONS]
    jobs += [(label, "gp", opts) for label, opts in EXTRA.items()]
    rows = []
    for label, name, opts in tqdm(jobs, desc="settings", unit="setting"):
        t = time.time()
        rows.append({"setting": label, "predictor": name, "options": opts,
                     "mae": round(score(opts, name, x, logit0, args), 4), "seconds": round(time.time() - t, 1)})
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    if args.out is not None:
        from replication.store import write_atomic

        write_atomic(args.out, json.dumps({"args": {k: v for k, v in vars(args).items() if k != "out"},
                                           "command": shlex.join(["python", *sys.argv]),
                                           "code": {"noise": CODE_NOISE, "clip_eps": CODE_EPS}, "rows": rows},
                                          indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
