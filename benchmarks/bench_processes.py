"""Step time of the trainer with 1 process vs 2 processes (torchrun, gloo) on CPU.

    .venv/bin/python benchmarks/bench_processes.py --model results/base-model [--steps 8] \
        [--profile default] [--allocator uniform] [--prompts 64]

Runs ``python -m replication train`` four ways on the same global batch — 1 process × 1 thread,
1 process × 2 threads, 2 processes × 1 thread (``python -m torch.distributed.run --standalone
--nproc_per_node 2``) with the policy replicated, and the same with it FSDP-sharded
(``model.sharding=fsdp``, train/fsdp.py) — and prints, per way, the median ``step_seconds`` of rank 0's
steps.jsonl (first step dropped: warm-up) and the launcher's wall time (start-up, both
evaluations and the model save included). A 2-process step is generation and update on half
the rollouts each, plus the gathers and one gradient all-reduce per PPO mini-batch. The numbers
depend on the machine's other load: run it on an idle machine and read them as a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(nproc: int, threads: int, args: argparse.Namespace, out: Path,
        sharding: str = "replicate") -> tuple[float, float]:
    launch = [sys.executable, "-m", "replication"] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
        "-m", "replication"]
    cmd = launch + [
        "train", "--profile", args.profile, "--model", args.model, "--allocator", args.allocator,
        "--seed", "0", "--out", str(out), "--no-progress", "--max-steps", str(args.steps),
        "--set", f"model.threads={threads}", "--set", f"rollout.prompts_per_step={args.prompts}",
        "--set", f"eval.prompts_per_set={args.eval_prompts}", "--set", f"model.sharding={sharding}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
           "DVC_NO_ANALYTICS": "1"}
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nfailed:\n{p.stderr[-2000:]}")
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    return statistics.median(s["step_seconds"] for s in steps[1:]), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF folder of the policy (e.g. results/base-model)")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--allocator", default="uniform")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=64, help="prompts per step (global)")
    ap.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts per set")
    args = ap.parse_args()
    print(f"profile={args.profile} allocator={args.allocator} prompts/step={args.prompts} "
          f"steps={args.steps} cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    print(f"{'processes x threads':>26} {'median step s':>14} {'wall s':>8}")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for nproc, threads, sharding in ((1, 1, "replicate"), (1, 2, "replicate"), (2, 1, "replicate"),
                                         (2, 1, "fsdp")):
            step, wall = run(nproc, threads, args, Path(tmp) / f"p{nproc}t{threads}{sharding}", sharding)
            rows[(nproc, threads, sharding)] = step
            label = f"{nproc} x {threads}" + (" (fsdp)" if sharding == "fsdp" else "")
            print(f"{label:>26} {step:14.3f} {wall:8.1f}")
    one = rows[(1, 1, "replicate")]
    print(f"speed-up of 2 processes over 1 process x 1 thread: {one / rows[(2, 1, 'replicate')]:.2f}x "
          f"(replicated), {one / rows[(2, 1, 'fsdp')]:.2f}x (FSDP); 2 replicated over 1 process x 2 "
          f"threads: {rows[(1, 2, 'replicate')] / rows[(2, 1, 'replicate')]:.2f}x")


if __name__ == "__main__":
    main()
