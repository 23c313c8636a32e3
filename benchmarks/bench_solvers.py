"""Timings of the allocation solvers at the papers' scale (VIP code: L=4, U=32, n̄=8).

    .venv/bin/python benchmarks/bench_solvers.py [--prompts 4096] [--repeats 21]

Prints the median wall time of solve_integer / solve_continuous (Dr. GRPO and RLOO) and of
water_level_allocation, on p ~ Beta(0.5, 0.5) (many near-0/1 prompts, as in RLVR batches).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from replication.allocation.solvers import solve_continuous, solve_integer
from replication.allocation.variance import bernoulli_variance, success_variance
from replication.allocation.water_level import water_level_allocation


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4096)
    parser.add_argument("--mean", type=int, default=8, help="mean rollouts per prompt (budget = mean * prompts)")
    parser.add_argument("--lower", type=int, default=4)
    parser.add_argument("--upper", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    q, budget = args.prompts, args.mean * args.prompts
    a = success_variance(rng.beta(0.5, 0.5, q))
    print(f"Q={q} budget={budget} bounds=[{args.lower},{args.upper}] median of {args.repeats} runs")
    for est in ("drgrpo", "rloo"):
        for label, solver in (("solve_integer", solve_integer), ("solve_continuous", solve_continuous)):
            ms = median_ms(lambda: solver(a, budget, args.lower, args.upper, est), args.repeats)
            print(f"  {label:<18} {est:<7} {ms:8.2f} ms")
    g = rng.integers(8, 200, q)
    sigma = np.sqrt(bernoulli_variance(rng.binomial(g, rng.beta(0.5, 0.5, q)), g))
    ms = median_ms(lambda: water_level_allocation(sigma, budget, args.lower, args.upper), args.repeats)
    print(f"  {'water_level_allocation':<26} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
