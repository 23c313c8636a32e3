"""The interface the grid launches runs through, and the registry of backends by name.

    backend = make_backend(LauncherConfig(backend="local"))
    backend.check(shape)                 # refuses, before anything runs, a shape it can never place
    handle = backend.submit(Job(...))    # local: waits for a free slot, then starts the run
    returncode = backend.wait(handle)    # its resources are freed however it ended
    backend.cancel(handle); backend.cancel_all()   # Ctrl-C / a failed grid
    backend.expect(n)                    # batching backends (slurm): n submits form one job array

A ``Job`` carries the trainer's command as ``run_cache.train_command`` builds it
(``python -m replication train ...``), the run's own environment, its shape and its log. The
backend decides what precedes ``train`` (torchrun and its rendezvous, srun, a job script) and
adds the placement to the environment (``CUDA_VISIBLE_DEVICES``, the provenance variables of
``launch.env``). None of that enters the run key: the key takes the command from ``train`` on
(``store.run_key.normalized_command``) and the shape, never the placement.

A backend registers itself with ``@register_backend("name")``; a cluster backend lives in its
own module and is found by name from params.yaml's ``launcher.backend``.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from replication.config import ConfigError
from replication.launch.config import LauncherConfig
from replication.launch.shape import RunShape


@dataclasses.dataclass
class Job:
    """One run to launch."""

    name: str
    """For messages and job names (``<arm> s<seed>`` or the key)."""
    command: list[str]
    """The trainer's command, ``python -m replication train ...`` (``run_cache.train_command``)."""
    env: dict[str, str]
    """The run's environment, placement excluded (the backend adds it)."""
    shape: RunShape
    log: Path
    """Where the run's stdout and stderr go (appended)."""


@dataclasses.dataclass
class Handle:
    """A submitted run: what the backend needs to wait for it or cancel it."""

    job: Job
    job_id: str | None
    """The scheduler's id (None for a local run)."""
    devices: tuple[str, ...] = ()
    """The GPUs it was given (empty on CPU)."""
    command: list[str] = dataclasses.field(default_factory=list)
    """The command as launched (placement prefix included)."""
    state: Any = None
    """The backend's own bookkeeping (a process, a slot, a port)."""


class Backend(abc.ABC):
    """Places runs somewhere; the grid neither knows nor cares where."""

    name = "?"
    batches = False
    """True for a backend that submits runs to a scheduler's queue (``slurm``): the grid then
    hands it every missing run at once (``expect``, then one ``submit`` per run) so that they go
    as one submission, and lets the others finish when one fails (they are independent jobs)."""

    def __init__(self, config: LauncherConfig) -> None:
        self.config = config

    def expect(self, n: int) -> None:
        """``n`` runs are about to be submitted (a batching backend gathers them; others ignore it)."""

    def settled(self) -> None:
        """The calling thread's run is over (the grid calls it after each ``ensure_run``): if it
        never reached ``submit`` (found finished, or failed before), a batching backend stops
        waiting for it."""

    @abc.abstractmethod
    def check(self, shape: RunShape) -> None:
        """Raise ConfigError if a run of this shape can never be placed (before any compute)."""

    @abc.abstractmethod
    def capacity(self, shape: RunShape) -> int:
        """How many runs of this shape may run at once (sizes the grid's pool of waiters)."""

    @abc.abstractmethod
    def submit(self, job: Job) -> Handle:
        """Start ``job`` (a local backend may wait for free resources first)."""

    @abc.abstractmethod
    def wait(self, handle: Handle) -> int:
        """Block until the run ends; its exit status. Frees what it held, however it ended."""

    @abc.abstractmethod
    def cancel(self, handle: Handle) -> None:
        """Stop the run (terminate, then kill after a grace period) and free what it held."""

    @abc.abstractmethod
    def cancel_all(self) -> None:
        """Refuse new submissions and cancel every run still going (Ctrl-C of a grid)."""

    def run(self, job: Job) -> int:
        """Submit, wait; an interruption while waiting cancels the run before it propagates."""
        handle = self.submit(job)
        try:
            return self.wait(handle)
        except BaseException:
            self.cancel(handle)
            raise


BACKENDS: dict[str, Callable[[LauncherConfig], Backend]] = {}
"""Backend factories by name."""
MODULES = {"local": "replication.launch.local", "slurm": "replication.launch.slurm"}
"""Where a backend that is not registered yet is imported from (its module registers it)."""


def register_backend(name: str) -> Callable[[type[Backend]], type[Backend]]:
    def deco(cls: type[Backend]) -> type[Backend]:
        cls.name = name
        BACKENDS[name] = cls
        return cls

    return deco


def make_backend(config: LauncherConfig | dict | None = None) -> Backend:
    """The backend ``config.backend`` names, built on ``config``; an unknown name is a
    ConfigError listing the known ones."""
    config = LauncherConfig.from_mapping(config)
    if config.backend not in BACKENDS and config.backend in MODULES:
        try:
            importlib.import_module(MODULES[config.backend])
        except ModuleNotFoundError as e:
            if e.name != MODULES[config.backend]:
                raise
    if config.backend not in BACKENDS:
        known = sorted(set(BACKENDS) | {n for n, m in MODULES.items() if _importable(m)})
        raise ConfigError(f"launcher.backend={config.backend!r}: not a backend here (known: {known})")
    return BACKENDS[config.backend](config)


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def describe(handle: Handle) -> dict[str, Any]:
    """A submitted run in one mapping (for logs and status lines)."""
    return {"name": handle.job.name, "job_id": handle.job_id, "devices": list(handle.devices),
            "command": handle.command}
