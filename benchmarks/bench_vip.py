"""Time one VIP step at the paper's scale: plan + observe for 512 prompts over a 17,398-prompt pool.

    .venv/bin/python benchmarks/bench_vip.py [--repeats 15] [--threads 2]

Pool: 17,398 random unit vectors in 384-d (DAPO-Math-17k deduplicated, all-MiniLM-L6-v2 size);
batch 512, n̄ = 8 (budget 4096), bounds [4, 32], Dr. GRPO objective. Prints the median (and
minimum) wall time of predict / solve / observe (and, timed alone, observe's full-pool K·α pass)
and of the whole plan + observe, next to a plain float32 numpy full-pool mean update (squared
distances, exp, solve, mat-vec) for comparison. The machine's 1-minute load average is printed:
on a shared 2-core machine, figures under load are several times the idle ones.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from replication.allocation import PromptPool, make_allocator, solve_integer

N_POOL, DIM, BATCH, MEAN_N, LOWER, UPPER = 17_398, 384, 512, 8, 4, 32


def numpy_reference_update(
    x: np.ndarray, mean: np.ndarray, idx: np.ndarray, target: np.ndarray, h: float, r: float
) -> np.ndarray:
    """The textbook update, float32 except the small solve: m + K_{·B}(K_BB + rI)⁻¹(ĝ_B − m_B)."""
    xb = x[idx]
    sq = np.einsum("ij,ij->i", x, x)
    d2 = sq[:, None] + sq[idx][None, :] - 2.0 * (x @ xb.T)
    k = np.exp(-d2 / np.float32(2 * h * h))
    k_bb = k[idx].astype(np.float64) + r * np.eye(len(idx))
    alpha = np.linalg.solve(k_bb, target - mean[idx]).astype(np.float32)
    return mean + k @ alpha


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N_POOL, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = tuple(range(N_POOL))
    pool = PromptPool(ids, ("",) * N_POOL, x)

    t_build, alloc = timed(lambda: make_allocator("vip", pool=pool, estimator="drgrpo", lower=LOWER, upper=UPPER,
                                                  warmup_steps=0))
    gp = alloc.predictor.gp
    budget = MEAN_N * BATCH
    p_true = rng.uniform(size=N_POOL)
    rows: dict[str, list[float]] = {k: [] for k in (
        "predict", "solve", "observe", "  of which K·α pass", "plan+observe", "numpy reference update")}
    batches = []
    for rep in range(args.repeats + 2):  # two warm-up rounds are not recorded
        sel = rng.choice(N_POOL, BATCH, replace=False)
        batch = [ids[i] for i in sel]
        t_pred, p = timed(lambda: alloc.predict(batch))
        pc = np.clip(p, 1e-6, 1 - 1e-6)
        t_solve, _ = timed(lambda: solve_integer(pc * (1 - pc), budget, LOWER, UPPER, "drgrpo"))
        t_plan, counts = timed(lambda: alloc.plan(batch, budget))
        rewards = (rng.random(int(counts.sum())) < np.repeat(p_true[sel], counts)).astype(float)
        t_obs, _ = timed(lambda: alloc.observe(batch, counts, rewards))
        t_pass, _ = timed(lambda: gp.kernel_matvec(sel, np.ones(BATCH)))  # observe's big pass, alone
        batches.append((sel, counts, rewards))
        if rep >= 2:
            for key, val in zip(rows, (t_pred, t_solve, t_obs, t_pass, t_plan + t_obs)):
                rows[key].append(val * 1e3)
    # The reference runs in its own loop: numpy's BLAS threads keep spinning after each call and
    # would slow the torch calls of an interleaved loop (and the other way round).
    mean = gp.mean.astype(np.float32)
    r = gp.config.noise + gp.config.jitter
    for rep, (sel, counts, rewards) in enumerate(batches):
        k = np.bincount(np.repeat(np.arange(BATCH), counts), weights=rewards, minlength=BATCH)
        p_hat = np.clip(k / counts, 0.01, 0.99)
        target = np.log(p_hat / (1 - p_hat))
        t_ref, mean = timed(lambda: numpy_reference_update(x, mean, sel, target, gp.bandwidth, r))
        if rep >= 2:
            rows["numpy reference update"].append(t_ref * 1e3)

    print(f"VIP step: pool {N_POOL} x {DIM}-d, batch {BATCH}, budget {budget} (n̄={MEAN_N}), "
          f"bounds [{LOWER},{UPPER}], "
          f"torch threads {torch.get_num_threads()}, {args.repeats} repeats")
    print(f"load average before/after: {load0:.2f} / {os.getloadavg()[0]:.2f}")
    print(f"allocator build (GP set-up, median bandwidth {gp.bandwidth:.3f}): {t_build * 1e3:.0f} ms")
    for key, vals in rows.items():
        print(f"  {key:<24} median {np.median(vals):7.1f} ms   min {np.min(vals):7.1f} ms")


if __name__ == "__main__":
    main()
