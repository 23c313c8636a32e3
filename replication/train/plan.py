"""``python -m replication dry-run --profile NAME [--accelerate-config FILE] [--world-size N]``:
validate a profile and print its plan — model, data, budget, steps, engine, world size,
rollouts per rank per step and a memory estimate per GPU — without a GPU or a download.

World size: ``--world-size``, else the accelerate config's ``num_processes``, else 8 (the
papers' node). Under multi-process training (train/distributed.py) every rank holds a full
replica of the policy and its optimizer (``model.sharding: replicate``, DDP semantics) or a
1/world shard of them (``fsdp``, train/fsdp.py; accelerate's FSDP config selects it), and its
own rollout engine: colocated with TP 1 (the HF engine under FSDP samples from a full bf16 copy).

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


def read_accelerate_config(path: str | Path) -> dict:
    """The launch settings that matter for the plan, from an accelerate config file."""
    import yaml

    from replication.config import ConfigError

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--accelerate-config {str(p)!r}: no such file")
    raw = yaml.safe_load(p.read_text()) or {}
    if not isinstance(raw, dict) or "distributed_type" not in raw:
        raise ConfigError(f"--accelerate-config {str(p)!r}: not an accelerate config (no distributed_type)")
    return {
        "file": str(p),
        "distributed_type": raw["distributed_type"],
        "num_processes": int(raw.get("num_processes", 1)),
        "mixed_precision": raw.get("mixed_precision", "no"),
    }


def _engine(cfg: TrainConfig) -> tuple[str, int]:
    name = getattr(cfg.rollout, "engine", "hf")
    tp = getattr(getattr(cfg.rollout, "vllm", None), "tensor_parallel_size", 1)
    return name, int(tp) if name == "vllm" else 1


def plan(cfg: TrainConfig, gpus: int | None = None, prompt_tokens: int = 512,
         accelerate: dict | None = None) -> dict:
    r = cfg.rollout
    world = int(gpus if gpus is not None else (accelerate or {}).get("num_processes", 8))
    engine, tp = _engine(cfg)
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
        "engine": engine if engine != "vllm" else f"vllm (tensor_parallel_size={tp})",
        "world_size": world,
        "launch": ("--world-size" if gpus is not None else accelerate["file"] if accelerate
                   else "default (one 8-GPU node)"),
        # whole prompt groups per rank, balanced by rollout count (train/distributed.split_groups):
        # each rank's share is within one group's count of C / world
        "prompts_per_rank_per_step": round(r.prompts_per_step / world, 2),
        "rollouts_per_rank_per_step": round(cfg.budget / world, 2),
        "rollouts_per_rank_per_step_max": min(cfg.budget, -(-cfg.budget // world) + r.upper - 1),
    }
    if r.prompts_per_step < world:
        out["error"] = f"prompts_per_step={r.prompts_per_step} < world size {world}: the trainer refuses this"
    sharded = cfg.model.sharding == "fsdp" or bool(accelerate and accelerate["distributed_type"] == "FSDP")
    out["sharding"] = "fsdp" if sharded and world > 1 else "replicate"
    if geo is None:
        out["memory"] = "unknown model geometry (no local config.json and not a known paper model)"
        return out
    params_b, layers, kv_heads, head_dim = geo
    train_gib = params_b * 1e9 * BYTES_TRAIN_PER_PARAM / GIB
    kv_per_token = 2 * layers * kv_heads * head_dim * 2  # K and V, bf16
    # Rollouts are generated at most upper per prompt but C in total per step.
    kv_gib = cfg.budget * (prompt_tokens + r.sampling.max_new_tokens) * kv_per_token / GIB
    # Each rank's engine generates its share of the step; a TP group shares one engine.
    per_engine_rollouts = min(cfg.budget, out["rollouts_per_rank_per_step_max"] * tp)
    kv_engine_gib = per_engine_rollouts * (prompt_tokens + r.sampling.max_new_tokens) * kv_per_token / GIB
    weights_gib = params_b * 1e9 * 2 / GIB
    fsdp = out["sharding"] == "fsdp"
    per_gpu = {
        # a full replica per rank (replicate), or its 1/world shard (fsdp)
        "train_states_gib": round(train_gib / world if fsdp else train_gib, 1),
        "vllm_weights_gib": round(weights_gib / tp, 1) if engine == "vllm" else 0.0,
        "generation_copy_gib": round(weights_gib, 1) if fsdp and engine == "hf" else 0.0,
        "kv_cache_gib_rank_share": round(kv_engine_gib / tp, 1),
    }
    per_gpu["total_gib"] = round(sum(per_gpu.values()), 1)
    per_gpu["fits_80gib_gpu"] = per_gpu["total_gib"] <= 80
    out["memory"] = {
        "parameters": int(params_b * 1e9),
        "train_states_gib_total": round(train_gib, 1),
        "train_states_gib_per_gpu_if_sharded": round(train_gib / world, 1),
        "vllm_weights_gib": round(weights_gib, 1),
        "kv_cache_gib_whole_step": round(kv_gib, 1),
        "per_gpu": per_gpu,
        "world_size": world,
        "note": ("first-order: activations excluded; per GPU = the training states (a full replica, "
                 "or 1/world of them under FSDP) + the engine's weights and KV cache for the rank's "
                 "share of the step (at most; vLLM schedules longer batches in waves)"),
    }
    return out


def describe(cfg: TrainConfig, gpus: int | None = None, accelerate_config: str | Path | None = None) -> str:
    acc = read_accelerate_config(accelerate_config) if accelerate_config else None
    if gpus is not None and gpus < 1:
        from replication.config import ConfigError

        raise ConfigError(f"--world-size must be >= 1, got {gpus}")
    from replication.tasks.input_checks import check_train_pool, plan_pool_size

    pool = plan_pool_size(cfg)  # the trainer refuses a step larger than the pool: so does the plan
    if pool is not None:
        check_train_pool(cfg, pool)
    return json.dumps(plan(cfg, gpus=gpus, accelerate=acc), indent=1)
