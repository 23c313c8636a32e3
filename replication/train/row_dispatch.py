"""Which rows of a mini-batch each rank trains, and the few rows that must move to get there.

Why. Each rank generates its own share of a step's prompt groups (train/distributed.py), and
the update skips rows whose advantage is exactly zero (train/update.py). Which groups carry a
gradient is decided by the rewards, so if every rank trained the rows it generated, the ranks'
shares of a mini-batch's trainable rows would be as uneven as the rewards: on the smollm2
profile with 2 ranks, mini-batches of 12 + 4 and 4 + 0 trainable rows were measured, and every
gradient collective waits for the rank with more.

What. Three steps, each the same on every rank:
1. ``step_meta``: every rank learns every row's advantage, Prompt-GDRO weight, real-token count
   (the row's cost) and completion-token count (the token-mean denominator): a few numbers per
   row, in one all-gather (plus one of the ranks' shapes). No token moves yet.
2. ``deal``: each mini-batch's trainable rows stay with the rank that generated them, and rows
   move from the most to the least loaded rank (by real tokens) only while a move narrows the
   gap. When the ranks' shares already differ by less than one row, nothing moves. Every rank
   computes every rank's share, so each knows what to send and what it will receive.
3. ``fetch_rows``: one all-to-all sends each moved row (token ids, masks, old log-probs) from
   the rank that holds it to the rank that trains it. A rank holds its own trained rows and the
   moved ones, never the whole step: with N ranks the traffic and memory are the moved rows',
   not N copies of the step.

The gradient is the same sum of the same per-row terms as with one process (up to float
summation order, as the 2-equals-1 tests check). Each row is trained on exactly one rank, so
its loss comes back to the rank that holds its prompt by one all-reduce of the per-row losses
(``own_rows``).

With one process nothing is gathered, copied or re-padded: ``fetch_rows`` returns the batch's
own tensors and ``deal`` returns the rows in order, so the 1-process update is unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from replication.rollout.base import RolloutBatch
from replication.train.distributed import RowShard

_FIELDS = ("input_ids", "attention_mask", "completion_mask", "old_logprobs")
"""The per-token tensors of a row, in the order they travel (as float64: ids stay exact)."""


@dataclasses.dataclass
class StepMeta:
    """What every rank knows of every row of the step before any row moves, indexed by the
    step's GLOBAL row index (every rank's rows in rank order; one process: the batch)."""

    offsets: np.ndarray
    """[world size + 1]: rank r holds global rows [offsets[r], offsets[r + 1])."""
    advantages: torch.Tensor
    """[n_global] float32: per-row advantage (Prompt-GDRO weight applied)."""
    weights: np.ndarray | None
    """[n_global] Prompt-GDRO weight of each row's prompt, or None."""
    real_tokens: np.ndarray
    """[n_global]: tokens a row's passes cost (its attention mask's sum): the deal's measure."""
    completion_tokens: np.ndarray
    """[n_global]: a row's completion tokens, which the token-mean denominator counts."""
    prompt_width: int = 0
    """Widest rank's prompt columns: a moved row is re-padded so completions start here."""
    completion_width: int = 0
    """Widest rank's completion columns."""

    @property
    def n_global(self) -> int:
        return int(self.offsets[-1])

    def owner(self, rows: np.ndarray) -> np.ndarray:
        """The rank that generated (holds) each global row."""
        return np.searchsorted(self.offsets, np.asarray(rows), side="right") - 1


@dataclasses.dataclass
class StepRows:
    """The rows this rank trains in an update, addressed by GLOBAL row index."""

    index: np.ndarray
    """[n_global]: each global row's position in the tensors below; -1 = not held here."""
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor
    gathered: bool = False
    """True when re-padded to the widest rank's shape (then ``take`` trims the common padding)."""

    def take(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token ids, attention mask, completion mask and old log-probs of the global ``rows``,
        cut to the columns that hold a real token of any of them."""
        idx = self.index[np.asarray(rows, dtype=np.int64)]
        if len(idx) and idx.min() < 0:
            raise RuntimeError(f"rows {np.asarray(rows)[idx < 0].tolist()} are not held by this rank")
        idx = torch.as_tensor(idx)
        cols = self.columns(idx)
        return tuple(getattr(self, f)[idx, cols] for f in _FIELDS)  # type: ignore[return-value]

    def columns(self, local: torch.Tensor) -> slice:
        """The columns that hold a real token of the held rows ``local``. Re-padded rows carry
        the widest rank's prompt and completion padding; a causal LM whose positions come from
        the attention mask (rl/logprobs.py) gives the same log-probs without the all-padding
        columns. One process: every column, as the batch was built."""
        if not self.gathered or len(local) == 0:
            return slice(None)
        real = torch.nonzero(self.attention_mask[local].bool().any(0)).flatten()
        return slice(int(real[0]), int(real[-1]) + 1) if len(real) else slice(0, 1)


def _prompt_width(batch: RolloutBatch) -> int:
    """Columns of left-padded prompt before the completions start (every row's completion
    starts at the same column; all of them when no row has a completion token)."""
    started = torch.nonzero(batch.completion_mask.bool().any(0)).flatten()
    return int(started[0]) if len(started) else int(batch.input_ids.shape[1])


def step_meta(batch: RolloutBatch, advantages: torch.Tensor, weights: np.ndarray | None,
              shard: RowShard) -> StepMeta:
    """Every row's advantage, weight and token counts on every rank: one all-gather of the
    ranks' shapes and one of a few numbers per row. One process: the batch's own."""
    world = shard.world
    real = batch.attention_mask.double().sum(1).numpy()
    comp = batch.completion_mask.double().sum(1).numpy()
    n, width = batch.input_ids.shape
    if not world.distributed:
        return StepMeta(np.array([0, n]), advantages, weights, real, comp)
    prompt = _prompt_width(batch)
    dims = np.stack(world.gather_arrays(np.array([n, prompt, width - prompt], dtype=np.int64), [3] * world.size))
    if int(dims[:, 0].sum()) != shard.n_global:
        raise RuntimeError(f"ranks hold {int(dims[:, 0].sum())} rows, the step has {shard.n_global}")
    has_w = weights is not None
    cols = [advantages.double().numpy(), real, comp] + ([np.asarray(weights, dtype=np.float64)] if has_w else [])
    k = len(cols)
    parts = world.gather_arrays(np.stack(cols, 1).reshape(-1), [int(r) * k for r in dims[:, 0]])
    per_row = np.concatenate([p.reshape(-1, k) for p in parts])
    return StepMeta(
        offsets=np.concatenate([[0], np.cumsum(dims[:, 0])]),
        advantages=torch.from_numpy(per_row[:, 0]).to(advantages.dtype),
        weights=per_row[:, 3].copy() if has_w else None,
        real_tokens=per_row[:, 1].copy(),
        completion_tokens=per_row[:, 2].copy(),
        prompt_width=int(dims[:, 1].max()),
        completion_width=int(dims[:, 2].max()),
    )


def deal(rows: np.ndarray, cost: np.ndarray, ranks: int, owner: np.ndarray | None = None) -> list[np.ndarray]:
    """``rows`` split over ``ranks``, each rank's rows in ascending order; the same on every rank
    (it depends on its arguments only). One rank: ``rows`` unchanged.

    With ``owner`` (the rank holding each row) every row starts on its owner; then, while some
    row of the most loaded rank costs less than its gap to the least loaded one (ties: lower
    rank), the row that best closes that gap moves (ties: lower row). Each move lowers the
    loads' sum of squares, so it ends, with the extreme ranks within one row's cost and only
    rows that had to move moved. Without ``owner``: largest ``cost`` first (ties: lower row),
    each to the rank with the least total so far (ties: lower rank)."""
    rows = np.asarray(rows)
    if ranks == 1:
        return [rows]
    cost = np.asarray(cost, dtype=np.float64)
    if owner is None:
        load = np.zeros(ranks)
        mine: list[list[int]] = [[] for _ in range(ranks)]
        for j in sorted(range(len(rows)), key=lambda j: (-cost[j], rows[j])):
            r = int(np.argmin(load))
            mine[r].append(int(rows[j]))
            load[r] += cost[j]
        return [np.asarray(sorted(m), dtype=rows.dtype) for m in mine]
    where = np.asarray(owner, dtype=np.int64).copy()
    if len(where) != len(rows) or (len(where) and (where.min() < 0 or where.max() >= ranks)):
        raise ValueError(f"owner must give each of the {len(rows)} rows a rank in [0, {ranks})")
    load = np.bincount(where, weights=cost, minlength=ranks).astype(np.float64)
    while True:
        hi, lo = int(np.argmax(load)), int(np.argmin(load))
        gap = load[hi] - load[lo]
        cand = np.flatnonzero((where == hi) & (cost < gap))
        if gap <= 0 or len(cand) == 0:
            break
        after = np.abs(gap - 2 * cost[cand])  # the pair's gap once the row has moved
        best = cand[np.lexsort((rows[cand], after))[0]]
        where[best] = lo
        load[hi] -= cost[best]
        load[lo] += cost[best]
    return [np.sort(rows[where == r]) for r in range(ranks)]


def fetch_rows(batch: RolloutBatch, meta: StepMeta, shard: RowShard, shares: list[np.ndarray]) -> StepRows:
    """The rows this rank trains (``shares[rank]``, global indices; ``shares[r]`` is rank r's,
    known to every rank): its own, re-padded to the widest rank's shape, and the others' sent by
    their holders in one all-to-all (none when no row moves anywhere). One process: the batch's
    own tensors."""
    world = shard.world
    if not world.distributed:
        return StepRows(np.arange(batch.n_rows), batch.input_ids, batch.attention_mask,
                        batch.completion_mask, batch.old_logprobs)
    me, off = world.rank, meta.offsets
    p_max, full = meta.prompt_width, meta.prompt_width + meta.completion_width
    lo = p_max - _prompt_width(batch)  # this rank's rows start here: completions line up at column p_max
    width = batch.input_ids.shape[1]

    def packed(local: np.ndarray) -> torch.Tensor:
        """[len(local), fields, full] float64: this rank's rows ``local``, re-padded."""
        idx = torch.as_tensor(local, dtype=torch.long)
        out = torch.zeros((len(local), len(_FIELDS), full), dtype=torch.float64)
        for k, f in enumerate(_FIELDS):
            out[:, k, lo: lo + width] = getattr(batch, f)[idx].double()
        return out

    def held_by(r: int, rows: np.ndarray) -> np.ndarray:
        return rows[(rows >= off[r]) & (rows < off[r + 1])]

    send = [held_by(me, np.asarray(shares[d])) - off[me] if d != me else np.zeros(0, np.int64)
            for d in range(world.size)]
    recv = [held_by(s, np.asarray(shares[me])) if s != me else np.zeros(0, np.int64) for s in range(world.size)]
    moved = any(len(held_by(s, np.asarray(shares[d]))) for d in range(world.size) for s in range(world.size)
                if s != d)  # the same answer on every rank: all skip the collective together
    got = world.exchange([packed(s).reshape(-1).numpy() for s in send],
                         [len(r) * len(_FIELDS) * full for r in recv]) if moved else [np.zeros(0)] * world.size
    mine = np.sort(np.asarray(shares[me], dtype=np.int64))
    out = torch.zeros((len(mine), len(_FIELDS), full), dtype=torch.float64)
    index = np.full(meta.n_global, -1, dtype=np.int64)
    index[mine] = np.arange(len(mine))
    own = held_by(me, mine)
    out[torch.as_tensor(index[own])] = packed(own - off[me])
    for s in range(world.size):
        if len(recv[s]):
            out[torch.as_tensor(index[recv[s]])] = torch.from_numpy(got[s]).reshape(len(recv[s]), len(_FIELDS), full)
    return StepRows(index, *(out[:, k].to(getattr(batch, f).dtype) for k, f in enumerate(_FIELDS)), gathered=True)


def own_rows(shard: RowShard, *per_row: np.ndarray) -> list[np.ndarray]:
    """Per-row values filled in by the rank that trained each row (zeros elsewhere), summed over
    ranks in one all-reduce, each cut to this rank's rows. One process: unchanged."""
    world = shard.world
    if not world.distributed:
        return list(per_row)
    total = world.reduce(np.concatenate(per_row), "sum")
    n = shard.n_global
    return [total[k * n + shard.start: k * n + shard.stop] for k in range(len(per_row))]
