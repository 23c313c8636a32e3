"""Step time of the trainer with 1 process vs 2 processes (torchrun, gloo) on CPU.

    .venv/bin/python benchmarks/bench_processes.py --model results/base-model [--steps 8] \
        [--profile default] [--allocator uniform] [--prompts 64] [--set optim.fused=true ...] \
        [--repeats 3] [--json out.json]

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
machine's other load: run it on an idle machine and read them as a ratio. On this 2-core machine
the same way's step moves by 10-20 % from one run to the next, as much as the margins the targets
ask for, so ``--repeats N`` runs N rounds of every way, interleaved (each round's order rotated by
one), takes each ratio within a round, and prints the median over rounds with its range.

``--device cuda`` runs every way on GPUs instead (``model.device=cuda``: nccl, each rank on the GPU
of its LOCAL_RANK; each process of the no-communication pair sees one GPU of its own through
CUDA_VISIBLE_DEVICES). nccl runs one rank per GPU, so the 2-process ways need two GPUs: the
benchmark refuses, before any run, a machine with fewer than its ways ask for. Not run on GPUs in
this repository yet (docs/paper_scale.md §5).
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
        "--set", f"model.device={args.device}",
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


def _env(threads: int, gpu: int | None = None) -> dict[str, str]:
    """A run's environment; ``gpu``: the one GPU a process of the no-communication pair may see,
    counted among the GPUs this benchmark sees (the ``gpu``-th entry of CUDA_VISIBLE_DEVICES when
    that is set)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
           "DVC_NO_ANALYTICS": "1"}
    if gpu is not None:
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[gpu].strip() if visible else str(gpu)
    return env


def gpus_missing(device: str, ways: list[str]) -> str | None:
    """Why ``ways`` cannot run on ``device`` (None when they can): on CUDA every process of a way
    needs a GPU of its own."""
    if device != "cuda":
        return None
    import torch

    need = max(WAYS[w][0] for w in ways)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have >= need:
        return None
    return (f"--device cuda: the ways {','.join(ways)} need {need} GPU(s), one per process (nccl runs one "
            f"rank per GPU); this machine has {have}")


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
               "--set", f"eval.prompts_per_set={args.eval_prompts}", "--set", f"model.device={args.device}",
               ] + _overrides(args)
        env = _env(1, gpu=r if args.device == "cuda" else None)
        procs.append((cmd, subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
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


WAYS = {"1x1": (1, 1, "replicate"), "1x2": (1, 2, "replicate"), "2x1": (2, 1, "replicate"),
        "2x1fsdp": (2, 1, "fsdp"), "2x1free": (2, 1, "free")}
LABELS = {"1x1": "1 x 1", "1x2": "1 x 2", "2x1": "2 x 1", "2x1fsdp": "2 x 1 (fsdp)", "2x1free": "2 x 1 (no comm)"}
RATIOS = (("2 x 1 / 1 x 1 (replicated)", "2x1", "1x1"), ("2 x 1 / 1 x 1 (FSDP)", "2x1fsdp", "1x1"),
          ("2 x 1 no comm / 1 x 1 (the floor)", "2x1free", "1x1"), ("2 x 1 / 2 x 1 no comm", "2x1", "2x1free"),
          ("FSDP / replicated", "2x1fsdp", "2x1"), ("2 x 1 / 1 x 2", "2x1", "1x2"))


def round_order(ways: list[str], k: int) -> list[str]:
    """Round ``k``'s order of the ways: rotated by one per round, so that no way always runs
    first (on a warm or a cold machine) or right after the same neighbour."""
    k %= max(len(ways), 1)
    return ways[k:] + ways[:k]


def summarize(rounds: list[dict[str, float]]) -> list[tuple[str, list[float]]]:
    """Each ratio's value in every round that ran both of its ways (a ratio is taken within a
    round, between ways that ran minutes apart, never across rounds)."""
    out = []
    for name, a, b in RATIOS:
        vals = [r[a] / r[b] for r in rounds if a in r and b in r]
        if vals:
            out.append((name, vals))
    return out


def format_ratio(vals: list[float]) -> str:
    """A ratio's rounds as printed and as docs/paper_scale.md quotes them: the median, then the
    range when there are several rounds."""
    med = f"{statistics.median(vals):.2f}"
    return med if len(vals) < 2 else f"{med} [{min(vals):.2f}, {max(vals):.2f}]"


def phase_medians(rounds_of_way: list[list[dict[str, float]]], rank: int) -> dict[str, float]:
    """One way's per-phase split of ``rank``: each phase's median over the rounds."""
    return {ph: statistics.median(s[rank][ph] for s in rounds_of_way) for ph in PHASES}


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
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds of every way, interleaved (each round rotates the order); ratios are "
                         "taken within a round and printed as the median over rounds with their range")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every way alike (e.g. optim.fused=true)")
    ap.add_argument("--json", type=Path, default=None, help="also write every round's figures here")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where every way trains (cuda: one GPU per process, nccl)")
    args = ap.parse_args()
    ways = args.ways.split(",")
    unknown = [w for w in ways if w not in WAYS]
    if unknown or args.repeats < 1:
        sys.exit(f"unknown ways {unknown} (known: {', '.join(WAYS)})" if unknown else "--repeats must be >= 1")
    missing = gpus_missing(args.device, ways)
    if missing:
        sys.exit(missing)
    print(f"profile={args.profile} allocator={args.allocator} prompts/step={args.prompts} "
          f"steps={args.steps} repeats={args.repeats} device={args.device} cpus={os.cpu_count()} "
          f"load={os.getloadavg()[0]:.2f}"
          + "".join(f" {kv}" for kv in args.set))
    print(f"{'round':>5} {'processes x threads':>20} {'median step s':>14} {'wall s':>8} {'load 1-min':>11}")
    rounds: list[dict[str, float]] = []
    splits: dict[str, list[list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.repeats):
            steps = {}
            for w in round_order(ways, k):
                nproc, threads, sharding = WAYS[w]
                step, wall, split = run(nproc, threads, args, Path(tmp) / f"r{k}{w}", sharding)
                steps[w] = step
                splits.setdefault(w, []).append(split)
                print(f"{k:>5} {LABELS[w]:>20} {step:14.3f} {wall:8.1f} {os.getloadavg()[0]:11.2f}", flush=True)
            rounds.append(steps)
    summary = summarize(rounds)
    print("ratios of median steps within a round" + (": median over rounds [min, max]; each round"
                                                      if args.repeats > 1 else ":"))
    for name, vals in summary:
        each = "; " + ", ".join(f"{v:.2f}" for v in vals) if len(vals) > 1 else ""
        print(f"  {name}: {format_ratio(vals)}{each}")
    print("per-phase split, median seconds per step, by rank" + (" (median over rounds)" if args.repeats > 1 else "")
          + ":")
    print(f"{'way':>20} {'rank':>4} " + " ".join(f"{ph:>11}" for ph in PHASES))
    for w in ways:
        for r in range(len(splits[w][0])):
            phases = phase_medians(splits[w], r)
            print(f"{LABELS[w]:>20} {r:>4} " + " ".join(f"{phases[ph]:11.4f}" for ph in PHASES))
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                                   for k, v in vars(args).items()},
                                         "rounds": rounds, "ratios": dict(summary), "splits": splits}, indent=1))


if __name__ == "__main__":
    main()
