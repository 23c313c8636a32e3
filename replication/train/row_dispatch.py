"""Which rows of a mini-batch each rank trains: the trainable rows dealt out evenly over ranks.

Why. Each rank generates its own share of a step's prompt groups (train/distributed.py), and
the update skips rows whose advantage is exactly zero (train/update.py). Which groups carry a
gradient is decided by the rewards, so if every rank trained the rows it generated, the ranks'
shares of a mini-batch's trainable rows would be as uneven as the rewards: on the smollm2
profile with 2 ranks, mini-batches of 12 + 4 and 4 + 0 trainable rows were measured, and every
gradient collective waits for the rank with more.

What. Once per update every rank's rows — token ids, attention and completion masks, old
log-probs, advantages and Prompt-GDRO weights, a few bytes per token — are all-gathered, aligned
at the prompt/completion boundary, so that every rank holds the step's global batch. Each
mini-batch's trainable rows are then dealt out by the same deterministic greedy on every rank:
largest row first (by real tokens) to the least-loaded rank. The gradient is the same sum of the
same per-row terms as with one process (up to float summation order, as the 2-equals-1 tests
check); each row is trained on exactly one rank, so its loss comes back to the rank that holds
its prompt by one all-reduce of the per-row losses (``own_rows``).

With one process nothing is gathered, copied or re-padded: ``gather_rows`` returns the batch's
own tensors and ``deal`` returns the rows in order, so the 1-process update is unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from replication.rollout.base import RolloutBatch
from replication.train.distributed import RowShard


@dataclasses.dataclass
class StepRows:
    """The rows an update may train, indexed by the step's GLOBAL row index (every rank's rows in
    rank order; with one process, the batch itself)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    """[n_global] float32: per-row advantage (Prompt-GDRO weight applied)."""
    weights: np.ndarray | None
    """[n_global] Prompt-GDRO weight of each row's prompt, or None."""
    gathered: bool = False
    """True when assembled from several ranks (then ``columns`` trims their common padding)."""

    def columns(self, rows: torch.Tensor) -> slice:
        """The columns that hold a real token of ``rows``. Gathered rows are padded to the widest
        rank's prompt and completion; a causal LM whose positions come from the attention mask
        (rl/logprobs.py) gives the same log-probs without the all-padding columns. One process:
        every column, as the batch was built."""
        if not self.gathered or len(rows) == 0:
            return slice(None)
        real = torch.nonzero(self.attention_mask[rows].bool().any(0)).flatten()
        return slice(int(real[0]), int(real[-1]) + 1) if len(real) else slice(0, 1)


def _prompt_width(batch: RolloutBatch) -> int:
    """Columns of left-padded prompt before the completions start (every row's completion
    starts at the same column; all of them when no row has a completion token)."""
    started = torch.nonzero(batch.completion_mask.bool().any(0)).flatten()
    return int(started[0]) if len(started) else int(batch.input_ids.shape[1])


def gather_rows(batch: RolloutBatch, advantages: torch.Tensor, weights: np.ndarray | None,
                shard: RowShard) -> StepRows:
    """Every rank's rows on every rank (two all-gathers of packed integers and floats, plus one of
    the ranks' shapes); one process: the batch's own tensors."""
    world = shard.world
    if not world.distributed:
        return StepRows(batch.input_ids, batch.attention_mask, batch.completion_mask,
                        batch.old_logprobs, advantages, weights)
    n, width = batch.input_ids.shape
    prompt = _prompt_width(batch)
    dims = np.stack(world.gather_arrays(np.array([n, prompt, width - prompt], dtype=np.int64), [3] * world.size))
    if int(dims[:, 0].sum()) != shard.n_global:
        raise RuntimeError(f"ranks hold {int(dims[:, 0].sum())} rows, the step has {shard.n_global}")
    p_max, t_max = int(dims[:, 1].max()), int(dims[:, 2].max())
    full = p_max + t_max
    lo = p_max - prompt  # this rank's rows start here: completions line up at column p_max

    def aligned(t: torch.Tensor) -> np.ndarray:
        out = torch.zeros((n, full), dtype=t.dtype)
        out[:, lo: lo + width] = t
        return out.numpy()

    ints = np.stack([aligned(batch.input_ids.long()), aligned(batch.attention_mask.long()),
                     aligned(batch.completion_mask.long())])
    has_w = weights is not None
    floats = np.concatenate([aligned(batch.old_logprobs.float()).astype(np.float64).reshape(-1),
                             advantages.numpy().astype(np.float64),
                             np.asarray(weights, dtype=np.float64) if has_w else np.zeros(0)])
    sizes = dims[:, 0]
    int_parts = world.gather_arrays(ints.reshape(-1), [3 * int(r) * full for r in sizes])
    float_parts = world.gather_arrays(floats, [int(r) * (full + 1 + has_w) for r in sizes])
    ids, attn, comp = (torch.from_numpy(np.concatenate([p.reshape(3, -1, full)[k] for p in int_parts]))
                       for k in range(3))
    old, adv, w = [], [], []
    for p, r in zip(float_parts, sizes):
        r = int(r)
        old.append(p[: r * full].reshape(r, full))
        adv.append(p[r * full: r * full + r])
        w.append(p[r * full + r:])
    return StepRows(
        input_ids=ids.to(batch.input_ids.dtype),
        attention_mask=attn.to(batch.attention_mask.dtype),
        completion_mask=comp.to(batch.completion_mask.dtype),
        old_logprobs=torch.from_numpy(np.concatenate(old)).to(batch.old_logprobs.dtype),
        advantages=torch.from_numpy(np.concatenate(adv)).to(advantages.dtype),
        weights=np.concatenate(w) if has_w else None,
        gathered=True,
    )


def deal(rows: np.ndarray, cost: np.ndarray, ranks: int) -> list[np.ndarray]:
    """``rows`` split over ``ranks``: largest ``cost`` first (ties: lower row), each to the rank
    with the least total so far (ties: lower rank); each rank's rows in ascending order. The same
    on every rank (it depends on its arguments only). One rank: ``rows`` unchanged."""
    rows = np.asarray(rows)
    if ranks == 1:
        return [rows]
    cost = np.asarray(cost, dtype=np.float64)
    load = np.zeros(ranks)
    mine: list[list[int]] = [[] for _ in range(ranks)]
    for j in sorted(range(len(rows)), key=lambda j: (-cost[j], rows[j])):
        r = int(np.argmin(load))
        mine[r].append(int(rows[j]))
        load[r] += cost[j]
    return [np.asarray(sorted(m), dtype=rows.dtype) for m in mine]


def own_rows(shard: RowShard, *per_row: np.ndarray) -> list[np.ndarray]:
    """Per-row values filled in by the rank that trained each row (zeros elsewhere), summed over
    ranks in one all-reduce, each cut to this rank's rows. One process: unchanged."""
    world = shard.world
    if not world.distributed:
        return list(per_row)
    total = world.reduce(np.concatenate(per_row), "sum")
    n = shard.n_global
    return [total[k * n + shard.start: k * n + shard.stop] for k in range(len(per_row))]
