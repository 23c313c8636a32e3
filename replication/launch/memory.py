"""GPU memory of one training run, per GPU, as the trainer and vLLM allocate it (``dry-run``).

    mem = gpu_memory(cfg, world=8, gpu_gib=80)
    mem.total_gib, mem.shortfall(cfg.profile)     # None when it fits, else the one-line reason
    mem.pass_warning(cfg.profile)                 # the trainer's largest single pass (one micro-batch), when it cannot fit

The rule, per GPU (one rank per GPU):

- **Training state** (``train_state_bytes``): weights and gradients in ``model.dtype``; with
  ``optim.master_weights`` (the default) a bf16/fp16 parameter's optimizer state is a float32
  copy and two float32 AdamW moments (``train/master_weights.py``): 2 + 2 + 3 × 4 = 16 bytes per
  parameter in bfloat16, what verl's float32 master weights cost too; without it the moments are
  in ``model.dtype`` (4 × 2 = 8 bytes); float32 is 4 × 4 = 16 either way (this trainer on CPU).
  A full replica per rank under ``model.sharding: replicate``, 1/world of it under ``fsdp``. Add the
  frozen reference policy when ``rl.kl_coef > 0`` (weights only, sharded like the policy) and,
  under FSDP with the HF engine, the full generation copy it samples from.
- **The engine's reserved share**: vLLM pre-allocates ``gpu_memory_utilization`` × the GPU's
  memory (or its weights + ``kv_cache_gib`` when that is set) and schedules requests in waves
  inside it: it never needs a step's KV cache at once. The share must hold vLLM's weights
  (``model.dtype``, 1/``tensor_parallel_size`` each) and the KV cache of ONE sequence of
  ``max_model_len`` tokens (the model's context when unset): vLLM refuses to start otherwise.
  The HF engine reserves nothing; its generation batch counts with the activations.
- **Activations**, CUDA context and allocator fragmentation: a stated margin, ``ACTIVATION_SHARE``
  of the GPU (8 GiB of 80). It stands for a micro-batch's activations other than its logits;
  the trainer's largest single pass is computed apart (``largest_pass``): ONE micro-batch of
  ``rl.micro_batch_rows`` rows (train/update.py; the reference policy's and DynaMO's extent pass
  forward the same rows), or with 0 a rank's whole share of a mini-batch, and the old-log-prob
  recompute's ``rl.log_prob_micro_batch_rows`` rows (0: ``rl.micro_batch_rows``, 0:
  ``RECOMPUTE_ROWS``). When that pass's logits do not fit beside the reserved memory it is a
  warning, not folded into the verdict, naming the setting that fixes it.

A run fits when the share holds its engine and training state + copies + share + margin is at
most the GPU's memory; ``shortfall`` says which part does not, in one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
MASTER_TENSORS = 3
"""With float32 master weights: the float32 copy, exp_avg and exp_avg_sq of each low-precision parameter."""
ACTIVATION_SHARE = 0.10
"""The margin for activations, CUDA context and fragmentation, as a share of the GPU's memory."""
LOGIT_BYTES = 10
"""Bytes per vocabulary entry per scored token of one pass (``rl.logprobs``): the model's bf16
logits (2), their float32 copy divided by T (4) and its softmax (4)."""
RECOMPUTE_ROWS = 64
"""Rows per pass of vLLM's old-log-prob recompute when ``rl.micro_batch_rows`` is 0
(``rollout.vllm_engine.RECOMPUTE_ROWS``, not imported here: this module needs no torch)."""


@dataclasses.dataclass(frozen=True)
class Geometry:
    """What the rule needs of a model."""

    parameters: float
    """Parameter count."""
    layers: int
    """Decoder layers."""
    kv_heads: int
    """Key/value heads per layer (grouped-query attention)."""
    head_dim: int
    """Dimension of one head."""
    vocab: int
    """Vocabulary size (the width of the logits)."""
    context: int
    """``max_position_embeddings``: vLLM's ``max_model_len`` when none is set."""

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


KNOWN_MODELS = {
    "Qwen/Qwen2.5-Math-1.5B": Geometry(1.54e9, 28, 2, 128, 151936, 4096),
    "Qwen/Qwen2.5-Math-7B": Geometry(7.62e9, 28, 4, 128, 152064, 4096),
    "Qwen/Qwen3-1.7B-Base": Geometry(1.72e9, 28, 8, 128, 151936, 32768),
    "Qwen/Qwen3-4B-Base": Geometry(4.02e9, 36, 8, 128, 151936, 32768),
    "Qwen/Qwen3-8B-Base": Geometry(8.19e9, 36, 8, 128, 151936, 32768),
}
"""The papers' models, from their public ``config.json`` (used when no local config is there)."""


def model_geometry(path: str) -> Geometry | None:
    """From ``<path>/config.json`` when it is a local folder, else ``KNOWN_MODELS``; None if neither."""
    cfg_file = Path(path) / "config.json"
    if cfg_file.exists():
        c = json.loads(cfg_file.read_text())
        h, layers, heads = c.get("hidden_size"), c.get("num_hidden_layers"), c.get("num_attention_heads")
        if h and layers and heads:
            kv = c.get("num_key_value_heads", heads)
            head_dim = c.get("head_dim") or h // heads
            inter, vocab = c.get("intermediate_size", 4 * h), c.get("vocab_size", 32000)
            per_layer = 2 * h * heads * head_dim + 2 * h * kv * head_dim + 3 * h * inter
            emb = vocab * h * (1 if c.get("tie_word_embeddings", False) else 2)
            return Geometry(float(layers * per_layer + emb), layers, kv, head_dim, vocab,
                            int(c.get("max_position_embeddings") or 4096))
    return KNOWN_MODELS.get(path)


@dataclasses.dataclass(frozen=True)
class Pass:
    """The trainer's largest single forward pass of a step, on one rank."""

    what: str
    """'update' (with gradients, train/update.py) or 'old-log-prob recompute' (no gradients)."""
    rows: int
    """Rows forwarded together."""
    tokens: int
    """Scored tokens per row (the completion length bound, ``max_new_tokens``)."""
    logits_gib: float
    """Their logits alone (``LOGIT_BYTES`` per vocabulary entry)."""
    micro_batch_rows: int = 0
    """The setting that sizes the pass: ``rl.micro_batch_rows`` for the update,
    ``rl.log_prob_micro_batch_rows`` for the recompute (0: unset)."""


@dataclasses.dataclass(frozen=True)
class GpuMemory:
    """One run's memory per GPU, in GiB (the rule in the module docstring)."""

    gpu_gib: float
    """The GPU's memory."""
    model: str
    """The policy (``model.path``)."""
    world: int
    """Ranks, one per GPU."""
    sharding: str
    """'replicate' or 'fsdp' (as the trainer will run: one rank never shards)."""
    bytes_per_parameter: int
    """Of the training state (``train_state_bytes``)."""
    train_state_gib: float
    """Weights, gradients and AdamW moments on this GPU."""
    reference_gib: float
    """The frozen reference policy (``rl.kl_coef > 0``); 0 otherwise."""
    generation_copy_gib: float
    """The HF engine's full copy under FSDP; 0 otherwise."""
    engine: str
    """'vllm' or 'hf'."""
    engine_share_gib: float
    """What vLLM reserves (its weights and KV cache live inside); 0 for the HF engine."""
    engine_weights_gib: float
    """vLLM's weights on this GPU (inside the share)."""
    engine_kv_one_sequence_gib: float
    """The KV cache of one ``max_model_len`` sequence on this GPU (inside the share)."""
    sequence_tokens: int
    """That sequence's length (``rollout.vllm.max_model_len``, else the model's context)."""
    activation_margin_gib: float
    """``ACTIVATION_SHARE`` of the GPU."""
    largest_pass: Pass
    """The trainer's largest single pass (reported beside the verdict, see the docstring)."""

    @property
    def total_gib(self) -> float:
        return (self.train_state_gib + self.reference_gib + self.generation_copy_gib + self.engine_share_gib
                + self.activation_margin_gib)

    @property
    def fits(self) -> bool:
        return self.shortfall("") is None

    def shortfall(self, profile: str) -> str | None:
        """None when the run fits, else one line naming the part that does not and what to change."""
        if self.engine == "vllm" and self.engine_weights_gib + self.engine_kv_one_sequence_gib > self.engine_share_gib:
            return (f"{profile}: vLLM's share of {self.engine_share_gib:.1f} GiB per GPU cannot hold its "
                    f"{self.engine_weights_gib:.1f} GiB of weights + {self.engine_kv_one_sequence_gib:.1f} GiB KV "
                    f"cache of one {self.sequence_tokens}-token sequence: raise rollout.vllm.gpu_memory_utilization, "
                    f"set a shorter rollout.vllm.max_model_len, or a larger rollout.vllm.tensor_parallel_size")
        if self.total_gib <= self.gpu_gib:
            return None
        how = "replicated" if self.sharding == "replicate" else f"1/{self.world} under FSDP"
        parts = [f"{self.train_state_gib:.1f} GiB of training state per GPU ({self.model} {how}, "
                 f"{self.bytes_per_parameter} B/parameter)"]
        if self.reference_gib:
            parts.append(f"{self.reference_gib:.1f} GiB reference policy")
        if self.generation_copy_gib:
            parts.append(f"{self.generation_copy_gib:.1f} GiB generation copy")
        if self.engine_share_gib:
            parts.append(f"{self.engine_share_gib:.1f} GiB vLLM share")
        parts.append(f"{self.activation_margin_gib:.1f} GiB activation margin")
        fixes = (["model.sharding=fsdp"] if self.sharding == "replicate" and self.world > 1 else
                 [] if self.sharding == "fsdp" else ["more GPUs per run with model.sharding=fsdp"])
        if self.engine_share_gib:
            fixes.append("a lower rollout.vllm.gpu_memory_utilization")
        fixes.append("larger GPUs")
        return (f"{profile}: {' + '.join(parts)} = {self.total_gib:.1f} GiB > {self.gpu_gib:g} GiB: use "
                + (", ".join(fixes[:-1]) + ", or " + fixes[-1] if len(fixes) > 1 else fixes[0]))

    def pass_warning(self, profile: str) -> str | None:
        """One line when the largest pass's logits do not fit beside the reserved memory."""
        free = self.gpu_gib - (self.total_gib - self.activation_margin_gib)
        p = self.largest_pass
        if p.logits_gib <= free:
            return None
        key = "rl.micro_batch_rows" if p.what == "update" else "rl.log_prob_micro_batch_rows"
        fit = int(free // (p.logits_gib / max(p.rows, 1))) if free > 0 else 0
        how = (f"set {key} to at most {fit}" if fit >= 1 else
               "not even one row's logits fit: set a shorter rollout.sampling.max_new_tokens or use larger GPUs")
        setting = (f"{key}={p.micro_batch_rows}" if p.micro_batch_rows
                   else "rl.micro_batch_rows=0: the whole share in one pass" if p.what == "update"
                   else f"{key}=0: {p.rows} rows a pass")
        return (f"{profile}: the {p.what} forwards {p.rows} rows x {p.tokens} tokens in one pass per GPU "
                f"({setting}); their logits alone need {p.logits_gib:.1f} GiB, {max(free, 0):.1f} GiB are left "
                f"beside the reserved memory, so this run would run out of GPU memory at its first step: {how}")

    def as_dict(self) -> dict[str, Any]:
        d = {k: round(v, 1) if isinstance(v, float) else v for k, v in dataclasses.asdict(self).items()}
        d["largest_pass"] = {k: round(v, 1) if isinstance(v, float) else v
                             for k, v in dataclasses.asdict(self.largest_pass).items()}
        d["total_gib"] = round(self.total_gib, 1)
        d["fits"] = self.fits
        return d


def train_state_bytes(dtype: str, master_weights: bool = True) -> int:
    """Bytes of training state per parameter: weight and gradient in ``dtype``, and AdamW's two
    moments in ``dtype``, or with master weights (a low-precision ``dtype``) a float32 copy and
    two float32 moments (train/master_weights.py)."""
    size = DTYPE_BYTES.get(dtype, 4)
    if master_weights and size < 4:
        return 2 * size + MASTER_TENSORS * 4
    return 4 * size


def engine_of(cfg: Any) -> tuple[str, int]:
    """('vllm', tensor_parallel_size) or ('hf', 1)."""
    name = getattr(cfg.rollout, "engine", "hf")
    tp = getattr(getattr(cfg.rollout, "vllm", None), "tensor_parallel_size", 1)
    return name, int(tp) if name == "vllm" else 1


def largest_pass(cfg: Any, world: int, geo: Geometry) -> Pass:
    """The larger of the update's pass (one micro-batch of ``rl.micro_batch_rows`` rows, with
    gradients, or with 0 a rank's share of one mini-batch) and, with vLLM's recompute, the
    old-log-prob pass (``rl.log_prob_micro_batch_rows`` rows, 0: ``rl.micro_batch_rows``, 0:
    ``RECOMPUTE_ROWS``, of the rank's share)."""
    tokens = int(cfg.rollout.sampling.max_new_tokens)
    per_rank = -(-cfg.budget // world)
    micro = int(getattr(cfg.rl, "micro_batch_rows", 0) or 0)
    share = -(-cfg.budget // (cfg.rl.mini_batches * world))
    passes = [("update", min(share, micro) if micro else share)]
    vllm = getattr(cfg.rollout, "vllm", None)
    if engine_of(cfg)[0] == "vllm" and getattr(vllm, "old_logprobs", "recompute") == "recompute":
        recompute = int(getattr(cfg.rl, "log_prob_micro_batch_rows", 0) or 0) or micro or RECOMPUTE_ROWS
        passes.append(("old-log-prob recompute", min(recompute, per_rank)))
    what, rows = max(passes, key=lambda p: p[1])
    setting = micro if what == "update" else int(getattr(cfg.rl, "log_prob_micro_batch_rows", 0) or 0)
    return Pass(what, rows, tokens, rows * tokens * geo.vocab * LOGIT_BYTES / GIB, setting)


def gpu_memory(cfg: Any, world: int, gpu_gib: float, sharded: bool | None = None) -> GpuMemory | None:
    """The rule applied to ``cfg`` on ``world`` GPUs of ``gpu_gib`` each; ``sharded`` None: from
    ``model.sharding``. None when the model's geometry is unknown (no local config.json and not
    one of ``KNOWN_MODELS``)."""
    geo = model_geometry(cfg.model.path)
    if geo is None:
        return None
    dtype_bytes = DTYPE_BYTES.get(cfg.model.dtype, 4)
    fsdp = (cfg.model.sharding == "fsdp" if sharded is None else sharded) and world > 1
    share = 1 / world if fsdp else 1.0
    weights = geo.parameters * dtype_bytes / GIB
    engine, tp = engine_of(cfg)
    seq = geo.context
    engine_share = engine_weights = kv_one = 0.0
    if engine == "vllm":
        v = cfg.rollout.vllm
        seq = int(v.max_model_len or geo.context)
        engine_weights = weights / tp
        kv_one = seq * geo.kv_bytes_per_token(dtype_bytes) / tp / GIB
        engine_share = (engine_weights + v.kv_cache_gib if v.kv_cache_gib is not None
                        else v.gpu_memory_utilization * gpu_gib)
    state_bytes = train_state_bytes(cfg.model.dtype, bool(getattr(cfg.optim, "master_weights", True)))
    return GpuMemory(
        gpu_gib=float(gpu_gib), model=cfg.model.path, world=world, sharding="fsdp" if fsdp else "replicate",
        bytes_per_parameter=state_bytes,
        train_state_gib=geo.parameters * state_bytes / GIB * share,
        reference_gib=weights * share if cfg.rl.kl_coef > 0 else 0.0,
        generation_copy_gib=weights if fsdp and engine == "hf" else 0.0,
        engine=engine, engine_share_gib=engine_share, engine_weights_gib=engine_weights,
        engine_kv_one_sequence_gib=kv_one, sequence_tokens=seq,
        activation_margin_gib=ACTIVATION_SHARE * gpu_gib,
        largest_pass=largest_pass(cfg, world, geo))


def check_gpu_gib(value: float) -> float:
    """``--gpu-memory-gib``: a positive number."""
    from replication.config import ConfigError

    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--gpu-memory-gib must be a positive number of GiB, got {value!r}")
    return float(value)
