"""Several processes, one run: the plumbing that makes N ranks compute what one process would.

    torchrun --nproc_per_node 2 -m replication train --profile smoke --seed 0 --out runs/x
    accelerate launch --config_file configs/accelerate/ddp.yaml -m replication train ...

Both launchers set RANK / WORLD_SIZE / LOCAL_RANK (and MASTER_ADDR / MASTER_PORT); ``World.
from_env`` reads them and joins the process group (gloo on CPU, nccl on CUDA). Without them the
run is one process and every helper here is the identity, so the 1-process path is unchanged.

The contract (tested in tests/train/test_distributed.py against the 1-process run):
- every rank holds the same allocator / Prompt-GDRO / classifier state: all ranks plan() from
  the same seed and observe() the same gathered data, so no state is ever broadcast;
- a step's prompts are split into contiguous runs of whole groups, balanced by rollout count
  (``split_groups``); concatenating the ranks' parts in rank order gives the step's plan order;
- samples depend on (seed, step, prompt id, sample index) only (``rollout_seeds``), never on
  which rank drew them, so the union of the ranks' samples is the 1-process batch;
- the update's mini-batches are drawn over the GLOBAL rows with the same seeded permutation on
  every rank; each rank backpropagates the rows it holds, divided by the mini-batch's GLOBAL
  denominator, and the gradients are summed across ranks: the 1-process gradient of the whole
  mini-batch, up to float summation order;
- rank 0 alone writes logs, checkpoints, the model and metrics.json; every rank resumes from
  the same checkpoint.

With ``model.sharding: fsdp`` the policy is sharded instead of replicated (train/fsdp.py); the
contract above holds unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import torch

# Per-request seeds stay below 2**31 (vLLM stores them as int32 on some paths); the +j of a
# group's samples stays below 2**16 rollouts per prompt.
_SEED_SPACE = 2**31 - 2**16


def rollout_seeds(seed: int, stream: str, step: int, prompt_ids: Sequence[Hashable]) -> np.ndarray:
    """Base seed of each prompt's samples: sample j of prompt q uses ``seeds[q] + j``.

    A hash of (run seed, stream, step, prompt id): independent of the prompt's position in the
    batch and of the rank that generates it. ``stream`` separates training from evaluation.
    """
    out = np.empty(len(prompt_ids), dtype=np.int64)
    for q, pid in enumerate(prompt_ids):
        key = f"{int(seed)}|{stream}|{int(step)}|{type(pid).__name__}:{pid}".encode()
        out[q] = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") % _SEED_SPACE
    return out


def split_groups(counts: np.ndarray, world_size: int) -> list[slice]:
    """Contiguous runs of whole prompt groups, one per rank, balanced by rollout count.

    Rank r's run ends at the first prompt whose cumulative count reaches r+1 shares of the total
    (deterministic: it depends on the counts only). Every rank gets at least one prompt, which
    needs Q >= world_size (checked by the trainer before any compute).
    """
    counts = np.asarray(counts, dtype=np.int64)
    q = len(counts)
    if q < world_size:
        raise ValueError(f"{q} prompts cannot be split across {world_size} ranks")
    cum = np.cumsum(counts)
    total = int(cum[-1]) if q else 0
    bounds = [0]
    for r in range(1, world_size):
        target = total * r / world_size
        end = int(np.searchsorted(cum, target, side="left")) + 1  # first prompt reaching target
        end = min(max(end, bounds[-1] + 1), q - (world_size - r))  # >= 1 prompt each
        bounds.append(end)
    bounds.append(q)
    return [slice(bounds[r], bounds[r + 1]) for r in range(world_size)]


def check_world(cfg: Any, world: "World") -> None:
    """Refuse, before any compute, a launch the split cannot serve (ConfigError: exit 2)."""
    from replication.config import ConfigError

    if cfg.rollout.prompts_per_step < world.size:
        raise ConfigError(f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} is smaller than "
                          f"the {world.size} processes: each rank needs at least one prompt group")
    tp = engine_group_size(cfg, world)
    if world.size % tp:
        raise ConfigError(f"rollout.vllm.tensor_parallel_size={tp} does not divide the {world.size} "
                          "processes: vLLM's external launcher groups consecutive ranks into one "
                          "tensor-parallel engine")


def engine_group_size(cfg: Any, world: "World") -> int:
    """Ranks that share one rollout engine: vLLM's tensor_parallel_size when several training
    processes run it under the external launcher (one engine sharded over consecutive ranks'
    GPUs, as TRL and verl colocate it); 1 = every rank has its own engine."""
    if not world.distributed or getattr(cfg.rollout, "engine", "hf") != "vllm":
        return 1
    return int(getattr(getattr(cfg.rollout, "vllm", None), "tensor_parallel_size", 1))


def generation_share(parts: list[slice], rank: int, group_size: int) -> slice:
    """The prompts this rank's engine generates: its own share (group size 1), or the union of
    its engine group's shares — every rank of a group sends the same requests, as a
    tensor-parallel engine needs, and keeps its own groups (``RolloutBatch.select_groups``)."""
    first = rank - rank % group_size
    return slice(parts[first].start, parts[first + group_size - 1].stop)


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the run: rank, number of ranks, local rank (GPU index)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    fsdp: bool = False
    """The policy is FSDP-sharded (train/fsdp.py): gradients arrive reduce-scattered, and every
    pass over the model is a collective that all ranks must run."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @classmethod
    def from_env(cls, device: str = "cpu") -> "World":
        """Join the launcher's process group (torchrun / accelerate launch), or one process.

        ``device``: the model's device setting; "cuda" (or "auto" with CUDA) uses nccl and pins
        this rank to GPU LOCAL_RANK, anything else gloo.
        """
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        if use_cuda:
            torch.cuda.set_device(local)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="nccl" if use_cuda else "gloo")
        return cls(rank=rank, size=size, local_rank=local)

    # ---------------------------------------------------------------- collectives
    def on_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on rank 0 only (e.g. checks that lock or clear the run folder); its result
        on rank 0 (None elsewhere). Its exception reaches every rank, so a refused run stops all
        ranks with the same message (exit 2 for a ConfigError) instead of leaving them waiting."""
        if not self.distributed:
            return fn()
        result, error = None, None
        if self.is_main:
            try:
                result = fn()
            except Exception as e:  # re-raised below on every rank
                error = e
        error = self.gather(error)[0]
        if error is not None:
            raise error
        return result

    def barrier(self) -> None:
        if self.distributed:
            torch.distributed.barrier()

    def gather(self, part: Any) -> list[Any]:
        """Every rank's ``part`` (any picklable object), in rank order, on every rank."""
        if not self.distributed:
            return [part]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, part)
        return out

    def concat(self, part: np.ndarray) -> np.ndarray:
        """The ranks' array parts concatenated in rank order (the step's plan order)."""
        if not self.distributed:
            return np.asarray(part)
        return np.concatenate([np.asarray(p) for p in self.gather(np.asarray(part))])

    def sum(self, x: float) -> float:
        """Sum of a Python number over ranks (exact for integers; rank-ordered for floats)."""
        if not self.distributed:
            return x
        return type(x)(sum(self.gather(x)))

    def min(self, x: float) -> float:
        return x if not self.distributed else min(self.gather(x))

    def max(self, x: float) -> float:
        return x if not self.distributed else max(self.gather(x))

    def sum_gradients(self, model: torch.nn.Module) -> None:
        """All-reduce (SUM) every parameter's gradient, one flat buffer; None grads count as 0.

        Each rank's gradient is its rows' partial sum already divided by the GLOBAL denominator,
        so the sum is the gradient of the whole mini-batch.
        """
        if not self.distributed or self.fsdp:  # FSDP reduce-scattered them in backward (a sum)
            return
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n

    def combine_stats(
        self, stats: dict[str, float], weight: float, weights: dict[str, float] | None = None
    ) -> dict[str, float]:
        """One mini-batch's diagnostics over all ranks: ``*_min`` → min, ``*_max`` → max,
        ``n_tokens`` and the losses (already over the global denominator) → sum, the rest → mean
        weighted by each rank's ``weight`` (its valid tokens), or by ``weights[key]`` for a mean
        over a sub-population (e.g. positive-advantage tokens): the 1-process value."""
        if not self.distributed:
            return stats
        parts = self.gather({k: (v, (weights or {}).get(k, float(weight))) for k, v in stats.items()})
        keys = sorted({k for s in parts for k in s})
        out: dict[str, float] = {}
        for k in keys:
            vals = [s[k] for s in parts if k in s and np.isfinite(s[k][0])]
            if not vals:
                out[k] = float("nan")
            elif k.endswith("_min"):
                out[k] = min(v for v, _ in vals)
            elif k.endswith("_max"):
                out[k] = max(v for v, _ in vals)
            elif k in ("n_tokens", "loss", "pg_loss", "kl"):
                out[k] = float(sum(v for v, _ in vals))
            elif k == "grad_norm":
                out[k] = vals[0][0]  # taken after the all-reduce: the same on every rank
            else:
                w = sum(wt for _, wt in vals)
                out[k] = float(sum(v * wt for v, wt in vals) / w) if w > 0 else vals[0][0]
        return out

    def close(self) -> None:
        if self.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


@dataclasses.dataclass(frozen=True)
class RowShard:
    """Which of the step's global rows this rank holds: rows [start, stop) of ``n_global``."""

    world: World
    n_global: int
    start: int
    stop: int

    @classmethod
    def whole(cls, n: int) -> "RowShard":
        return cls(World(), n, 0, n)

    def local(self, global_rows: np.ndarray) -> np.ndarray:
        """The mini-batch's rows held here, as indices into this rank's batch."""
        g = np.asarray(global_rows)
        return g[(g >= self.start) & (g < self.stop)] - self.start
