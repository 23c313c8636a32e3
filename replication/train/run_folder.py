"""The rules of a run folder (``--out``), checked before any data or model is loaded.

- ``--out`` must be a folder we can write (or creatable under one): a file or an unwritable
  parent is an error naming the path.
- A folder that already holds a run (checkpoint, logs, metrics, model) is never overwritten
  without ``--overwrite``; ``--resume`` continues it instead.
- ``--resume`` needs a readable checkpoint written with the same configuration, at a step no
  later than the requested length (metrics must describe what actually ran), and logs that
  reach its step (a checkpoint copied alone into a fresh folder is refused); a partial last log
  line (a cut write) is trimmed with a warning: the checkpoint is the truth.
- One writer per folder: the lock (``store.writer_lock``, a ``.<name>.lock`` file beside the
  folder) is taken before the folder is created and held for the trainer's life, so a second
  trainer — ``--resume`` on a folder another one has just created included — is refused with
  one line naming the folder and the holder; the kernel releases it when the holder dies. A
  grid that holds the lock of a cache entry for its own trainer says so in ``LOCK_ENV``.
- Complete or absent: ``finish_run`` writes metrics.json atomically and then the run's
  manifest (``MANIFEST.json``: files, sizes, sha256, row counts, steps), the last file written.
  A run is finished only if its manifest verifies (``store.run_evidence.verify_run``); a
  0-byte metrics.json from a full disk no longer marks a run finished.
- Training stops with ``NonFiniteError`` when a loss, gradient norm or weight turns NaN/inf;
  the last checkpoint (written before the bad step) is left as it is.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from replication.config import ConfigError
from replication.store import MANIFEST, LockHeld, hold_writer_lock, release_writer_lock, write_atomic, write_manifest
from replication.train.checkpoint import LATEST, CheckpointError, checkpoint_path, read_checkpoint_file
from replication.train.run_log import logs_problem, trim_partial_lines

# What a training run writes into its folder (other files there stay).
RUN_FILES = ("config.json", "steps.jsonl", "prompts.jsonl", "metrics.json", MANIFEST)
RUN_KIND = "run"
"""The manifest kind of a training run folder (an export's is ``export``)."""
LOCK_ENV = "REPLICATION_RUN_LOCKED"
"""``<pid>:<folder>``: the grid process ``pid`` holds the writer lock of ``folder`` for the trainer
it started (the trainer dies with it: ``interrupts.die_with_parent``)."""
RUN_DIRS = (LATEST, f".{LATEST}.old", f".{LATEST}.tmp", "dvclive", "model")


class RunFolderError(ConfigError):
    """A run folder that cannot be used as asked (exit 2; the message names the path)."""


class NonFiniteError(RuntimeError):
    """Training produced NaN/inf; the message names the step and the quantity."""


def check_out_dir(out: Path, flag: str = "--out") -> None:
    """``out`` is a folder (or can be created) and is writable; raises RunFolderError."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"{flag} {out} is a file, not a folder")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise RunFolderError(f"{flag} {out}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise RunFolderError(f"{flag} {out}: folder {probe} is not writable")


def existing_run_files(out: Path) -> list[str]:
    out = Path(out)
    return [n for n in (*RUN_FILES, *RUN_DIRS) if (out / n).exists()]


def clear_run(out: Path) -> None:
    """Remove a previous run's files (``--overwrite``); other files in the folder stay."""
    out = Path(out)
    for n in RUN_FILES:
        (out / n).unlink(missing_ok=True)
    for n in RUN_DIRS:
        if (out / n).exists():
            shutil.rmtree(out / n)


_LOCKS: set[str] = set()


def _held_by_parent(key: str) -> bool:
    return os.environ.get(LOCK_ENV, "") == f"{os.getppid()}:{key}"


def lock_run(out: Path) -> None:
    """Hold the writer lock of run folder ``out`` (which need not exist yet) for this process's
    life (or until ``unlock_run``); a live holder elsewhere is a RunFolderError naming it."""
    out = Path(out)
    key = str(out.resolve())
    if key in _LOCKS or _held_by_parent(key):
        return
    try:  # the lock file lives beside the folder: taken before the folder is created
        hold_writer_lock(out, "one trainer per run folder")
    except LockHeld as e:
        raise RunFolderError(f"refused, in use: {e}") from None
    _LOCKS.add(key)


def unlock_run(out: Path) -> None:
    key = str(Path(out).resolve())
    if key in _LOCKS:
        _LOCKS.discard(key)
        release_writer_lock(out)


def finish_run(out: Path, metrics: dict) -> None:
    """Write metrics.json atomically, then the run's manifest (the last file: the run exists).
    A full disk raises ``store.DiskFull`` naming the file, with no manifest left behind."""
    out = Path(out)
    write_atomic(out / "metrics.json", json.dumps(metrics, indent=1, sort_keys=True))
    write_manifest(out, kind=RUN_KIND, extra={"steps": int(metrics["steps"])})


def prepare_run(out: Path, config: dict, steps: int, *, resume: bool, overwrite: bool,
                main: bool = True) -> dict | None:
    """Check the folder against the flags; returns the checkpoint payload when resuming.

    Nothing is deleted unless every check passed (``--overwrite`` clears only then). In a
    multi-process run only the main rank (``main``) locks, checks for an old run and clears it;
    every rank reads and checks the checkpoint."""
    out = Path(out)
    check_out_dir(out)
    if main:
        lock_run(out)
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite exclude each other")
    if resume:
        path = checkpoint_path(out)
        if path is None:
            raise RunFolderError(f"--resume: no checkpoint in {out} (expected {out / LATEST / 'state.pt'}); "
                                 f"drop --resume to start a new run")
        try:
            ckpt = read_checkpoint_file(path)
        except CheckpointError as e:
            raise RunFolderError(str(e)) from None
        if ckpt["config"] != config:
            diff = _first_difference(ckpt["config"], config)
            raise RunFolderError(f"--resume: {path} was written with a different configuration "
                                 f"({diff}); use the same settings or --overwrite")
        if ckpt["step"] > steps:
            raise RunFolderError(f"--resume: {path} is at step {ckpt['step']}, past --max-steps "
                                 f"{steps}; metrics would understate what ran (use --max-steps >= "
                                 f"{ckpt['step']})")
        if main:
            problem = logs_problem(out, ckpt["step"])
            if problem:
                raise RunFolderError(f"--resume: {path} is at step {ckpt['step']} but {problem}; a "
                                     f"checkpoint resumes only with logs that reach its step "
                                     f"(--overwrite starts again)")
            trim_partial_lines(out)
        return ckpt
    if not main:
        return None
    found = existing_run_files(out)
    if found and not overwrite:
        raise RunFolderError(f"{out} already holds a run ({', '.join(found)}); pass --resume to "
                             f"continue it or --overwrite to start again")
    if found:
        clear_run(out)
    return None


def _first_difference(a: Any, b: Any, key: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{key}.{k}" if key else str(k))
    return f"{key or 'config'}: checkpoint {a!r}, now {b!r}"


def check_finite(step: int, model: torch.nn.Module, row_loss: np.ndarray, stats: dict) -> None:
    """Raise NonFiniteError if the step's loss, gradient norm or any weight is NaN/inf."""
    loss = np.asarray(row_loss, dtype=float)
    if loss.size and not np.isfinite(loss).all():
        raise NonFiniteError(f"step {step}: non-finite loss ({loss[~np.isfinite(loss)][0]})")
    gn = stats.get("grad_norm")
    if gn is not None and not math.isfinite(gn):
        raise NonFiniteError(f"step {step}: non-finite gradient norm ({gn})")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p = p.to_local() if hasattr(p, "to_local") else p  # FSDP: this rank's shard
            if not torch.isfinite(p).all():
                raise NonFiniteError(f"step {step}: non-finite weights in {name}")
