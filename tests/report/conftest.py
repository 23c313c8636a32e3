"""Synthetic exported runs (OUT/<arm>/s<seed>/ as orchestration.run_cache.export_run writes them), built in
tmp_path: three arms × three seeds with known effects, so the report code is tested on the
real file formats without training anything."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from replication.store import write_manifest

SETS = ("add2-heldout", "mul2-heldout")
K = 4
ARMS = {"uniform": 0.0, "vip": 0.10, "gdro": 0.01}
"""Arm → true improvement of mean@4 / pass@4 over uniform (vip: large, gdro: within noise)."""
SEEDS = (0, 1, 2)
STEPS, Q, POOL, N_BINS = 12, 8, 40, 10


def _eval(rng, shift: float) -> dict:
    out, pooled = {}, []
    for j, s in enumerate(SETS):
        base = 0.30 + 0.1 * j + shift
        m = float(np.clip(base + rng.normal(0, 0.01), 0, 1))
        p = float(np.clip(m + 0.2 + rng.normal(0, 0.01), 0, 1))
        out[s] = {f"mean@{K}": m, f"pass@{K}": p, "pass@1": m, "greedy": m, "n_prompts": 20}
        pooled.append((m, p))
    avg = {key: float(np.mean([out[s][key] for s in SETS])) for key in (f"mean@{K}", f"pass@{K}", "pass@1", "greedy")}
    out["average"] = avg
    out["pooled"] = {f"mean@{K}": avg[f"mean@{K}"], f"pass@{K}": avg[f"pass@{K}"], "pass@1": avg["pass@1"],
                     "n_prompts": 40}
    return out


def write_run(dest: Path, arm: str, seed: int, shift: float) -> None:
    rng = np.random.default_rng(1000 * seed + len(arm))
    dest.mkdir(parents=True, exist_ok=True)
    allocator = {"uniform": "uniform", "vip": "vip", "gdro": "rollout-gdro"}[arm]
    metrics = {
        "allocator": allocator, "estimator": "grpo", "modulation": None,
        "prompt_weights": "prompt-gdro" if arm == "gdro" else None, "seed": seed, "steps": STEPS,
        "budget_per_step": Q * 4, "rollouts_total": STEPS * Q * 4, "wall_seconds": 10.0,
        "eval_before": _eval(rng, 0.0), "eval_after": _eval(rng, shift),
    }
    (dest / "metrics.json").write_text(json.dumps(metrics))
    (dest / "config.json").write_text(json.dumps({"seed": seed, "allocator": {"name": allocator, "options": {}},
                                                  "task": {"options": {}}}))
    p_true = np.linspace(0.05, 0.95, POOL)
    steps, prompts = [], []
    for t in range(STEPS):
        ids = rng.choice(POOL, Q, replace=False)
        n = np.full(Q, 4) if arm == "uniform" else rng.integers(2, 7, Q)
        k = rng.binomial(n, p_true[ids])
        row = {"step": t, "rollouts": int(n.sum()), "reward": float(k.sum() / n.sum()),
               "accuracy": float(k.sum() / n.sum()), "prompt_accuracy": float(np.mean(k / n)),
               "zero_variance_frac": float(np.mean((k == 0) | (k == n))), "effective_rollout_frac": 0.5,
               "counts_hist": np.bincount(n, minlength=17).tolist(), "allocator_seconds": 0.01,
               "step_seconds": 0.5, "grad_norm": float(1 + rng.random()), "entropy": float(2 - 0.05 * t),
               "clipfrac": 0.0, "approx_kl": 0.0, "pg_loss": 0.0}
        if arm == "gdro":
            w = rng.random(N_BINS)
            row["weight_mass_per_bin"] = (w / w.sum()).tolist()
        steps.append(row)
        for j, i in enumerate(ids):
            prompts.append({"step": t, "prompt_id": f"q{i:03d}", "n": int(n[j]), "successes": int(k[j]),
                            "predicted_p": float(p_true[i]) if arm == "vip" else None,
                            "bin": int(min(p_true[i] * N_BINS, N_BINS - 1)) if arm == "gdro" else None,
                            "weight": 1.0, "loss": float(rng.normal(0, 0.1))})
    (dest / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    with gzip.open(dest / "prompts.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in prompts))
    write_manifest(dest, kind="export", extra={"steps": STEPS})  # readers verify every run


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    for arm, shift in ARMS.items():
        for seed in SEEDS:
            write_run(root / arm / f"s{seed}", arm, seed, shift)
    return root
