"""Weight sync for the vLLM engine: the trainer's weights into vLLM, checked before any rollout.

Through vLLM's in-place ``reload_weights`` (which reruns vLLM's post-load processing — fused
QKV, CPU weight packing; a bare ``model.load_weights`` fails half-way on repacked parameters and
leaves a mixed model). It is called by method name on a worker extension
(``vllm_worker.WeightSyncExtension``), so it works in both process modes without pickled
functions: ``weight_sync="memory"`` hands the trainer's tensors over in-process; ``"file"``
writes one safetensors file (in /dev/shm by default) and sends its folder's path (in
multi-process mode tensors inside RPC arguments arrive as lists). Then the prefix cache is reset
(its KV blocks belong to the old weights), and — ``sync_check`` — vLLM's teacher-forced
log-probs of a fixed probe sequence are compared with the trainer's; a load that raised or a
mismatch marks the engine broken and raises: no rollout is ever drawn from a partial load.

``VLLMWeightSync`` is the engine's weight half (``VLLMRolloutEngine`` inherits it); it reads the
engine's ``llm``, ``tokenizer``, ``options``, ``dtype``, ``placement``, ``weight_sync`` and
``_params_factory`` and keeps the sync state (``weight_syncs``, ``last_sync_check``,
``_broken``, ``_sync_dir``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from replication.rollout.vllm_launch import sampling_params_factory
from replication.rollout.vllm_requests import token_logprob

RELOAD_METHOD = "replication_reload"
PROBE_TOKENS = 32
PROBE_SEED = 20260101
DEFAULT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.25, "float16": 5e-2}
"""Largest mean |Δ log p| on the sync probe by ``model.dtype``. bfloat16 keeps 8 significant bits:
two right computations of a logit of magnitude 16-32 differ by its spacing, 0.125, so the bf16
default is twice that (a garbled load moves log-probabilities by nats); float16 keeps 11 bits."""


def unwrap_model(model: Any) -> Any:
    """The HF model inside DDP / accelerate wrappers (``.module``)."""
    obj = model
    while isinstance(obj, torch.nn.Module) and hasattr(obj, "module") and not hasattr(obj, "config"):
        obj = obj.module
    return obj


def named_tensors(model_or_state: Any) -> list[tuple[str, torch.Tensor]]:
    """(HF name, tensor) pairs from a module (wrappers unwrapped), a state dict or pairs. Under
    FSDP pass a gathered full state dict (accelerate's ``get_state_dict(model)``); DTensors are
    materialised with ``full_tensor()``. Tensors that share storage with an earlier one (tied
    embeddings: lm_head.weight) are left out, as safetensors and vLLM's loaders expect."""
    obj = unwrap_model(model_or_state)
    if isinstance(obj, torch.nn.Module):
        items: Iterable[tuple[str, Any]] = obj.state_dict().items()
    elif isinstance(obj, Mapping):
        items = obj.items()
    else:
        items = obj
    out, seen = [], set()
    for name, t in items:
        if hasattr(t, "full_tensor"):
            t = t.full_tensor()
        t = t.detach()
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if t.numel() and key in seen:
            continue
        seen.add(key)
        out.append((str(name), t))
    return out


def probe_token_ids(vocab_size: int, length: int) -> list[int]:
    """A fixed pseudo-random token sequence (the sync check's probe)."""
    g = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randint(0, vocab_size, (length,), generator=g).tolist()


def teacher_forced_logprobs(model: torch.nn.Module, token_ids: Sequence[int]) -> torch.Tensor:
    """log p(token_t | tokens_<t) for t = 1..L-1 under ``model`` (float32, CPU)."""
    device = next(model.parameters()).device
    ids = torch.as_tensor([list(token_ids)], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1).cpu()


class VLLMWeightSync:
    """``sync_weights`` and its checks, mixed into ``VLLMRolloutEngine``."""

    def sync_weights(self, model: Any) -> None:
        """Load the trainer's current weights into vLLM, reset the prefix cache, verify.

        ``model``: the trainer's module (wrappers unwrapped), or a full state dict / (name,
        tensor) pairs (then no probe check: it needs a forward pass of the trainer's model)."""
        if self._broken:
            raise RuntimeError(self._broken)
        t0 = time.perf_counter()
        weights = named_tensors(model)
        try:
            if self.weight_sync == "memory":
                self.llm.collective_rpc(RELOAD_METHOD, kwargs={"weights": weights})
            else:
                self.llm.collective_rpc(RELOAD_METHOD,
                                        kwargs={"weights_path": self._write_weights(weights)})
        except Exception as err:
            self._broken = (f"vLLM weight sync failed ({type(err).__name__}: {err}); vLLM's "
                            "weights are undefined now, so this engine refuses to generate")
            raise RuntimeError(self._broken) from err
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        if isinstance(model, torch.nn.Module):
            self.policy = model
            if self.options.sync_check:
                self._check_sync(unwrap_model(model))
        self.weight_syncs += 1
        self.timings["sync_seconds"] = time.perf_counter() - t0

    def _write_weights(self, weights: list[tuple[str, torch.Tensor]]) -> str:
        """One ``model.safetensors`` in this engine's folder (replaced atomically)."""
        from safetensors.torch import save_file

        if self._sync_dir is None:
            root = self.options.sync_dir or ("/dev/shm" if os.path.isdir("/dev/shm")
                                             and os.access("/dev/shm", os.W_OK)
                                             else tempfile.gettempdir())
            self._sync_dir = tempfile.mkdtemp(prefix=f"replication-vllm-rank{self.placement.rank}-",
                                              dir=root)
            weakref.finalize(self, shutil.rmtree, self._sync_dir, True)
        tmp = os.path.join(self._sync_dir, "weights.tmp")
        save_file({k: v.to("cpu").contiguous() for k, v in weights}, tmp)
        os.replace(tmp, os.path.join(self._sync_dir, "model.safetensors"))
        return self._sync_dir

    def _check_sync(self, model: torch.nn.Module) -> None:
        """vLLM's prompt log-probs of a fixed probe vs the trainer's teacher-forced ones."""
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or len(self.tokenizer))
        limit = self.options.max_model_len or getattr(getattr(model, "config", None),
                                                      "max_position_embeddings", PROBE_TOKENS + 1)
        probe = probe_token_ids(vocab, min(PROBE_TOKENS, int(limit) - 1))
        factory = self._params_factory or sampling_params_factory()
        params = factory(n=1, max_tokens=1, temperature=1.0, prompt_logprobs=0, detokenize=False,
                         seed=0)
        out = self.llm.generate([{"prompt_token_ids": probe}], [params], use_tqdm=False)[0]
        ours = torch.tensor([token_logprob(e, t) for e, t in zip(out.prompt_logprobs[1:], probe[1:])])
        theirs = teacher_forced_logprobs(model, probe)
        diff = float((ours - theirs).abs().mean())
        tol = self.options.sync_check_tolerance or DEFAULT_TOLERANCE.get(self.dtype, 5e-2)
        self.last_sync_check = diff
        if not diff <= tol:  # also catches NaN
            self._broken = (
                f"vLLM's weights do not match the trainer's after weight sync {self.weight_syncs}:"
                f" mean |Δ log p| = {diff:.3g} > {tol:.3g} on a {len(probe)}-token probe (a partial"
                " or stale load); the engine refuses to generate. Tolerance: "
                "rollout.vllm.sync_check_tolerance")
            raise RuntimeError(self._broken)
