"""Host-memory page faults of large CPU tensors (docs/paper_scale.md §5, "Host memory").

Allocates, fills and frees a tensor ``--cycles`` times after ``--warmup`` such cycles and prints
their seconds and minor page faults. Run it once as is and once under each setting compared:

    .venv/bin/python benchmarks/bench_host_memory.py
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295 .venv/bin/python benchmarks/bench_host_memory.py
    THP_MEM_ALLOC_ENABLE=1 .venv/bin/python benchmarks/bench_host_memory.py

``--train-steps N`` then also runs N steps of ``python -m replication train`` (the smollm2
profile, one thread, 16 prompts) under the same environment and prints its CPU seconds (user,
kernel), minor faults and each step's update seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_processes import _env  # the same environment as the process benchmark's runs

REPO = Path(__file__).resolve().parents[1]


def cycles(megabytes: int, n: int, warmup: int) -> tuple[float, int]:
    """(seconds, minor faults) of ``n`` allocate-fill-free cycles, after ``warmup`` cycles (with
    the glibc setting the first few cycles still fault while the heap grows)."""
    import torch

    def one() -> None:
        x = torch.empty(megabytes * 2**20 // 4)
        x.fill_(1.0)
        del x

    for _ in range(warmup):
        one()
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    for _ in range(n):
        one()
    return time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


def train(model: str, steps: int) -> dict:
    """CPU seconds, minor faults and per-step update seconds of a smollm2 training run."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "replication", "train", "--profile", "smollm2", "--model", model,
               "--seed", "0", "--out", str(Path(tmp) / "run"), "--no-progress", "--max-steps", str(steps),
               "--set", "model.threads=1", "--set", "rollout.prompts_per_step=16", "--set", "eval.prompts_per_set=8"]
        p = subprocess.run(cmd, env=_env(1), capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}\nfailed:\n{p.stderr[-2000:]}")
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        steps_log = [json.loads(line) for line in (Path(tmp) / "run" / "steps.jsonl").read_text().splitlines()]
    return {"user_s": r.ru_utime, "kernel_s": r.ru_stime, "minor_faults": r.ru_minflt,
            "update_s": [round(s["update_seconds"], 2) for s in steps_log]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--megabytes", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--train-steps", type=int, default=0)
    ap.add_argument("--model", default=str(REPO / ".cache" / "smollm2-135m-instruct"))
    args = ap.parse_args()
    settings = {k: os.environ[k] for k in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE") if k in os.environ}
    print(f"settings: {settings or 'none'}")
    secs, faults = cycles(args.megabytes, args.cycles, args.warmup)
    print(f"{args.cycles} x (allocate, fill, free) of {args.megabytes} MB after {args.warmup}: {secs:.3f} s, {faults} minor faults")
    if args.train_steps:
        print(f"smollm2 1 x 1, {args.train_steps} steps: {train(args.model, args.train_steps)}")


if __name__ == "__main__":
    main()
