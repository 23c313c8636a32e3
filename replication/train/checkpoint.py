"""Checkpoints that survive kill -9: written to a temporary folder, then renamed into place.

A checkpoint holds everything a run needs to continue to the same final numbers: model and
optimizer state, the allocator's and Prompt-GDRO's state, the prompt sampler, every RNG, the
step, and the metric history so far.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

LATEST = "checkpoint"


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> Path:
    run_dir = Path(run_dir)
    final = run_dir / LATEST
    tmp = run_dir / f".{LATEST}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(payload, tmp / "state.pt")
    with open(tmp / "state.pt", "rb") as f:
        os.fsync(f.fileno())
    old = run_dir / f".{LATEST}.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    run_dir = Path(run_dir)
    for name in (LATEST, f".{LATEST}.old"):  # .old survives a kill between the two renames
        path = run_dir / name / "state.pt"
        if path.exists():
            return torch.load(path, weights_only=False)
    return None
