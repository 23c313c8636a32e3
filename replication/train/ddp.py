"""The replicated policy over several ranks: torch's DistributedDataParallel, summing.

Each rank backpropagates its rows of a mini-batch with the loss already divided by the
mini-batch's GLOBAL denominator (train/update.py), so the 1-process gradient is the SUM of the
ranks' gradients. DDP's default all-reduce AVERAGES (divides by the world size first); the comm
hook here replaces it with a plain SUM, so the update is the 1-process update up to float
summation order, for any world size (a ×N loss scale would round for N not a power of two).

What DDP brings over one flat all-reduce after backward: gradients are grouped into buckets
(``bucket_cap_mb``) that are all-reduced asynchronously as soon as backward has produced them,
overlapping communication with the rest of the backward pass. The trainer runs one
synchronising backward per rank and mini-batch: with micro-batches (``rl.micro_batch_rows``,
train/update.py) the earlier micro-batches run under ``no_sync()`` (their gradients accumulate
in ``.grad``, no communication) and only the last one all-reduces the accumulated sum, so the
ranks may split their shares into different numbers of micro-batches; a rank with no trainable
row of a mini-batch runs one zero-weight pass (``fsdp.zero_loss``) so that every rank joins the
same all-reduces.

Each parameter's ``.grad`` is a view into its all-reduce bucket (``gradient_as_bucket_view``):
backward writes the gradient straight into the buffer that is all-reduced, with no copy in and
out and no second 538 MB of gradient memory on smollm2 (about 0.2 s less per 2-rank step there,
docs/paper_scale.md §5). The trainer zeroes gradients with ``set_to_none=True`` between
mini-batches; the next backward attaches the views again (the 2-equals-1 tests compare the
resulting updates with one process's).

Buffers are not broadcast before each forward (``forward_sync_buffers=False``): every rank builds
the same model from the same seed and files, and a causal LM's buffers (rotary frequencies) are
constants. DDP's construction still checks that the ranks' parameter shapes agree and broadcasts
rank 0's weights once.
"""

from __future__ import annotations

import os

import torch
from torch.nn.parallel import DistributedDataParallel

from replication.train.distributed import World

BUCKET_MB_ENV = "REPLICATION_DDP_BUCKET_MB"
"""Gradient bucket size in MB (DDP's ``bucket_cap_mb``; default 25, torch's own)."""


def _sum_hook(state, bucket):  # unannotated: DDP checks the annotation's type, not its string
    """All-reduce one bucket as a SUM (no division by the world size)."""
    work = torch.distributed.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def replicate_policy(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """The DDP wrapper the update trains through (the module itself stays ``model``: checkpoints,
    evaluation and generation use it unwrapped, outside DDP's hooks)."""
    device = next(model.parameters()).device
    bucket_mb = float(os.environ.get(BUCKET_MB_ENV, "25"))
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        forward_sync_buffers=False,
        bucket_cap_mb=bucket_mb,
        gradient_as_bucket_view=True,
    )
    ddp.register_comm_hook(None, _sum_hook)
    return ddp
