"""The per-replica costs of a replicated update on CPU, each measured alone (docs/paper_scale.md §5):
the gradient all-reduce over gloo between 2 processes, the AdamW step with each of torch's
kernels (the per-parameter loop, the trainer's default; foreach; fused, ``optim.fused``) over the
whole policy and over half of it (what one of 2 ranks would step with a sharded optimizer), the
gradient clip, the AdamW step over the FSDP-sharded policy (foreach, the FSDP default, and
fused), and the replicated step against a sharded one (ZeRO-1: torch's ``ZeroRedundancyOptimizer``
over the same AdamW loop, each rank stepping its share and then broadcasting it), both ranks at
once.

    .venv/bin/python benchmarks/bench_update_costs.py --model .cache/smollm2-135m-instruct

Launches itself under ``torch.distributed.run`` (2 processes, 1 thread each); rank 0 prints the
median of ``--repeats`` timings per cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def _median(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _ranks(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    params = [p for p in AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).parameters()]
    n = sum(p.numel() for p in params)
    flat = torch.randn(n)

    def all_reduce():
        dist.barrier()
        dist.all_reduce(flat)

    rows = {"gradient all-reduce, 2 ranks (s)": _median(all_reduce, args.repeats)}
    kernels = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
    if dist.get_rank() == 0:
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        half = params[: len(params) // 2]
        for kernel, kw in kernels.items():  # the trainer's default is the loop (optim.fused)
            full_opt = torch.optim.AdamW(params, lr=1e-6, **kw)
            half_opt = torch.optim.AdamW(half, lr=1e-6, **kw)
            full_opt.step(), half_opt.step()  # state allocated: time the steady step
            rows[f"AdamW step ({kernel}), all parameters (s)"] = _median(full_opt.step, args.repeats)
            rows[f"AdamW step ({kernel}), first half of the tensors "
                 f"({sum(p.numel() for p in half) / 1e6:.0f} M) (s)"] = _median(half_opt.step, args.repeats)
            del full_opt, half_opt
        rows["gradient clip, all parameters (s)"] = _median(
            lambda: torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True), args.repeats)
    dist.barrier()
    rows.update(_sharded_step_rows(args, params))
    rows.update(_fsdp_rows(args))
    if dist.get_rank() == 0:
        print(f"{n / 1e6:.1f} M parameters, {4 * n / 2**20:.0f} MiB of fp32 gradient; median of {args.repeats}")
        for k, v in rows.items():
            print(f"{k:>60} {v:8.3f}")
    dist.barrier()
    dist.destroy_process_group()


def _sharded_step_rows(args: argparse.Namespace, params: list) -> dict[str, float]:
    """Every rank stepping all parameters (DDP, the trainer) against ZeRO-1 (each rank steps the
    parameters it owns, then every rank's updated ones are broadcast: the same loop per
    parameter, so the same numbers), both ranks at once as in a 2-process step."""
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    full = torch.optim.AdamW(params, lr=1e-6, foreach=False)
    zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=1e-6, foreach=False)
    full.step(), zero.step()  # state allocated: time the steady step
    rows = {
        "AdamW step (loop), all parameters, 2 ranks at once (s)": _median(
            lambda: (dist.barrier(), full.step()), args.repeats),
        "ZeRO-1 step (loop on its share + broadcast), 2 ranks at once (s)": _median(
            lambda: (dist.barrier(), zero.step()), args.repeats),
    }
    del full, zero
    for p in params:
        p.grad = None
    return rows


def _fsdp_rows(args: argparse.Namespace) -> dict[str, float]:
    """The AdamW step over the policy sharded as the trainer shards it (train/fsdp.shard_policy:
    every decoder layer, then the root), both ranks stepping their shards at once: the steady step and the first one,
    whose DTensor sharding propagation is paid once per op."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    from replication.train.distributed import World
    from replication.train.fsdp import shard_policy

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    shard_policy(model, World(rank=dist.get_rank(), size=dist.get_world_size(), fsdp=True))  # the trainer's layout
    for p in model.parameters():
        p.grad = DTensor.from_local(torch.randn_like(p.to_local()) * 1e-3, p.device_mesh, p.placements)
    rows = {}
    for kernel, kw in {"foreach": {"foreach": True}, "fused": {"fused": True}}.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6, **kw)
        dist.barrier()
        rows[f"FSDP AdamW step ({kernel}), first step, 2 ranks at once (s)"] = _median(opt.step, 1)
        rows[f"FSDP AdamW step ({kernel}), steady, 2 ranks at once (s)"] = _median(
            lambda: (dist.barrier(), opt.step()), args.repeats)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF folder of the policy")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if "RANK" in os.environ:
        return _ranks(args)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", __file__,
           "--model", args.model, "--repeats", str(args.repeats)]
    sys.exit(subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode)


if __name__ == "__main__":
    main()
