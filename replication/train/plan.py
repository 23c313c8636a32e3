"""``python -m replication dry-run --profile NAME [--accelerate-config FILE] [--world-size N]
[--gpu-memory-gib G]``: validate a profile and print its plan — model, data, budget, steps, engine,
world size, rollouts per rank per step and the memory per GPU — without a GPU or a download.
(``dry-run --paper`` plans a paper's whole grid: ``replication/launch/grid_plan.py``.)

World size: ``--world-size``, else the accelerate config's ``num_processes``, else 8 (the
papers' node). Under multi-process training (train/distributed.py) every rank holds a full
replica of the policy and its optimizer (``model.sharding: replicate``, DDP semantics) or a
1/world shard of them (``fsdp``, train/fsdp.py; accelerate's FSDP config selects it), and its
own rollout engine: colocated with TP 1 (the HF engine under FSDP samples from a full copy).

Memory per GPU: the rule of ``replication/launch/memory.py`` (training state in ``model.dtype``,
the engine's reserved share, a stated activation margin). A profile on CUDA that does not fit
``--gpu-memory-gib`` (default 80) is refused in one line (exit 2); the trainer's largest single
pass (one micro-batch: ``rl.micro_batch_rows``, ``rl.log_prob_micro_batch_rows``) is a warning
when its logits do not fit (``warnings``, printed on stderr, naming the setting that fits).
"""

from __future__ import annotations

from pathlib import Path

from replication.config import TrainConfig
from replication.launch.memory import check_gpu_gib, engine_of, gpu_memory, model_geometry


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


def plan(cfg: TrainConfig, gpus: int | None = None, accelerate: dict | None = None,
         gpu_gib: float = 80.0) -> dict:
    r = cfg.rollout
    world = int(gpus if gpus is not None else (accelerate or {}).get("num_processes", 8))
    engine, tp = engine_of(cfg)
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
        "warnings": [],
    }
    if r.prompts_per_step < world:
        out["error"] = f"prompts_per_step={r.prompts_per_step} < world size {world}: the trainer refuses this"
    sharded = cfg.model.sharding == "fsdp" or bool(accelerate and accelerate["distributed_type"] == "FSDP")
    out["sharding"] = "fsdp" if sharded and world > 1 else "replicate"
    mem = gpu_memory(cfg, world, gpu_gib, sharded)
    if mem is None:
        out["memory"] = "unknown model geometry (no local config.json and not a known paper model)"
        return out
    out["memory"] = {
        "parameters": int(model_geometry(cfg.model.path).parameters),
        "gpu_gib": mem.gpu_gib,
        "per_gpu": {
            "train_states_gib": round(mem.train_state_gib, 1),
            "reference_policy_gib": round(mem.reference_gib, 1),
            "generation_copy_gib": round(mem.generation_copy_gib, 1),
            "vllm_share_gib": round(mem.engine_share_gib, 1),
            "vllm_weights_gib": round(mem.engine_weights_gib, 1),
            "kv_cache_gib_one_sequence": round(mem.engine_kv_one_sequence_gib, 1),
            "activation_margin_gib": round(mem.activation_margin_gib, 1),
            "total_gib": round(mem.total_gib, 1),
            "fits": mem.fits,
        },
        "largest_pass": mem.as_dict()["largest_pass"],
        "world_size": world,
        "note": ("per GPU = the training state (weights and gradients in model.dtype, AdamW moments and, "
                 "for bf16 with optim.master_weights, a float32 copy in float32; a full replica, or 1/world under FSDP) + reference policy / generation copy + the engine's reserved "
                 "share (vLLM's gpu_memory_utilization x GPU, holding its weights and at least one "
                 "max_model_len sequence of KV cache; it schedules requests in waves inside it) + an "
                 "activation margin (replication/launch/memory.py)"),
    }
    if cfg.model.device == "cuda":
        line = mem.pass_warning(cfg.profile)
        if line:
            out["warnings"].append(line)
    return out


def profile_plan(cfg: TrainConfig, gpus: int | None = None, accelerate_config: str | Path | None = None,
                 gpu_gib: float = 80.0) -> dict:
    """The plan of one profile; a ConfigError (one line) for a bad world size or accelerate config,
    a step larger than the data pool, or, on CUDA, a run that does not fit ``gpu_gib`` per GPU."""
    from replication.config import ConfigError

    gpu_gib = check_gpu_gib(gpu_gib)
    acc = read_accelerate_config(accelerate_config) if accelerate_config else None
    if gpus is not None and gpus < 1:
        raise ConfigError(f"--world-size must be >= 1, got {gpus}")
    from replication.tasks.input_checks import check_train_pool, plan_pool_size

    pool = plan_pool_size(cfg)  # the trainer refuses a step larger than the pool: so does the plan
    if pool is not None:
        check_train_pool(cfg, pool)
    out = plan(cfg, gpus=gpus, accelerate=acc, gpu_gib=gpu_gib)
    mem = gpu_memory(cfg, out["world_size"], gpu_gib, out["sharding"] == "fsdp")
    why = mem.shortfall(cfg.profile) if mem is not None and cfg.model.device == "cuda" else None
    if why:  # refused before anything runs, as the grid's plan refuses it
        raise ConfigError(why)
    return out
