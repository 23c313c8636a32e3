"""What a gradient-variance measurement measures: the methods and the settings (GradVarConfig).

The methods are the allocation lab's names (report/lab.py), each mapped to a registered allocator
and its options; the settings say at which checkpoints, with how many draws and on how many
prompts (docs/gradient_variance.md).
"""

from __future__ import annotations

import dataclasses

METHODS: dict[str, tuple[str, dict]] = {
    "uniform": ("uniform", {}),
    "vip-oracle": ("oracle", {}),
    "vip-gp": ("vip", {}),
    "vip-ma": ("vip", {"predictor": "moving-average"}),
    "dynamo": ("dynamo", {}),
    "rollout-gdro": ("rollout-gdro", {}),
    "gdro-sqrt-law": ("gdro-sqrt-law", {}),
    "inverse-accuracy": ("vip-inverse-accuracy", {"predictor": "moving-average"}),
}
"""Method name (the allocation lab's names, report/lab.py) → (registered allocator, options).
VIP with true p is ``vip-oracle``; ``inverse-accuracy`` uses a moving-average p̂ as in the lab."""


KIND = "gradient-variance"
"""The manifest kind of a measurement folder (replication/store)."""


@dataclasses.dataclass
class GradVarConfig:
    """Settings of the measurement (the training settings come from the profile)."""

    steps: tuple[int, ...] = (0, 100, 300)
    """Checkpoint steps of the uniform run (0 = the base model). Issue 10: at least 3."""
    draws: int = 30
    """Independent rollout sets per allocator and checkpoint (issue 10: at least 30)."""
    reference_draws: int = 30
    """Extra uniform draws whose mean gradient is the projection direction u."""
    oracle_samples: int = 64
    """Rollouts per prompt that estimate the true p told to vip-oracle."""
    prompts: int | None = None
    """Q, size of the fixed batch; None = the profile's rollout.prompts_per_step."""
    methods: tuple[str, ...] = tuple(METHODS)
    """Methods to measure (keys of METHODS); uniform is always included (the ratios' base)."""
    method_options: dict[str, dict] = dataclasses.field(default_factory=dict)
    """Allocator options per method, over METHODS' own (e.g. ``{"vip-gp": {"bandwidth": 0.4}}``,
    the VIP arm's GP settings from params.yaml), so each method is measured as its arm runs it."""
    bootstrap: int = 2000
    """Bootstrap resamples for the ratio CIs."""
    seed: int = 0
    """Seeds the batch choice, the rollouts and the bootstrap."""
    threads: int = 0
    """torch threads of the measuring process (0: the profile's ``model.threads``; the profile's
    ``gradvar.threads``, config.sections.GradVarSection)."""

    def __post_init__(self) -> None:
        self.steps = tuple(int(s) for s in self.steps)
        self.methods = tuple(self.methods)
        if not self.steps or min(self.steps) < 0 or len(set(self.steps)) != len(self.steps):
            raise ValueError(f"grad-variance steps must be distinct integers >= 0, got {self.steps}")
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise ValueError(f"grad-variance: unknown method(s) {unknown}; known: {sorted(METHODS)}")
        if "uniform" not in self.methods:
            self.methods = ("uniform", *self.methods)
        self.method_options = {str(k): dict(v or {}) for k, v in dict(self.method_options or {}).items()}
        stray = sorted(set(self.method_options) - set(self.methods))
        if stray:
            raise ValueError(f"grad-variance method_options for method(s) not measured: {stray}; "
                             f"measured: {list(self.methods)}")
        for name in ("draws", "reference_draws"):
            if int(getattr(self, name)) < 3:
                raise ValueError(f"grad-variance {name} must be >= 3, got {getattr(self, name)}")
        if self.oracle_samples < 2:
            raise ValueError(f"grad-variance oracle_samples must be >= 2, got {self.oracle_samples}")
        if int(self.threads) < 0:
            raise ValueError(f"grad-variance threads must be >= 0 (0: the profile's), got {self.threads}")
        if self.bootstrap < 100:
            raise ValueError(f"grad-variance bootstrap must be >= 100, got {self.bootstrap}")
