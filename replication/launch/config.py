"""The ``launcher:`` section of params.yaml: which backend places a grid's runs, and on what.

    LauncherConfig()                                    # local, every visible GPU / core
    LauncherConfig.from_mapping({"backend": "local", "gpus": "0,1,2,3", "cpus": 16})

Nothing here enters a run key or a run's config.json: it says where runs go, never what they
compute (the run's shape does that, ``launch.shape``). Switching the backend therefore never
makes a finished run stale.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from replication.config import ConfigError


@dataclasses.dataclass(frozen=True)
class LauncherConfig:
    backend: str = "local"
    """Registered backend name (``launch.backend.BACKENDS``): ``local`` here; a cluster backend
    (``slurm``) registers itself under its own name."""
    gpus: tuple[str, ...] | None = None
    """GPU ids the local backend may hand out (``"0,1,2,3"`` or a list); None: the visible ones
    (``CUDA_VISIBLE_DEVICES``, else ``nvidia-smi -L``); an empty list: none (CPU only)."""
    cpus: int | None = None
    """CPU cores the local backend counts slots on; None: the cores this process may use."""
    max_runs: int | None = None
    """At most this many runs at once (None: as many as the slots allow)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Backend-specific settings passed as they are (e.g. a cluster backend's partition,
    account, qos, extra scheduler lines); the local backend takes none."""

    @classmethod
    def from_mapping(cls, m: "LauncherConfig | Mapping[str, Any] | None") -> "LauncherConfig":
        """A LauncherConfig from params.yaml's ``launcher:`` mapping (None: the defaults);
        unknown keys and bad values are a ConfigError naming them."""
        if m is None:
            return cls()
        if isinstance(m, LauncherConfig):
            return m
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(m) - names)
        if unknown:
            raise ConfigError(f"launcher: unknown key(s) {unknown} (known: {sorted(names)})")
        return cls(**dict(m))

    def __post_init__(self) -> None:
        """Normalise and check the fields however the config was built (params.yaml or code)."""
        object.__setattr__(self, "gpus", parse_gpus(self.gpus))
        for name in ("cpus", "max_runs"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ConfigError(f"launcher.{name}={v!r}: a whole number >= 1 or null")
        if not isinstance(self.backend, str) or not self.backend:
            raise ConfigError(f"launcher.backend={self.backend!r}: a backend name")
        if not isinstance(self.options, Mapping):
            raise ConfigError(f"launcher.options={self.options!r}: a mapping")
        object.__setattr__(self, "options", dict(self.options))


def parse_gpus(value: Any) -> tuple[str, ...] | None:
    """``"0,1"`` / ``[0, 1]`` / ``0`` → ("0", "1") / ("0",); None stays None (auto-detect)."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [str(value)]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"launcher.gpus={value!r}: a list of GPU ids or a comma-separated string")
    if len(set(items)) != len(items):
        raise ConfigError(f"launcher.gpus={value!r}: an id is listed twice")
    return tuple(items)
