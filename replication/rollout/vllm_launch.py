"""Starting vLLM for a rollout engine: ``vllm.LLM`` arguments, process mode, weight-sync route.

Pure functions (CPU-testable without vLLM) plus ``launch_llm``, the one place that imports vLLM
and constructs ``vllm.LLM``; ``VLLMRolloutEngine.start`` (vllm_engine.py) calls it. Before that,
the train and eval commands' pre-flight (replication/engines.py, ``EngineEntry.check_available``)
has already imported vLLM once and checked its version, before any data or model is loaded.

On CPU, seeded requests crash once chunked prefill splits a prompt ("CPU Generator does not use
offset"), so chunked prefill is off there by default.

Multi-process training (``EnginePlacement``): one engine per rank. With world size > 1 the
engine runs in-process under vLLM's ``external_launcher`` executor (the TRL / verl colocate
mode), on the rank's GPU (LOCAL_RANK); each rank writes its own sync files. Tensor parallelism
> 1 across ranks (one engine shared by a group of ranks) is described in docs/paper_scale.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from replication.config import VLLMSection
from replication.engines import EnginePlacement, check_vllm_version

WORKER_EXTENSION = "replication.rollout.vllm_worker.WeightSyncExtension"
CPU_DEFAULT_KV_GIB = 1.0


def llm_kwargs(model_path: str, options: VLLMSection, *, dtype: str, seed: int,
               placement: EnginePlacement, on_cpu: bool) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` (``options.engine_kwargs`` win)."""
    kw: dict[str, Any] = dict(
        model=model_path, tokenizer=model_path, dtype=dtype, seed=int(seed),
        tensor_parallel_size=options.tensor_parallel_size,
        enable_prefix_caching=options.enable_prefix_caching,
        enforce_eager=options.enforce_eager, enable_sleep_mode=options.enable_sleep_mode,
        logprobs_mode=options.logprobs_mode, worker_extension_cls=WORKER_EXTENSION)
    kv_gib = options.kv_cache_gib if options.kv_cache_gib is not None else (
        CPU_DEFAULT_KV_GIB if on_cpu else None)
    if kv_gib is not None:
        kw["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
    else:
        kw["gpu_memory_utilization"] = options.gpu_memory_utilization
    if options.max_model_len is not None:
        kw["max_model_len"] = options.max_model_len
    chunked = options.enable_chunked_prefill
    if chunked is None and on_cpu:
        chunked = False  # seeded requests + chunked prefill crash on CPU
    if chunked is not None:
        kw["enable_chunked_prefill"] = chunked
    if placement.world_size > 1:
        # one engine per rank inside the rank's process (TRL/verl colocate mode)
        kw["distributed_executor_backend"] = "external_launcher"
    kw.update(options.engine_kwargs)
    return kw


def runs_in_process(options: VLLMSection, placement: EnginePlacement,
                    env: Mapping[str, str] | None = None) -> bool:
    """Does vLLM's model live in this process (its V1 InprocClient)?"""
    if placement.world_size > 1 or options.process_mode == "in-process":
        return True
    if options.process_mode == "multi-process":
        return False
    e = os.environ if env is None else env
    return e.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1").strip() in ("0", "false", "False")


def resolve_weight_sync(options: VLLMSection, in_process: bool) -> str:
    if options.weight_sync == "auto":
        return "memory" if in_process else "file"
    if options.weight_sync == "memory" and not in_process:
        raise ValueError("rollout.vllm.weight_sync='memory' needs an in-process engine "
                         "(process_mode: in-process); use 'file' or 'auto'")
    return options.weight_sync



def launch_llm(model_path: str, options: VLLMSection, *, dtype: str, seed: int,
               placement: EnginePlacement) -> tuple[Any, bool, Callable[..., Any]]:
    """Start ``vllm.LLM`` on ``model_path`` (imported here; its version is checked first).
    Returns (llm, whether it runs in this process, ``vllm.SamplingParams``)."""
    import vllm

    check_vllm_version(vllm.__version__)
    if placement.world_size > 1 and options.process_mode == "multi-process":
        raise ValueError("rollout.vllm.process_mode='multi-process' cannot be used with "
                         "several training processes (vLLM's external_launcher runs the "
                         "engine in-process)")
    in_process = runs_in_process(options, placement)
    if options.process_mode is not None or placement.world_size > 1:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
    from vllm.platforms import current_platform

    kw = llm_kwargs(model_path, options, dtype=dtype, seed=seed, placement=placement,
                    on_cpu=current_platform.is_cpu())
    return vllm.LLM(**kw), in_process, vllm.SamplingParams


def sampling_params_factory() -> Callable[..., Any]:
    """``vllm.SamplingParams`` (an engine built around a given ``llm`` without a factory)."""
    import vllm

    return vllm.SamplingParams
