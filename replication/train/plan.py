"""``python -m replication dry-run --profile NAME``: validate a profile and print its plan —
model, data, budget, steps, rollouts, GPUs and a memory estimate — without a GPU or a download.

The memory figures are first-order (documented below), enough to choose a GPU count: mixed-
precision AdamW keeps 16 bytes per parameter (bf16 weights 2 + bf16 grads 2 + fp32 master 4 +
Adam moments 8), sharded over the GPUs by FSDP; vLLM holds bf16 weights (2 bytes per parameter,
per tensor-parallel shard) plus the KV cache of the step's rollouts. Activations are left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from replication.config import TrainConfig

# Parameter counts (billions) and KV geometry (layers, kv heads, head dim) of the papers' models,
# from their public configs — used when the hub config cannot be read offline.
KNOWN_MODELS = {
    "Qwen/Qwen2.5-Math-1.5B": (1.54, 28, 2, 128),
    "Qwen/Qwen2.5-Math-7B": (7.62, 28, 4, 128),
    "Qwen/Qwen3-1.7B-Base": (1.72, 28, 8, 128),
    "Qwen/Qwen3-4B-Base": (4.02, 36, 8, 128),
    "Qwen/Qwen3-8B-Base": (8.19, 36, 8, 128),
}
BYTES_TRAIN_PER_PARAM = 16
GIB = 1024**3


def _model_geometry(path: str) -> tuple[float, int, int, int] | None:
    cfg_file = Path(path) / "config.json"
    if cfg_file.exists():
        c = json.loads(cfg_file.read_text())
        h, layers = c.get("hidden_size"), c.get("num_hidden_layers")
        heads = c.get("num_attention_heads")
        if h and layers and heads:
            kv = c.get("num_key_value_heads", heads)
            head_dim = c.get("head_dim", h // heads)
            inter, vocab = c.get("intermediate_size", 4 * h), c.get("vocab_size", 32000)
            per_layer = 2 * h * h + 2 * h * kv * head_dim + 3 * h * inter
            emb = vocab * h * (1 if c.get("tie_word_embeddings", False) else 2)
            return ((layers * per_layer + emb) / 1e9, layers, kv, head_dim)
    return KNOWN_MODELS.get(path)


def plan(cfg: TrainConfig, gpus: int = 8, prompt_tokens: int = 512) -> dict:
    r = cfg.rollout
    geo = _model_geometry(cfg.model.path)
    out: dict = {
        "profile": cfg.profile,
        "model": cfg.model.path,
        "task": {"kind": cfg.task.kind, **{k: v for k, v in cfg.task.options.items() if k in ("train", "eval")}},
        "allocator": cfg.allocator.name,
        "estimator": cfg.rl.estimator,
        "prompts_per_step": r.prompts_per_step,
        "budget_per_step": cfg.budget,
        "bounds": [r.lower, r.upper],
        "steps": cfg.steps,
        "rollouts_total": cfg.budget * cfg.steps,
        "ppo_mini_batches": cfg.rl.mini_batches,
        "max_new_tokens": r.sampling.max_new_tokens,
    }
    if geo is None:
        out["memory"] = "unknown model geometry (no local config.json and not a known paper model)"
        return out
    params_b, layers, kv_heads, head_dim = geo
    train_gib = params_b * 1e9 * BYTES_TRAIN_PER_PARAM / GIB
    kv_per_token = 2 * layers * kv_heads * head_dim * 2  # K and V, bf16
    # Rollouts are generated at most upper per prompt but C in total per step.
    kv_gib = cfg.budget * (prompt_tokens + r.sampling.max_new_tokens) * kv_per_token / GIB
    out["memory"] = {
        "parameters": int(params_b * 1e9),
        "train_states_gib_total": round(train_gib, 1),
        "train_states_gib_per_gpu_fsdp": round(train_gib / gpus, 1),
        "vllm_weights_gib": round(params_b * 1e9 * 2 / GIB, 1),
        "kv_cache_gib_whole_step": round(kv_gib, 1),
        "gpus_assumed": gpus,
        "note": "first-order: activations excluded; vLLM batches the step, so its KV need is at most this",
    }
    return out


def describe(cfg: TrainConfig, gpus: int = 8) -> str:
    return json.dumps(plan(cfg, gpus=gpus), indent=1)
