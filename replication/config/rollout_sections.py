"""Rollout sections of a run configuration: the budget and bounds, sampling, the vLLM engine."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters of one generate call (``rollout.sampling`` in a profile; the rollout
    engines take it as is)."""

    temperature: float = 1.0
    """Sampling temperature (VIP, DynaMO: 1.0; GDRO paper text 0.6, scripts 1.0)."""
    top_p: float = 1.0
    """Nucleus mass (GDRO: 0.8)."""
    top_k: int = 0
    """Top-k, 0 = off (GDRO: 20)."""
    max_new_tokens: int = 16
    """Longest completion in tokens (engine default 16; a profile's ``rollout.sampling`` defaults
    to 8, the tiny task's longest answer; VIP: 10k tokens at paper scale)."""


TRAIN_MAX_NEW_TOKENS = 8
"""``rollout.sampling.max_new_tokens`` when a profile does not set it."""


@dataclasses.dataclass
class VLLMSection:
    """Options of the vLLM rollout engine (``rollout.engine: vllm``); see
    replication/rollout/vllm_engine.py. All three papers sample with vLLM inside verl."""

    tensor_parallel_size: int = 1
    """GPUs per vLLM engine. 1 = one engine per training process (colocated, the papers'
    1.5B-8B setups); > 1 shares one engine across a group of ranks (docs/paper_scale.md)."""
    gpu_memory_utilization: float = 0.5
    """Share of GPU memory vLLM may take (weights + KV cache); the rest is the trainer's
    (verl's scripts: 0.5-0.8). Ignored on CPU, where ``kv_cache_gib`` sizes the cache."""
    kv_cache_gib: float | None = None
    """Explicit KV-cache size in GiB (vLLM's kv_cache_memory_bytes); None = from
    gpu_memory_utilization on GPU, 1 GiB on CPU (vLLM-CPU reads the utilisation as a share of
    RAM and refuses to start when other processes hold it)."""
    max_model_len: int | None = None
    """Prompt + response token limit; None = the model's (Qwen2.5-Math: 4096)."""
    max_prompt_tokens: int | None = None
    """Prompts longer than this keep their LAST tokens (DynaMO: data.truncation='left')."""
    logprobs_mode: str = "processed_logprobs"
    """What vLLM returns per sampled token: 'processed_logprobs' (after temperature and top-k/p,
    = the trainer's log softmax(z/T) when nothing is truncated) or 'raw_logprobs' (before
    temperature)."""
    old_logprobs: str = "recompute"
    """Source of the PPO ratio's π_old: 'recompute' = a no-grad trainer forward pass over the
    batch (verl's default, used by all three papers' code: exact trainer numerics, right under
    top-p/top-k truncation); 'engine' = vLLM's returned log-probs (saves the pass; equal up to
    kernel numerics only when ``logprobs_match_trainer``)."""
    request_mode: str = "n"
    """'n': one request per prompt with SamplingParams(n=count) (prompt prefix-cached once);
    'repeat': count requests of n=1. Both give identical samples (same per-sample seeds)."""
    process_mode: str | None = None
    """'in-process' (VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine runs in the trainer's process)
    or 'multi-process' (vLLM's default: an EngineCore process); None = leave the environment
    as it is. Multi-process training forces in-process (vLLM's external_launcher)."""
    weight_sync: str = "auto"
    """How new weights reach vLLM after each optimizer step, both through vLLM's in-place
    ``reload_weights``: 'memory' = the trainer's tensors are handed over in-process (no copy to
    disk; in-process engines only); 'file' = a safetensors file in ``sync_dir`` whose path is
    sent (works in both process modes); 'auto' = memory in-process, else file."""
    sync_dir: str | None = None
    """Folder for the 'file' sync (a per-engine subfolder is made and removed); None = /dev/shm
    when it exists, else the system temp folder."""
    sync_check: bool = True
    """After every sync, compare vLLM's teacher-forced log-probs on a fixed probe sequence
    with the trainer's; a mismatch above ``sync_check_tolerance`` raises (no partial loads)."""
    sync_check_tolerance: float | None = None
    """Largest allowed mean |Δ log p| on the probe; None = 1e-3 for float32, 0.25 for bfloat16
    (twice bf16's spacing of a logit of magnitude 16-32, 0.125: two right computations differ by
    that much), 5e-2 for float16 (``rollout.vllm_weight_sync.DEFAULT_TOLERANCE``)."""
    enable_prefix_caching: bool = True
    """Share prompt KV blocks across a prompt's rollouts (the cache is reset after each sync)."""
    enable_chunked_prefill: bool | None = None
    """None = off on CPU (seeded requests crash there once a prompt's prefill is chunked:
    'CPU Generator does not use offset'), vLLM's default on GPU."""
    enforce_eager: bool = False
    """Disable CUDA graphs / torch.compile (less memory and start-up time, slower decoding)."""
    enable_sleep_mode: bool = False
    """Allow engine.sleep()/wake_up() to free GPU memory during the update (colocation)."""
    engine_kwargs: dict = dataclasses.field(default_factory=dict)
    """Anything else for ``vllm.LLM(...)`` (e.g. max_num_seqs); these win over the above."""


@dataclasses.dataclass
class RolloutConfig:
    prompts_per_step: int = 32
    """Q, prompts per training step (VIP 256, DynaMO 512, GDRO 256 at paper scale)."""
    mean_rollouts: int = 4
    """n̄: the step's total budget is C = Q·n̄ for EVERY method (VIP 8 or 16, DynaMO 16, GDRO 4)."""
    lower: int = 2
    """Smallest per-prompt count an adaptive allocator may give (VIP code 4, GDRO 2, DynaMO 8)."""
    upper: int = 16
    """Largest per-prompt count (VIP 16/32, GDRO 12, DynaMO 24)."""
    sampling: SamplingConfig = dataclasses.field(
        default_factory=lambda: SamplingConfig(max_new_tokens=TRAIN_MAX_NEW_TOKENS))
    """Sampling parameters of training rollouts."""
    engine: str = "hf"
    """Rollout engine: 'hf' (own sampling loop over the trainer's model; CPU/GPU) or 'vllm'
    (vLLM; the paper profiles). Registered in replication/engines.py."""
    vllm: VLLMSection = dataclasses.field(default_factory=VLLMSection)
    """Options of the vLLM engine (used when engine = 'vllm')."""
