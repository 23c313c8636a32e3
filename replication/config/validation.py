"""Range checks and registered names of a whole ``TrainConfig``, each error naming its key; run
before any compute (``load_profile`` calls ``validate``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from replication.config.errors import ConfigError
from replication.config.mapping import from_dict, to_dict
from replication.config.rollout_sections import RolloutConfig
from replication.config.sections import TrainConfig


def check_name(registry: Any, value: Any, key: str, optional: bool = False) -> None:
    """``value`` must be registered in ``registry`` (None allowed when ``optional``)."""
    if optional and value is None:
        return
    if value not in registry:
        none = " (or null)" if optional else ""
        raise ConfigError(f"{key}: unknown {registry.kind} {value!r}; known: {registry.names()}{none}")


def validate(cfg: TrainConfig) -> None:
    """Range checks and registered names, each error naming its key; called before any compute.

    Names (allocator, estimator, modulation, prompt weights, KL estimator) are checked against
    their registries and their option dicts against the registered config dataclass, so a new
    method is one decorated class plus its config."""
    from replication.allocation import ALLOCATORS, PROMPT_WEIGHTS
    from replication.models.formatting import FORMATTERS
    from replication.rl.advantages import ADVANTAGE_ESTIMATORS
    from replication.rl.kl import KL_ESTIMATORS
    from replication.rl.modulation import MODULATIONS

    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(f"{key}: {msg}")

    for key, value in _non_finite(to_dict(cfg)):
        raise ConfigError(f"{key}: must be a finite number, got {value!r}")
    r = cfg.rollout
    need(0 <= cfg.seed < 2**32, "seed", f"must be in [0, 2**32), got {cfg.seed}")
    need(cfg.steps >= 1, "steps", f"must be >= 1, got {cfg.steps}")
    need(cfg.checkpoint_every >= 1, "checkpoint_every", "must be >= 1")
    need(r.prompts_per_step >= 1, "rollout.prompts_per_step", "must be >= 1")
    need(r.mean_rollouts >= 1, "rollout.mean_rollouts", "must be >= 1")
    need(1 <= r.lower <= r.mean_rollouts, "rollout.lower", f"must be in [1, mean_rollouts={r.mean_rollouts}]")
    need(r.upper >= r.mean_rollouts, "rollout.upper", f"must be >= mean_rollouts={r.mean_rollouts}")
    need(r.sampling.temperature > 0, "rollout.sampling.temperature", "must be > 0")
    need(0 < r.sampling.top_p <= 1, "rollout.sampling.top_p", "must be in (0, 1]")
    need(r.sampling.top_k >= 0, "rollout.sampling.top_k", "must be >= 0")
    need(r.sampling.max_new_tokens >= 1, "rollout.sampling.max_new_tokens", "must be >= 1")
    _validate_engine(r, need)
    check_name(ALLOCATORS, cfg.allocator.name, "allocator.name")
    check_name(FORMATTERS, cfg.task.options.get("formatter", "raw"), "task.options.formatter")
    check_name(ADVANTAGE_ESTIMATORS, cfg.rl.estimator, "rl.estimator")
    # Every registered estimator is group-relative (rl/advantages.py): a group of one rollout has
    # no baseline and gets advantage 0, so such a prompt gives no gradient (with mean_rollouts 1,
    # no prompt does: grad norm 0 at every step).
    need(r.lower >= 2, "rollout.lower",
         f"{r.lower} leaves estimator {cfg.rl.estimator!r} without a baseline (a group of one rollout "
         f"gets advantage 0, no gradient); use lower >= 2 (and mean_rollouts >= 2)")
    check_name(KL_ESTIMATORS, cfg.rl.kl_estimator, "rl.kl_estimator")
    check_name(MODULATIONS, cfg.rl.modulation, "rl.modulation", optional=True)
    check_name(PROMPT_WEIGHTS, cfg.rl.prompt_weights, "rl.prompt_weights", optional=True)
    if cfg.rl.modulation is not None:
        from_dict(MODULATIONS.get(cfg.rl.modulation), cfg.rl.modulation_options, "rl.modulation_options")
    if cfg.rl.prompt_weights is not None:
        from_dict(PROMPT_WEIGHTS.get(cfg.rl.prompt_weights).Config, cfg.rl.prompt_weights_options,
                  "rl.prompt_weights_options")
    alloc_fields = {f.name for f in dataclasses.fields(ALLOCATORS.get(cfg.allocator.name).Config)}
    unknown = sorted(set(cfg.allocator.options) - alloc_fields)
    need(not unknown, f"allocator.options.{unknown[0] if unknown else ''}",
         f"unknown option for allocator {cfg.allocator.name!r}; allowed: {sorted(alloc_fields)}")
    need(0 <= cfg.rl.clip_low < 1, "rl.clip_low", "must be in [0, 1)")
    need(cfg.rl.clip_high >= 0, "rl.clip_high", "must be >= 0")
    need(cfg.rl.dual_clip is None or cfg.rl.dual_clip > 1, "rl.dual_clip", "must be > 1 or null")
    need(cfg.rl.kl_coef >= 0, "rl.kl_coef", "must be >= 0")
    need(cfg.rl.mini_batches >= 1, "rl.mini_batches", "must be >= 1")
    need(cfg.rl.ppo_epochs >= 1, "rl.ppo_epochs", "must be >= 1")
    for key in ("micro_batch_rows", "log_prob_micro_batch_rows"):
        v = getattr(cfg.rl, key)
        need(isinstance(v, int) and not isinstance(v, bool) and v >= 0, f"rl.{key}",
             "must be an integer >= 0 (0: a rank's whole share of a mini-batch in one pass)"
             if key == "micro_batch_rows" else "must be an integer >= 0 (0: rl.micro_batch_rows, else 64)")
    need(cfg.rl.reward_positive > cfg.rl.reward_negative, "rl.reward_positive", "must exceed reward_negative")
    need(cfg.optim.lr > 0, "optim.lr", "must be > 0")
    need(cfg.optim.grad_clip > 0, "optim.grad_clip", "must be > 0")
    need(cfg.eval.k >= 1, "eval.k", "must be >= 1")
    need(cfg.eval.temperature > 0, "eval.temperature", "must be > 0")
    g = cfg.gradvar
    need(g.draws >= 3 and g.reference_draws >= 3, "gradvar.draws", "at least 3 rollout sets each (GradVarConfig)")
    need(g.prompts >= 0 and g.oracle_samples >= 1, "gradvar.prompts", "prompts >= 0, oracle_samples >= 1")
    need(all(isinstance(t, int) and 0 <= t <= cfg.steps for t in g.checkpoints), "gradvar.checkpoints",
         f"steps in [0, steps={cfg.steps}]")
    from replication.analysis.gradvar_config import METHODS

    need(all(m in METHODS for m in g.methods), "gradvar.methods", f"names among {sorted(METHODS)}")
    need(isinstance(g.threads, int) and g.threads >= 0, "gradvar.threads", ">= 0 (0: model.threads)")
    need(cfg.eval.bootstrap >= 0, "eval.bootstrap", "must be >= 0 (0: no bootstrapped best@k / maj@k)")
    need(cfg.model.dtype in ("float32", "bfloat16", "float16"), "model.dtype", "float32|bfloat16|float16")
    need(cfg.model.dtype_without_bf16 in (None, "float32", "float16"), "model.dtype_without_bf16",
         "null|float32|float16")
    need(cfg.model.device in ("cpu", "cuda", "auto"), "model.device", "cpu|cuda|auto")
    need(cfg.model.sharding in ("replicate", "fsdp"), "model.sharding", "replicate|fsdp")
    need(cfg.model.source in ("sft", "smollm2", "hub"), "model.source", "sft|smollm2|hub")
    need(cfg.task.kind in ("procedural", "math"), "task.kind", "procedural|math")
    _validate_sft(cfg.sft)


def _validate_sft(sft: dict) -> None:
    """The ``sft:`` section: SFTConfig's fields, plus ``task_options`` (a TaskMixSpec) — what
    ``python -m replication sft`` builds from it (replication/sft.py)."""
    from replication.config.sft_section import SFTConfig
    from replication.tasks.pools import TaskMixSpec

    options = dict(sft)
    allowed = sorted({f.name for f in dataclasses.fields(SFTConfig)} | {"task_options"})
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown config key 'sft.{unknown[0]}'; allowed here: {allowed}")
    task_options = options.pop("task_options", None)
    from_dict(SFTConfig, options, "sft")
    if task_options is not None:
        from_dict(TaskMixSpec, task_options, "sft.task_options")


def _non_finite(x: Any, key: str = ""):
    """(dotted key, value) of every NaN/inf number anywhere in a config mapping (options too)."""
    if isinstance(x, float) and not math.isfinite(x):
        yield key, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _non_finite(v, f"{key}.{k}" if key else str(k))
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _non_finite(v, f"{key}[{i}]")


def _validate_engine(r: RolloutConfig, need: Any) -> None:
    from replication.engines import ENGINES

    need(r.engine in ENGINES, "rollout.engine",
         f"unknown rollout engine {r.engine!r}; known: {ENGINES.names()}")
    v = r.vllm
    need(v.tensor_parallel_size >= 1, "rollout.vllm.tensor_parallel_size", "must be >= 1")
    need(0 < v.gpu_memory_utilization <= 1, "rollout.vllm.gpu_memory_utilization", "must be in (0, 1]")
    need(v.kv_cache_gib is None or v.kv_cache_gib > 0, "rollout.vllm.kv_cache_gib", "must be > 0 or null")
    need(v.max_model_len is None or v.max_model_len >= 2, "rollout.vllm.max_model_len", "must be >= 2 or null")
    need(v.max_prompt_tokens is None or v.max_prompt_tokens >= 1, "rollout.vllm.max_prompt_tokens",
         "must be >= 1 or null")
    need(v.logprobs_mode in ("processed_logprobs", "raw_logprobs"), "rollout.vllm.logprobs_mode",
         "processed_logprobs|raw_logprobs")
    need(v.old_logprobs in ("recompute", "engine"), "rollout.vllm.old_logprobs", "recompute|engine")
    need(v.request_mode in ("n", "repeat"), "rollout.vllm.request_mode", "n|repeat")
    need(v.process_mode in (None, "in-process", "multi-process"), "rollout.vllm.process_mode",
         "in-process|multi-process|null")
    need(v.weight_sync in ("auto", "memory", "file"), "rollout.vllm.weight_sync", "auto|memory|file")
    need(not (v.weight_sync == "memory" and v.process_mode == "multi-process"),
         "rollout.vllm.weight_sync", "'memory' needs an in-process engine (process_mode: in-process)")
    need(v.sync_check_tolerance is None or v.sync_check_tolerance > 0,
         "rollout.vllm.sync_check_tolerance", "must be > 0 or null")
