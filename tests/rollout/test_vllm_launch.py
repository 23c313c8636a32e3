"""Starting vLLM: ``vllm.LLM`` arguments, process mode and weight-sync route (vllm_launch.py)."""

from __future__ import annotations

import pytest

from replication.config import VLLMSection
from replication.engines import EnginePlacement
from replication.rollout.vllm_launch import (
    WORKER_EXTENSION,
    llm_kwargs,
    resolve_weight_sync,
    runs_in_process,
)


def test_llm_kwargs_cpu_defaults():
    kw = llm_kwargs("m", VLLMSection(), dtype="float32", seed=3, placement=EnginePlacement(),
                    on_cpu=True)
    assert kw["enable_chunked_prefill"] is False  # seeded requests crash with it on CPU
    assert kw["kv_cache_memory_bytes"] == 2**30 and "gpu_memory_utilization" not in kw
    assert kw["worker_extension_cls"] == WORKER_EXTENSION
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["seed"] == 3
    assert "distributed_executor_backend" not in kw


def test_llm_kwargs_gpu_multi_rank_and_overrides():
    opts = VLLMSection(gpu_memory_utilization=0.4, max_model_len=4096,
                       engine_kwargs={"max_num_seqs": 64, "enforce_eager": True})
    kw = llm_kwargs("m", opts, dtype="bfloat16", seed=0,
                    placement=EnginePlacement(rank=1, world_size=2, local_rank=1), on_cpu=False)
    assert kw["gpu_memory_utilization"] == 0.4 and "kv_cache_memory_bytes" not in kw
    assert "enable_chunked_prefill" not in kw  # vLLM's own default on GPU
    assert kw["distributed_executor_backend"] == "external_launcher"
    assert kw["max_num_seqs"] == 64 and kw["enforce_eager"] is True and kw["max_model_len"] == 4096


def test_process_mode_and_weight_sync_resolution():
    one = EnginePlacement()
    assert runs_in_process(VLLMSection(), one, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert not runs_in_process(VLLMSection(), one, env={})
    assert runs_in_process(VLLMSection(process_mode="in-process"), one, env={})
    assert runs_in_process(VLLMSection(), EnginePlacement(0, 2, 0), env={})
    assert resolve_weight_sync(VLLMSection(), True) == "memory"
    assert resolve_weight_sync(VLLMSection(), False) == "file"
    assert resolve_weight_sync(VLLMSection(weight_sync="file"), True) == "file"
    with pytest.raises(ValueError, match="in-process"):
        resolve_weight_sync(VLLMSection(weight_sync="memory"), False)
