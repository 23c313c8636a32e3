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
  denominator, and the gradients are summed across ranks (DDP with a SUM hook, train/ddp.py,
  or FSDP's reduce-scatter): the 1-process gradient of the whole mini-batch, up to float
  summation order;
- the numbers ranks exchange travel as tensors (``gather_arrays``, ``exchange``, ``reduce``); the one pickled
  gather left carries rank 0's refusal (an exception) in ``on_main``;
- rank 0 alone writes logs, checkpoints, the model and metrics.json; every rank resumes from
  the same checkpoint.

With ``model.sharding: fsdp`` the policy is sharded instead of replicated (train/fsdp.py); the
contract above holds unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
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


def wants_fsdp(sharding: str, env: dict[str, str] | None = None) -> bool:
    """``model.sharding == 'fsdp'`` or accelerate's FSDP config (it sets ACCELERATE_USE_FSDP)."""
    e = os.environ if env is None else env
    return sharding == "fsdp" or e.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")


class CommClock:
    """Seconds this rank spent inside the World's explicit collectives since the last ``take``
    (the step's comm/sync figure; DDP's bucketed all-reduce runs inside backward and is not
    counted here)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def take(self) -> float:
        out, self.seconds = self.seconds, 0.0
        return out


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the run: rank, number of ranks, local rank (GPU index), and how
    the policy is spread over the ranks. Decided once, by ``from_env``."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    fsdp: bool = False
    """The policy is FSDP-sharded (train/fsdp.py): gradients arrive reduce-scattered, and every
    pass over the model is a collective that all ranks must run. False = replicated: with
    several ranks the policy is wrapped in DistributedDataParallel (train/ddp.py)."""
    backend: str = "gloo"
    """The process group's backend: nccl (CUDA) or gloo (CPU); numeric collectives travel as
    tensors on this backend's device."""
    clock: CommClock = dataclasses.field(default_factory=CommClock, compare=False, repr=False)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def sharding(self) -> str:
        """What this world does to the policy: 'none' (one process), 'ddp' or 'fsdp'."""
        return "fsdp" if self.fsdp else ("ddp" if self.distributed else "none")

    @classmethod
    def from_env(cls, device: str = "cpu", sharding: str = "replicate",
                 env: dict[str, str] | None = None) -> "World":
        """Join the launcher's process group (torchrun / accelerate launch), or one process.

        ``device``: the model's device setting; "cuda" (or "auto" with CUDA) uses nccl and pins
        this rank to GPU LOCAL_RANK, anything else gloo. ``sharding``: ``model.sharding``; FSDP
        also when accelerate's FSDP config says so (``wants_fsdp``). The collective timeout is
        ``collective_timeout()`` (train/rank_faults.py); a rank started by torchrun exits when
        its launcher dies.
        """
        from replication.train.rank_faults import collective_timeout, die_with_launcher

        e = os.environ if env is None else env
        size = int(e.get("WORLD_SIZE", "1"))
        if size <= 1:
            return cls()
        rank, local = int(e["RANK"]), int(e.get("LOCAL_RANK", "0"))
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        backend = "nccl" if use_cuda else "gloo"
        die_with_launcher(e)
        if use_cuda:
            torch.cuda.set_device(local)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend=backend, timeout=collective_timeout(backend, e))
        return cls(rank=rank, size=size, local_rank=local, fsdp=wants_fsdp(sharding, e), backend=backend)

    # ---------------------------------------------------------------- collectives
    @property
    def _device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def on_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on rank 0 only (e.g. checks that lock or clear the run folder); its result
        on rank 0 (None elsewhere). Its exception reaches every rank, so a refused run stops all
        ranks with the same message (exit 2 for a ConfigError) instead of leaving them waiting.
        The one pickled gather left: the payload is an exception object, not numbers."""
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
        """Every rank's ``part`` (any picklable object), in rank order, on every rank. Pickled:
        for non-numeric payloads only (``on_main``'s exception); numbers use the tensor
        collectives below."""
        if not self.distributed:
            return [part]
        out: list[Any] = [None] * self.size
        torch.distributed.all_gather_object(out, part)
        return out

    def gather_arrays(self, part: np.ndarray, lengths: Sequence[int] | None = None) -> list[np.ndarray]:
        """Every rank's 1-D numeric array, in rank order, as tensors: padded to the longest part
        and all-gathered once (twice when ``lengths``, the ranks' part lengths, is not known to
        every rank). Bool, integer and float dtypes come back unchanged (integers exact)."""
        part = np.asarray(part).reshape(-1)
        if not self.distributed:
            return [part]
        t0 = time.perf_counter()
        dtype = part.dtype
        wire = np.uint8 if dtype == bool else (np.int64 if np.issubdtype(dtype, np.integer) else np.float64)
        if lengths is None:
            lengths = [int(n) for n in self._all_gather(torch.tensor([part.size], dtype=torch.int64))[:, 0]]
        elif int(lengths[self.rank]) != part.size:
            raise ValueError(f"rank {self.rank}: part of {part.size} values, expected {lengths[self.rank]}")
        width = max(max(int(n) for n in lengths), 1)
        buf = torch.zeros(width, dtype=torch.from_numpy(np.zeros(0, wire)).dtype)
        buf[: part.size] = torch.from_numpy(part.astype(wire))
        rows = self._all_gather(buf)
        self.clock.seconds += time.perf_counter() - t0
        return [rows[r, : int(lengths[r])].numpy().astype(dtype) for r in range(self.size)]

    def concat(self, part: np.ndarray, lengths: Sequence[int] | None = None) -> np.ndarray:
        """The ranks' array parts concatenated in rank order (the step's plan order)."""
        if not self.distributed:
            return np.asarray(part)
        return np.concatenate(self.gather_arrays(part, lengths))

    def _all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """[size, *t.shape] on CPU: every rank's equally-shaped tensor."""
        t = t.to(self._device)
        out = torch.empty((self.size, *t.shape), dtype=t.dtype, device=t.device)
        torch.distributed.all_gather_into_tensor(out, t) if self.backend == "nccl" else \
            torch.distributed.all_gather(list(out.unbind(0)), t)
        return out.cpu()

    def exchange(self, parts: Sequence[np.ndarray], lengths: Sequence[int]) -> list[np.ndarray]:
        """One all-to-all of float64 arrays: ``parts[d]`` goes to rank d, and what rank s sent
        here comes back as the s-th array, ``lengths[s]`` values long (the caller knows them:
        no sizes travel). Exact for integers below 2**53."""
        if len(parts) != self.size or len(lengths) != self.size:
            raise ValueError(f"exchange needs one part and one length per rank ({self.size})")
        if not self.distributed:
            return [np.asarray(parts[0], dtype=np.float64).reshape(-1)]
        t0 = time.perf_counter()
        flat = [np.asarray(p, dtype=np.float64).reshape(-1) for p in parts]
        send = torch.from_numpy(np.concatenate(flat)).to(self._device)
        out = torch.empty(int(sum(lengths)), dtype=torch.float64, device=send.device)
        torch.distributed.all_to_all_single(out, send, output_split_sizes=[int(n) for n in lengths],
                                            input_split_sizes=[p.size for p in flat])
        self.clock.seconds += time.perf_counter() - t0
        return np.split(out.cpu().numpy(), np.cumsum([int(n) for n in lengths])[:-1])

    def reduce(self, values: Sequence[float], op: str = "sum") -> np.ndarray:
        """Element-wise sum / min / max over ranks of a few float64 numbers, one all-reduce
        (exact for integers below 2**53)."""
        v = np.asarray(values, dtype=np.float64)
        if not self.distributed:
            return v
        t0 = time.perf_counter()
        ops = {"sum": torch.distributed.ReduceOp.SUM, "min": torch.distributed.ReduceOp.MIN,
               "max": torch.distributed.ReduceOp.MAX}
        t = torch.from_numpy(v.copy()).to(self._device)
        torch.distributed.all_reduce(t, op=ops[op])
        self.clock.seconds += time.perf_counter() - t0
        return t.cpu().numpy()

    def sum(self, x: float) -> float:
        """Sum of a Python number over ranks (exact for integers)."""
        return x if not self.distributed else type(x)(self.reduce([x], "sum")[0])

    def min(self, x: float) -> float:
        return x if not self.distributed else type(x)(self.reduce([x], "min")[0])

    def max(self, x: float) -> float:
        return x if not self.distributed else type(x)(self.reduce([x], "max")[0])

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
