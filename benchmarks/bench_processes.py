"""Step time of the trainer with 1 process vs 2 processes (torchrun, gloo) on CPU.

    .venv/bin/python benchmarks/bench_processes.py --model results/base-model [--steps 8] \
        [--profile default] [--allocator uniform] [--prompts 64] [--set optim.fused=true ...]

Runs ``python -m replication train`` on the same global batch — 1 process × 1 thread,
1 process × 2 threads, 2 processes × 1 thread (``python -m torch.distributed.run --standalone
--nproc_per_node 2``) with the policy replicated, and the same with it FSDP-sharded
(``model.sharding=fsdp``, train/fsdp.py) — and, as the floor no data-parallel scheme can beat
here (``2x1free``), two independent 1-process runs started together, each on half the prompts: the
same per-rank compute as the replicated 2 × 1 run with communication and waiting for free, on
the same two cores and memory bus. It prints, per way, the median ``step_seconds`` of rank 0's
steps.jsonl (first step dropped: warm-up), the launcher's wall time (start-up, both
evaluations and the model save included), the load average while it ran, and then every
rank's per-phase split (median seconds per step of ``rank_<phase>_seconds``: generate,
old-logprob, update, comm — the explicit tensor collectives — sync of the engine's weights, and
wait — the first gather after generation, mostly waiting for the slowest rank — and the rank's
CPU seconds in the step, which on a machine shared with other jobs tell what the step would
take with a core of its own). A 2-process step
is generation and update on half the rollouts each; the replicated policy's gradients are
all-reduced by DDP in buckets during backward (inside ``update``). The numbers depend on the
machine's other load: run it on an idle machine and read them as a ratio.
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


PHASES = ("generate", "old_logprob", "update", "comm", "sync", "wait", "cpu")


def run(nproc: int, threads: int, args: argparse.Namespace, out: Path,
        sharding: str = "replicate") -> tuple[float, float, list[dict[str, float]]]:
    """(median step s, wall s, per rank {phase: median s})."""
    if sharding == "free":
        return _run_free(nproc, args, out)
    launch = [sys.executable, "-m", "replication"] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
        "-m", "replication"]
    cmd = launch + [
        "train", "--profile", args.profile, "--model", args.model, "--allocator", args.allocator,
        "--seed", "0", "--out", str(out), "--no-progress", "--max-steps", str(args.steps),
        "--set", f"model.threads={threads}", "--set", f"rollout.prompts_per_step={args.prompts}",
        "--set", f"eval.prompts_per_set={args.eval_prompts}", "--set", f"model.sharding={sharding}",
    ] + _overrides(args)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=_env(threads), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\nfailed:\n{p.stderr[-2000:]}")
    steps = _steps(out)
    ranks = len(steps[0].get("rank_update_seconds", [0]))
    split = [{ph: statistics.median(s.get(f"rank_{ph}_seconds", [s.get(f"{ph}_seconds", 0.0)])[r] for s in steps)
              for ph in PHASES} for r in range(ranks)]
    return statistics.median(s["step_seconds"] for s in steps), wall, split


def _overrides(args: argparse.Namespace) -> list[str]:
    """``--set`` overrides given to the benchmark, passed to every way alike."""
    return [a for kv in args.set for a in ("--set", kv)]


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "DVC_NO_ANALYTICS": "1"}


def _steps(out: Path) -> list[dict]:
    """rank 0's steps.jsonl, first step (warm-up) dropped."""
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()][1:]


def _run_free(nproc: int, args: argparse.Namespace, out: Path) -> tuple[float, float, list[dict[str, float]]]:
    """``nproc`` independent 1-thread runs started together, each on 1/nproc of the prompts (seeds
    0..nproc-1): a data-parallel step whose communication costs nothing. Its step is the slowest
    process's step, taken step by step."""
    if args.prompts % nproc:
        sys.exit(f"--prompts {args.prompts} does not split over {nproc} processes")
    procs, outs = [], []
    t0 = time.perf_counter()
    for r in range(nproc):
        outs.append(out / f"rank{r}")
        cmd = [sys.executable, "-m", "replication", "train", "--profile", args.profile, "--model", args.model,
               "--allocator", args.allocator, "--seed", str(r), "--out", str(outs[-1]), "--no-progress",
               "--max-steps", str(args.steps), "--set", "model.threads=1",
               "--set", f"rollout.prompts_per_step={args.prompts // nproc}",
               "--set", f"eval.prompts_per_set={args.eval_prompts}"] + _overrides(args)
        procs.append((cmd, subprocess.Popen(cmd, env=_env(1), stdout=subprocess.DEVNULL,
                                            stderr=subprocess.PIPE, text=True)))
    for cmd, p in procs:
        err = p.communicate()[1]
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)}\nfailed:\n{err[-2000:]}")
    wall = time.perf_counter() - t0
    by_rank = [_steps(o) for o in outs]
    split = [{ph: statistics.median(s.get(f"{ph}_seconds", s.get(f"rank_{ph}_seconds", [0.0])[0]) for s in steps)
              for ph in PHASES} for steps in by_rank]
    step = statistics.median(max(s["step_seconds"] for s in same) for same in zip(*by_rank))
    return step, wall, split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF folder of the policy (e.g. results/base-model)")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--allocator", default="uniform")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=64, help="prompts per step (global)")
    ap.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts per set")
    ap.add_argument("--ways", default="1x1,1x2,2x1,2x1fsdp,2x1free",
                    help="which ways to run (comma-separated; ratios need 1x1 and 2x1)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every way alike (e.g. optim.fused=true)")
    args = ap.parse_args()
    print(f"profile={args.profile} allocator={args.allocator} prompts/step={args.prompts} "
          f"steps={args.steps} cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}"
          + "".join(f" {kv}" for kv in args.set))
    print(f"{'processes x threads':>26} {'median step s':>14} {'wall s':>8} {'load 1-min':>11}")
    rows, splits = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        ways = {"1x1": (1, 1, "replicate"), "1x2": (1, 2, "replicate"), "2x1": (2, 1, "replicate"),
                "2x1fsdp": (2, 1, "fsdp"), "2x1free": (2, 1, "free")}
        for nproc, threads, sharding in (ways[w] for w in args.ways.split(",")):
            step, wall, split = run(nproc, threads, args, Path(tmp) / f"p{nproc}t{threads}{sharding}", sharding)
            label = f"{nproc} x {threads}" + {"fsdp": " (fsdp)", "free": " (no comm)"}.get(sharding, "")
            rows[(nproc, threads, sharding)], splits[label] = step, split
            print(f"{label:>26} {step:14.3f} {wall:8.1f} {os.getloadavg()[0]:11.2f}")
    one, two, fsdp, two_threads, free = (rows.get(w) for w in ((1, 1, "replicate"), (2, 1, "replicate"),
                                                                (2, 1, "fsdp"), (1, 2, "replicate"), (2, 1, "free")))
    for name, a, b in (("2 x 1 / 1 x 1 (replicated)", two, one), ("2 x 1 / 1 x 1 (FSDP)", fsdp, one),
                       ("2 x 1 no comm / 1 x 1 (the floor)", free, one), ("2 x 1 / 2 x 1 no comm", two, free),
                       ("FSDP / replicated", fsdp, two), ("2 x 1 / 1 x 2", two, two_threads)):
        if a and b:
            print(f"{name}: {a / b:.2f}")
    print("per-phase split, median seconds per step, by rank:")
    print(f"{'way':>20} {'rank':>4} " + " ".join(f"{ph:>11}" for ph in PHASES))
    for label, split in splits.items():
        for r, phases in enumerate(split):
            print(f"{label:>20} {r:>4} " + " ".join(f"{phases[ph]:11.4f}" for ph in PHASES))


if __name__ == "__main__":
    main()
