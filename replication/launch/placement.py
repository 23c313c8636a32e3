"""Where a grid's runs would go, worked out without starting anything (``dry-run --paper``).

    at_once = runs_at_once(backend, shapes, len(jobs), workers)
    placed = place_local(local_backend, jobs, at_once)    # wave, GPU slice or cores, port, command
    flags = sbatch_flags(slurm_backend.parameters(shape))  # the sbatch resources of one run

The local plan calls the backend's own pieces: ``LocalBackend.take(shape, wait=False)`` picks the
slice (``GpuSlices``: an aligned block first) or the cores (``CpuSlots``) and a free rendezvous
port exactly as ``submit`` does, and ``LocalBackend.placed`` builds the command and environment
``submit`` starts, so the plan and the launch cannot disagree on them. What it must assume: every
run of a wave lasts as long as the others, so the next wave starts on the slices the last one
gave back, in the grid's order. The ports are free on this host now; a launch takes its own when
each run starts (a free port cannot be reserved ahead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from replication.config import ConfigError
from replication.launch.backend import Backend, Job
from replication.launch.env import DEVICES
from replication.launch.local import LocalBackend
from replication.launch.shape import RunShape


@dataclasses.dataclass(frozen=True)
class Placement:
    """One run of a local plan."""

    job: Job
    """The run as the grid would hand it to the backend."""
    wave: int
    """1 for the runs that start at once; n for those that start when wave n-1 has ended."""
    devices: tuple[str, ...]
    """Its GPU slice (``CUDA_VISIBLE_DEVICES``); empty on CPU."""
    cores: int
    """CPU cores it counts against (0 on GPU)."""
    port: int | None
    """Its torchrun rendezvous port (None for one process)."""
    command: list[str]
    """The command the local backend starts (prefix + the ``train`` part of ``job.command``)."""
    visible: str | None
    """``CUDA_VISIBLE_DEVICES`` as the run would see it (None: left as it is, no GPU machine)."""


def runs_at_once(backend: Backend, shapes: Iterable[RunShape], n_runs: int, workers: int | None) -> int:
    """How many runs the grid keeps going at once (``orchestration.grid.run_grid``): ``workers``
    when set, else the backend's capacity for the grid's shapes; a batching backend (slurm) is
    handed every run at once, its scheduler decides."""
    if backend.batches:
        return n_runs
    shapes = set(shapes)
    cap = min(backend.capacity(s) for s in shapes) if workers is None else workers
    return max(1, min(n_runs, cap))


def place_local(backend: LocalBackend, jobs: list[Job], at_once: int) -> list[Placement]:
    """Each job's wave, resources and launch command, in the grid's order: a wave starts as many
    runs as ``at_once`` and the free slices (or cores) allow; the next starts on what it gave
    back. Every shape must pass ``backend.check`` first (a ConfigError otherwise)."""
    for shape in {j.shape for j in jobs}:
        backend.check(shape)
    out: list[Placement] = []
    queue, wave = list(jobs), 0
    while queue:
        wave += 1
        running: list[dict] = []
        try:
            while queue and len(running) < at_once:
                held = backend.take(queue[0].shape, wait=False)
                if held is None:
                    break
                running.append(held)
                job = queue.pop(0)
                command, env = backend.placed(job, held)
                out.append(Placement(job=job, wave=wave, devices=tuple(held["devices"]), cores=held["cores"],
                                     port=held["port"], command=command, visible=env.get(DEVICES)))
        finally:
            for held in running:  # the wave ends: its runs give their resources back
                backend.give(held)
        if not running:
            raise ConfigError(f"run {queue[0].name}: no free slot for its shape on an idle machine")
    return out


SBATCH_FLAGS = (("nodes", "--nodes"), ("ntasks_per_node", "--ntasks-per-node"), ("cpus_per_task", "--cpus-per-task"),
                ("gpus_per_node", "--gpus-per-node"), ("mem", "--mem"), ("time", "--time"),
                ("partition", "--partition"), ("account", "--account"), ("qos", "--qos"))
"""submitit's SlurmExecutor parameters (``SlurmBackend.parameters``) as the sbatch flags they become."""


def sbatch_flags(parameters: Mapping[str, Any]) -> list[str]:
    """``SlurmBackend.parameters(shape)`` as sbatch command-line flags (``--time`` in minutes,
    the extra ``launcher.options.sbatch`` lines after the resources)."""
    flags = [f"{flag}={parameters[name]}" for name, flag in SBATCH_FLAGS if parameters.get(name) is not None]
    for name, value in (parameters.get("additional_parameters") or {}).items():
        flag = "--" + name.replace("_", "-")
        flags.append(flag if value is True else f"{flag}={value}")
    return flags
