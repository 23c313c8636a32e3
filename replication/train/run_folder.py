"""The rules of a run folder (``--out``), checked before any data or model is loaded.

- ``--out`` must be a folder we can write (or creatable under one): a file or an unwritable
  parent is an error naming the path.
- A folder that already holds a run (checkpoint, logs, metrics, model) is never overwritten
  without ``--overwrite``; ``--resume`` continues it instead.
- ``--resume`` needs a readable checkpoint written with the same configuration, at a step no
  later than the requested length (metrics must describe what actually ran).
- One trainer per folder: a second process on the same folder (a grid re-run while an orphaned
  run still trains) is refused; the lock (flock on the folder itself: no file is added)
  vanishes with its process.
- Training stops with ``NonFiniteError`` when a loss, gradient norm or weight turns NaN/inf;
  the last checkpoint (written before the bad step) is left as it is.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from replication.config import ConfigError
from replication.train.checkpoint import LATEST, CheckpointError, checkpoint_path, read_checkpoint_file

# What a training run writes into its folder (train.log is the grid's, and stays).
RUN_FILES = ("config.json", "steps.jsonl", "prompts.jsonl", "metrics.json")
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


_LOCKS: dict[str, int] = {}


def lock_run(out: Path) -> None:
    """Hold an exclusive lock on an existing run folder for this process's lifetime (or until
    ``unlock_run``); another process holding it is an error."""
    out = Path(out)
    key = str(out.resolve())
    if key in _LOCKS or not out.is_dir():
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        return
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise RunFolderError(f"{out} is in use by another training process") from None
    _LOCKS[key] = fd


def unlock_run(out: Path) -> None:
    fd = _LOCKS.pop(str(Path(out).resolve()), None)
    if fd is not None:
        os.close(fd)


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
