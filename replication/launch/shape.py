"""What a run computes on — its shape — as opposed to where it is placed.

    shape = RunShape.of(cfg)                         # from the resolved config alone
    shape = RunShape.of(cfg, {"processes": 8})       # a per-run override (a paper-scale grid)
    shape.key()     # {"nodes", "processes", "gpus_per_process"}: the part that enters the run key

The shape is declared, not discovered: nodes, processes per node, GPUs per process and CPU
threads per process decide how a run's numbers are computed (how the batch is split, which
kernels run), so the part of it that can change a number enters the run key
(``orchestration.run_cache.run_key``). Memory and time limit are requests to a scheduler: they
change where and whether a run can start, never what it computes, so they stay out of the key.
CPU threads are already in the key through the config (``model.threads``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from replication.config import ConfigError


@dataclasses.dataclass(frozen=True)
class RunShape:
    """One run's resources. ``processes`` is per node; a run spans ``nodes × processes`` ranks."""

    nodes: int = 1
    """Hosts the run spans (the local backend runs one-node shapes only)."""
    processes: int = 1
    """Training processes (ranks) per node; more than one is a torchrun launch."""
    gpus_per_process: int = 0
    """GPUs each rank uses (0 on CPU; nccl runs one rank per GPU, so 1 on GPU)."""
    cpus_per_process: int = 1
    """CPU threads each rank computes with (the config's ``model.threads``)."""
    memory_gb: float | None = None
    """Host memory the run asks a scheduler for (None: the scheduler's default)."""
    time_limit_min: int | None = None
    """Wall-clock limit a scheduler enforces (None: the scheduler's default)."""

    KEY_FIELDS = ("nodes", "processes", "gpus_per_process")

    @classmethod
    def of(cls, cfg: Any, override: Mapping[str, Any] | None = None) -> "RunShape":
        """The shape a resolved config declares (1 node, 1 process, 1 GPU per process when
        ``model.device`` is cuda, ``model.threads`` CPUs), with ``override``'s fields replacing
        those; an unknown field or a non-positive count is a ConfigError naming it."""
        base = cls(gpus_per_process=1 if cfg.model.device == "cuda" else 0,
                   cpus_per_process=max(1, int(getattr(cfg.model, "threads", 1) or 1)))
        return base.replaced(override or {})

    def replaced(self, override: Mapping[str, Any]) -> "RunShape":
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(override) - names)
        if unknown:
            raise ConfigError(f"shape: unknown field(s) {unknown} (known: {sorted(names)})")
        shape = dataclasses.replace(self, **dict(override))
        shape.check()
        return shape

    def check(self) -> None:
        for name in ("nodes", "processes", "cpus_per_process"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"shape.{name}={value!r}: a whole number >= 1")
        g = self.gpus_per_process
        if not isinstance(g, int) or isinstance(g, bool) or g < 0:
            raise ConfigError(f"shape.gpus_per_process={g!r}: a whole number >= 0")
        for name in ("memory_gb", "time_limit_min"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ConfigError(f"shape.{name}={value!r}: a positive number or null")

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes

    @property
    def gpus_per_node(self) -> int:
        return self.processes * self.gpus_per_process

    @property
    def cpus_per_node(self) -> int:
        return self.processes * self.cpus_per_process

    def key(self) -> dict[str, int]:
        """The fields that can change a run's numbers, as the run key records them."""
        return {f: getattr(self, f) for f in self.KEY_FIELDS}
