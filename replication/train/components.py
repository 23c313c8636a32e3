"""Everything a run is made of, built once from the config, with one state dict for resume."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from replication.allocation import ALLOCATORS, PROMPT_WEIGHTS, Allocator, PromptPool, make_allocator
from replication.allocation.difficulty import DifficultyClassifier, any_correct
from replication.allocation.prompt_gdro import PromptGDRO
from replication.config import ConfigError, TrainConfig, from_dict
from replication.evaluate.runner import Evaluator
from replication.rl import DynaMOConfig, PPOConfig
from replication.rl.modulation import MODULATIONS
from replication.models.loading import save_pretrained_named
from replication.store import staged_dir
from replication.train.distributed import World, engine_group_size
from replication.train.master_weights import MasterWeightAdamW
from replication.train.sampler import EpochSampler
from replication.tasks.data import PromptSet, build_data
from replication.tasks.input_checks import check_run_inputs
from replication.train.checkpoint import SOURCE_KEY, check_model_shapes
from replication.tasks.verify import Verifier
from replication.train.setup import build_engine, check_engine, format_inputs, load_model


@dataclasses.dataclass
class Components:
    model: torch.nn.Module
    tokenizer: Any
    ref_model: torch.nn.Module | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    engine: Any
    train: PromptSet
    verifier: Verifier
    evaluator: Evaluator
    allocator: Allocator
    classifier: DifficultyClassifier | None
    """The run's one difficulty classifier (bins for Prompt-GDRO and the per-prompt log): the
    allocator's own when it keeps one (Rollout-GDRO, its observe() updates it), else one built
    here for Prompt-GDRO (``owns_classifier``: updated by ``observe_bins``), else None."""
    owns_classifier: bool
    prompt_weights: PromptGDRO | None
    sampler: EpochSampler
    generator: torch.Generator
    update_rng: np.random.Generator
    ppo_cfg: PPOConfig
    modulation_cfg: DynaMOConfig | None
    world: World = dataclasses.field(default_factory=World)
    generation_model: torch.nn.Module | None = None
    """FSDP with the HF engine: the full copy of the policy the engine samples from (train/fsdp.py);
    None otherwise (the engine reads ``model`` itself, or holds its own weights: vLLM)."""
    train_model: torch.nn.Module | None = None
    """What the update trains through: the DDP wrapper of ``model`` with several replicated
    ranks (train/ddp.py), else ``model`` itself (one process, or FSDP-sharded). Everything
    else — checkpoints, evaluation, generation — uses ``model``."""
    _full_state: tuple[int, dict] | None = dataclasses.field(default=None, repr=False)
    """FSDP: the full weights gathered after the latest update, keyed by the optimizer step
    (``scheduler.last_epoch``), shared by the engine sync, evaluation, checkpoint and save."""

    def __post_init__(self) -> None:
        if self.train_model is None:
            self.train_model = self.model

    # -- the weights the rollout engine and the evaluator read
    def engine_view(self) -> torch.nn.Module:
        """What ``engine.sync_weights`` / the evaluator get after an update: the policy itself,
        or under FSDP + HF the generation copy, refreshed from the gathered weights (every rank
        must call this: the gather is a collective)."""
        if self.generation_model is None:
            return self.model
        self.full_model_state()
        return self.generation_model

    def full_model_state(self) -> dict[str, torch.Tensor]:
        """FSDP: the policy's full weights, gathered ONCE per update (a collective on the first
        call after an update: every rank calls it). With the HF engine the generation copy
        holds them (refreshed here, no second copy); otherwise a CPU copy is kept."""
        from replication.train.fsdp import gather_full_weights

        step = int(self.scheduler.last_epoch)
        if self._full_state is None or self._full_state[0] != step:
            self._full_state = None  # free the previous update's copy before gathering
            self._full_state = (step, gather_full_weights(self.model, into=self.generation_model))
        return self._full_state[1]

    # -- difficulty bins (one classifier per run, see ``classifier``)
    def bins(self, ids: list) -> np.ndarray | None:
        return None if self.classifier is None else np.asarray(self.classifier.bins(ids))

    def observe_bins(self, ids: list, counts: np.ndarray, correct: np.ndarray) -> None:
        if self.owns_classifier:
            self.classifier.update(ids, any_correct(counts, correct))

    # -- resume
    def state(self, optimizer: bool = True) -> dict:
        """Everything stateful; under FSDP the model and optimizer are gathered to FULL state dicts
        (a collective: every rank calls it, rank 0 writes it). ``optimizer=False``: no optimizer
        state (None), for a run's last checkpoint (every rank passes the same)."""
        if self.world.fsdp:
            from replication.train.fsdp import optimizer_state

            model_state = self.full_model_state()
            optim_state = optimizer_state(self.model, self.optimizer) if optimizer else None
        else:
            model_state = self.model.state_dict()
            optim_state = self.optimizer.state_dict() if optimizer else None
        return {
            "model": model_state,
            "optimizer": optim_state,
            "scheduler": self.scheduler.state_dict(),
            "allocator": self.allocator.state_dict(),
            "classifier": self.classifier.state_dict() if self.owns_classifier else None,
            "prompt_weights": None if self.prompt_weights is None else self.prompt_weights.state_dict(),
            "sampler": self.sampler.state_dict(),
            "generator": self.generator.get_state(),
            "update_rng": self.update_rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
        }

    def load_state(self, s: dict) -> None:
        check_model_shapes(s["model"], self.model.state_dict(), s.get(SOURCE_KEY, "checkpoint"))
        if self.world.fsdp:
            from replication.train.fsdp import load_full_state_dict, load_optimizer_state

            load_full_state_dict(self.model, s["model"])
            if s["optimizer"] is not None:  # None: a finished run's last checkpoint
                load_optimizer_state(self.model, self.optimizer, s["optimizer"])
            self._full_state = None
        else:
            self.model.load_state_dict(s["model"])
            if s["optimizer"] is not None:
                self.optimizer.load_state_dict(s["optimizer"])
        self.scheduler.load_state_dict(s["scheduler"])
        self.allocator.load_state_dict(s["allocator"])
        if self.owns_classifier:
            self.classifier.load_state_dict(s["classifier"])
        if self.prompt_weights is not None:
            self.prompt_weights.load_state_dict(s["prompt_weights"])
        self.sampler.load_state_dict(s["sampler"])
        self.generator.set_state(s["generator"])
        self.update_rng.bit_generator.state = s["update_rng"]
        torch.set_rng_state(s["torch_rng"])
        self.engine.sync_weights(self.engine_view())

    def save_model(self, path: Path) -> None:
        """The policy as an HF folder, written by rank 0 (under FSDP every rank must call it),
        built beside ``path`` and swapped in whole: a failed write (DiskFull) leaves the previous
        folder, if any, as it was and no partial weights or tokenizer behind."""
        if self.world.fsdp:
            from replication.train.fsdp import save_pretrained

            save_pretrained(self.model, self.tokenizer, path, self.world, state=self.full_model_state())
        elif self.world.is_main:
            with staged_dir(path, kind=None) as tmp:
                save_pretrained_named(self.model, self.tokenizer, tmp, path)


def build_components(cfg: TrainConfig, world: World = World()) -> Components:
    check_engine(cfg)  # e.g. vllm not installed: exit 2 before data or model is loaded
    torch.manual_seed(cfg.seed)
    if cfg.model.device == "cpu":
        torch.set_num_threads(cfg.model.threads)
    data = build_data(cfg)
    # Build the allocator before the model: a bad allocator option fails before any compute.
    pool = PromptPool(ids=tuple(data.train.ids), texts=tuple(data.train.texts))
    options = {"lower": cfg.rollout.lower, "upper": cfg.rollout.upper, **cfg.allocator.options}
    # A variance-aware allocator optimises the variance of the estimator actually trained with.
    alloc_cls = ALLOCATORS.get(cfg.allocator.name)
    if "estimator" in {f.name for f in dataclasses.fields(alloc_cls.Config)}:
        options.setdefault("estimator", cfg.rl.estimator)
    try:
        allocator = make_allocator(cfg.allocator.name, seed=cfg.seed, pool=pool, **options)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"allocator.options: {e}") from None
    prompt_weights = None
    if cfg.rl.prompt_weights is not None:
        weights_cls = PROMPT_WEIGHTS.get(cfg.rl.prompt_weights)
        prompt_weights = weights_cls(config=from_dict(weights_cls.Config, cfg.rl.prompt_weights_options,
                                                      "rl.prompt_weights_options"))
    classifier, owns_classifier = allocator.classifier, False
    clf_options = getattr(getattr(prompt_weights, "config", None), "classifier", None)
    if clf_options is not None and classifier is not None:
        raise ConfigError("rl.prompt_weights_options.classifier: the allocator keeps its own classifier "
                          f"({cfg.allocator.name}); set its options under allocator.options instead")
    if prompt_weights is not None and classifier is None:
        classifier, owns_classifier = DifficultyClassifier(**(clf_options or {})), True
    modulation = None
    if cfg.rl.modulation is not None:
        modulation = from_dict(MODULATIONS.get(cfg.rl.modulation), cfg.rl.modulation_options,
                               "rl.modulation_options")
    ppo_cfg = PPOConfig(
        clip_low=cfg.rl.clip_low,
        clip_high=cfg.rl.clip_high,
        dual_clip=cfg.rl.dual_clip,
        aggregation=cfg.rl.aggregation,
        kl_coef=cfg.rl.kl_coef,
        kl_estimator=cfg.rl.kl_estimator,
    )

    check_run_inputs(cfg, data)  # pool size, prompt lengths (tokenizer only): before the weights load
    model, tokenizer = load_model(cfg)
    add_special = format_inputs(data, tokenizer)
    ref_model = None
    if cfg.rl.kl_coef > 0:
        ref_model = copy.deepcopy(model).eval()
        for p in ref_model.parameters():
            p.requires_grad_(False)
    generation_model = None
    if world.fsdp:  # shard before the optimizer is built over the parameters (train/fsdp.py)
        from replication.train.fsdp import generation_copy, shard_policy

        if cfg.rollout.engine == "hf":
            generation_model = generation_copy(model)
        shard_policy(model, world)
        if ref_model is not None:
            shard_policy(ref_model, world)
    o = cfg.optim
    # optim.fused: one kernel over all parameters. Otherwise torch's default loop (the committed
    # numbers), or under FSDP the multi-tensor AdamW (one DTensor dispatch per op for all shards)
    kernel = {"fused": True} if o.fused else {"foreach": True if world.fsdp else None}
    # optim.master_weights: bf16 parameters step through float32 copies (train/master_weights.py)
    adamw = MasterWeightAdamW if o.master_weights else torch.optim.AdamW
    optimizer = adamw(model.parameters(), lr=o.lr, weight_decay=o.weight_decay, betas=tuple(o.betas), **kernel)
    warm = max(o.warmup_steps * cfg.rl.mini_batches * cfg.rl.ppo_epochs, 0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: min(1.0, (i + 1) / warm) if warm > 0 else 1.0
    )
    from replication.engines import EnginePlacement

    engine = build_engine(cfg, generation_model if generation_model is not None else model, tokenizer,
                          add_special_tokens=add_special,
                          placement=EnginePlacement(world.rank, world.size, world.local_rank),
                          pass_sync=world.max if world.fsdp else None)  # passes over a sharded policy
    train_model = model
    if world.distributed and not world.fsdp:  # replicated: DDP's bucketed, overlapped all-reduce
        from replication.train.ddp import replicate_policy

        train_model = replicate_policy(model, world)
    generator = torch.Generator().manual_seed(cfg.seed)
    return Components(
        model=model,
        tokenizer=tokenizer,
        ref_model=ref_model,
        optimizer=optimizer,
        scheduler=scheduler,
        engine=engine,
        train=data.train,
        verifier=data.verifier,
        evaluator=Evaluator(engine, data.eval_sets, data.verifier, cfg.eval, world=world,
                            group_size=engine_group_size(cfg, world)),
        allocator=allocator,
        classifier=classifier,
        owns_classifier=owns_classifier,
        prompt_weights=prompt_weights,
        sampler=EpochSampler(len(data.train.ids), cfg.seed),
        generator=generator,
        update_rng=np.random.default_rng([cfg.seed, 1]),
        ppo_cfg=ppo_cfg,
        modulation_cfg=modulation,
        world=world,
        generation_model=generation_model,
        train_model=train_model,
    )
