"""The ``sft:`` section of a profile: the supervised warm start's options (``python -m replication
sft``, replication/sft.py). Here, with the other config dataclasses, so that ``validate`` checks
the section without importing the trainer."""

from __future__ import annotations

import dataclasses

from replication.models.tiny import TinyModelConfig
from replication.tasks.procedural import get_level

DEFAULT_SFT_MIX = {"add1": 1.0, "mul1": 1.0, "add1t3": 1.0, "mul1t3": 1.0, "add2": 3.0, "add2t3": 2.0, "add3": 1.0, "mul2": 1.0}
"""SFT shares per level. 2-digit a±b learns carries in a seed-dependent burst; with an equal share
it was still at p ≈ 0.17 after 2,000 steps for one seed out of two, while a triple share puts it at
p ≈ 0.5-0.67 for all three seeds tried (the middle of the train-pool histogram is mostly add2)."""


@dataclasses.dataclass
class SFTConfig:
    """Supervised warm start (the ``sft:`` section of a profile)."""

    steps: int = 2000
    """Optimizer steps (``--steps`` overrides; 20 makes a smoke run)."""
    batch_size: int = 128
    """Examples per step."""
    lr: float = 1e-3
    """Peak AdamW learning rate."""
    lr_min: float = 1e-4
    """Learning rate at the end of the cosine decay."""
    warmup_steps: int = 20
    """Linear warm-up steps before the cosine decay."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    mix: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_SFT_MIX))
    """Relative share of each level alias in the SFT batches (levels outside it are unseen)."""
    corpus_per_level: int = 10_000
    """Distinct SFT examples generated per level (fewer where the problem space is smaller)."""
    seed: int = 0
    """Seed of initialisation, corpus, batch order and the report's sampling."""
    threads: int = 1
    """torch threads (1 is fastest when the 2 cores are shared: OpenMP spin-waits otherwise)."""
    model: TinyModelConfig = dataclasses.field(default_factory=TinyModelConfig)
    """Tiny model shape."""
    probe_prompts: int = 512
    """Train-pool prompts (seeded subsample) whose success probability p the report estimates."""
    probe_samples: int = 16
    """Rollouts per probed prompt at temperature 1 (p = successes / samples)."""
    eval_k: int = 8
    """Samples per held-out prompt for mean@k / pass@k."""
    eval_prompts: int = 200
    """Prompts per held-out set in the report (0 = all)."""
    max_new_tokens: int = 8
    """Completion length limit when probing (longest answer + EOS is 7 tokens)."""
    probe_every: int = 0
    """Also probe the train pool every this many steps (0 = only at the end); for tuning."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "corpus_per_level", "threads", "probe_samples", "eval_k", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"sft.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.lr_min <= self.lr:
            raise ValueError(f"sft.lr_min must be in (0, sft.lr], got {self.lr_min}")
        if not self.mix or any(float(w) < 0 for w in self.mix.values()) or sum(map(float, self.mix.values())) <= 0:
            raise ValueError("sft.mix needs non-negative weights with a positive sum")
        for alias in self.mix:
            get_level(alias)
        if isinstance(self.model, dict):
            self.model = TinyModelConfig(**self.model)
