"""In-flight records: which scheduler job trains which run-cache entry, kept on disk beside it.

    write_record(cache, InFlight(key=..., job_id="123_4", ...))   # <cache>/<key>.job.json, atomic
    read_record(cache, key)       # the record, or None
    remove_record(cache, key)     # once the run is in the cache

A run placed on a scheduler (the ``slurm`` backend) outlives the process that submitted it: the
grid may return at once (``launcher.options.detach``), be killed, or run on a login node that
logs out. The record is what a later grid — or ``python -m replication status`` — needs to find
the job again without that process: its id, where and when it was submitted, and its logs.

One small JSON file per run, ``<cache>/<key>.job.json``, beside the entry ``<cache>/<key>/`` and
its log ``<cache>/<key>.log``: the record is written only by the holder of the entry's writer
lock (``run_cache.ensure_run``, right after the submission), so two grids sharing a cache never
write the same file, and each write is atomic (``store.write_atomic``). It is removed when the
run is found in the cache; a failed job's record stays (``status`` shows it) until the run is
submitted again, whose record replaces it.

``RunDetached`` (one run) and ``GridDetached`` (the grid) say that runs were left in flight.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

from replication.store import write_atomic

SUFFIX = ".job.json"
"""A record's file name after the run key."""


@dataclasses.dataclass(frozen=True)
class InFlight:
    """One submitted run: enough to follow its job from any process on any host."""

    key: str
    """The run key: the cache entry ``<cache>/<key>/`` the job trains."""
    name: str
    """The run as the grid names it (``<arm> seed <seed>``), for messages."""
    job_id: str
    """The scheduler's id: ``<array>_<index>`` for an array task, else the job id."""
    host: str
    """The host the grid that submitted it ran on."""
    submitted: str
    """When it was submitted (UTC, ISO 8601)."""
    log: str
    """The run's log, ``<cache>/<key>.log`` (the trainer's output, appended by every attempt)."""
    job_log: str
    """The scheduler job's own log (submitit's ``<array>_<index>_0_log.out``)."""
    backend: str = "slurm"
    """The backend that submitted it (the one that can follow it)."""

    @property
    def array(self) -> str:
        """The array (or plain job) id: what ``sacct -j`` and ``scancel`` take for the whole submission."""
        return self.job_id.split("_")[0]

    @property
    def index(self) -> int | None:
        """The task's index in its array, None for a plain job."""
        _, sep, index = self.job_id.partition("_")
        return int(index) if sep and index.isdigit() else None


class RunDetached(Exception):
    """A run was submitted and not waited for (``launcher.options.detach``); carries its record."""

    def __init__(self, record: InFlight) -> None:
        super().__init__(f"run {record.name} submitted as job {record.job_id}; not waiting for it")
        self.record = record


class GridDetached(RuntimeError):
    """The grid left runs in flight on the scheduler and returned without them: its products
    cannot be made yet (the message says how many, how to watch them and how to collect them)."""


def record_path(cache: str | Path, key: str) -> Path:
    return Path(cache) / f"{key}{SUFFIX}"


def write_record(cache: str | Path, record: InFlight) -> Path:
    """Write (or replace) the record of ``record.key`` atomically; its path."""
    path = record_path(cache, record.key)
    write_atomic(path, json.dumps(dataclasses.asdict(record), indent=1, sort_keys=True) + "\n")
    return path


def read_record(cache: str | Path, key: str) -> InFlight | None:
    """The record of ``key``, None when there is none; an unreadable one is None with a warning
    naming it (the run is then treated as not submitted: its entry's lock still keeps a second
    writer off a job that is running)."""
    path = record_path(cache, key)
    try:
        data = json.loads(path.read_text())
        return InFlight(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as e:
        warnings.warn(f"in-flight record {path} is not readable ({e}); ignored", stacklevel=2)
        return None


def remove_record(cache: str | Path, key: str) -> None:
    record_path(cache, key).unlink(missing_ok=True)
