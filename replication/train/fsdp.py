"""FSDP sharding of the policy (``model.sharding: fsdp``): the 7B/8B runs' memory layout with the
same numbers as one process.

    torchrun --nproc_per_node 2 -m replication train --profile smoke --set model.sharding=fsdp ...
    accelerate launch --config_file configs/accelerate/fsdp.yaml -m replication train ...

Under FSDP2 (``torch.distributed.fsdp.fully_shard``) each decoder layer's weights, gradients and
AdamW moments live in shards, one per rank; a forward pass all-gathers a layer's weights and a
backward pass reduce-scatters its gradient. Those are collectives, so every rank must run the
SAME NUMBER of forward and backward passes, in the same order — while the trainer gives each rank
its own share of a step's prompt groups (train/distributed.py). What this module does about it:

- generation never touches the sharded model: the HF engine samples from a full copy of the
  policy kept for it (``generation_copy``), refreshed from a gathered full state dict after every
  update; the vLLM engine gets the gathered weights through its usual ``sync_weights`` (DTensors
  are materialised with ``full_tensor()``, the same collectives on every rank);
- every pass over the sharded model is counted across ranks: a rank that holds none of a
  mini-batch's trainable rows runs a zero-weight pass on one of its rows (``zero_pass``); with
  micro-batches (``rl.micro_batch_rows``) every rank runs as many passes as the rank with the
  most micro-batches, the extra ones zero-weight (train/update.py), and the vLLM engine's
  old-log-prob recompute pads its chunk count to the ranks' maximum (``equal_passes``);
- with micro-batches each backward reduce-scatters into the sharded gradient, which sums them
  (FSDP2 accumulates into ``.grad``); ``set_requires_gradient_sync(False)`` would instead keep a
  full unsharded gradient between passes, the memory sharding is there to save, so it is not
  used (verl's FSDP actor does the same: no ``no_sync`` under FSDP);
- gradients are reduce-scattered as a SUM (``set_gradient_divide_factor(1)``): each rank's loss is
  already divided by the mini-batch's GLOBAL denominator, as in the replicated path;
- checkpoints and the saved model hold FULL state dicts (gathered on every rank, written by rank
  0), so a sharded run resumes from its own checkpoint exactly and its model folder loads anywhere.

Activation checkpointing and FSDP's mixed-precision policy are not applied: the parameters keep
``model.dtype`` (bf16 on GPU at paper scale), and with ``optim.master_weights`` the optimizer
steps each bf16 shard through a float32 copy of it (train/master_weights.py), as verl's float32
parameters do.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from replication.train.distributed import World, wants_fsdp  # noqa: F401 - re-exported


def _layer_classes(model: torch.nn.Module) -> set[str]:
    """Class names of the model's repeated blocks (transformers' ``_no_split_modules``)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    if not names:
        raise ValueError(f"{type(model).__name__} names no _no_split_modules: cannot tell its "
                         "decoder layers apart for FSDP wrapping")
    return names


def shard_policy(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """``fully_shard`` every decoder layer, then the root (embeddings, final norm, head), over
    all ranks; gradients reduce as a sum. In place; returns the model."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    device = next(model.parameters()).device.type
    mesh = init_device_mesh(device, (world.size,))
    layers = _layer_classes(model)
    blocks = [m for m in model.modules() if type(m).__name__ in layers]
    if not blocks:
        raise ValueError(f"no module of class {sorted(layers)} in {type(model).__name__}")
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for m in [*blocks, model]:
        # a plain SUM (no AVG / PREMUL_SUM, which gloo lacks): the losses are already over the
        # mini-batch's global denominator
        m.set_gradient_divide_factor(1.0)
        m.set_force_sum_reduction_for_comms(True)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def generation_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A full, frozen copy of the (not yet sharded) policy for the HF engine to sample from."""
    gen = copy.deepcopy(model).eval()
    for p in gen.parameters():
        p.requires_grad_(False)
    return gen


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's weights on EVERY rank (a collective: all ranks must call it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def gather_full_weights(model: torch.nn.Module, into: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The same weights as ``full_state_dict`` with one all-gather per FSDP unit instead of one
    per parameter (a collective: all ranks call it). ``into``: a full, unsharded model of the
    same architecture whose weights are overwritten in place and whose state dict is returned
    (the HF engine's generation copy: no second copy); None = CPU copies."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in units:
        m.unshard()  # the unit's parameters are plain, full tensors until reshard()
    try:
        full = dict(model.named_parameters(remove_duplicate=False))  # tied names included
        for name, buf in model.named_buffers(remove_duplicate=False):
            owner, _, leaf = name.rpartition(".")
            if leaf not in model.get_submodule(owner)._non_persistent_buffers_set:
                full[name] = buf
        if into is not None:
            target = into.state_dict(keep_vars=True)
            if set(target) != set(full):
                raise KeyError(f"generation copy and policy differ in {sorted(set(target) ^ set(full))[:3]}")
            with torch.no_grad():
                for k, v in full.items():
                    target[k].copy_(v)
            return into.state_dict()
        return {k: v.detach().to("cpu", copy=True) for k, v in full.items()}
    finally:
        for m in units:
            m.reshard()


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Each rank keeps its shard of a full state dict (every rank passes the same dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """AdamW's full state keyed by parameter name (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, optim_state_dict=state,
                             options=StateDictOptions(full_state_dict=True))


def equal_passes(world: World, n_passes: int) -> int:
    """The largest pass count over ranks: what every rank must run under FSDP."""
    return int(world.max(int(n_passes)))


def zero_loss(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The forward half of a zero-weight pass: a loss of 0 over ``input_ids[:1]`` whose backward
    joins the layers' collectives and adds nothing to any gradient (train/update.py runs it in
    a micro-batch's place, with the same collectives in between as a real one)."""
    with torch.enable_grad():
        out = model(input_ids=input_ids[:1], attention_mask=attention_mask[:1])
        return out.logits.float().sum() * 0.0


def zero_pass(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              backward: bool) -> None:
    """One forward (and backward) pass on ``input_ids[:1]`` whose loss is multiplied by 0: this
    rank joins the layers' all-gathers and reduce-scatters and adds nothing to any gradient."""
    if backward:
        zero_loss(model, input_ids, attention_mask).backward()
        return
    with torch.no_grad():
        model(input_ids=input_ids[:1], attention_mask=attention_mask[:1])


def save_pretrained(model: torch.nn.Module, tokenizer: Any, path, world: World,
                    state: dict[str, torch.Tensor] | None = None) -> None:
    """Rank 0 writes an ordinary HF folder of the full weights: ``state`` (already gathered), or
    gathered here (a collective: every rank calls it)."""
    state = dict(full_state_dict(model) if state is None else state)
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        # the gathered dict has the tied head as its own entry; an HF folder stores it once
        for key in list(getattr(model, "_tied_weights_keys", None) or ()):
            state.pop(key, None)
    if world.is_main:  # built beside ``path`` and swapped in whole (store.staged_dir)
        from replication.models.loading import save_pretrained_named
        from replication.store import staged_dir

        with staged_dir(path, kind=None) as tmp:
            save_pretrained_named(model, tokenizer, tmp, path, state_dict=state)
