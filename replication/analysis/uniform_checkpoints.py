"""The uniform run whose checkpoints the gradient variance is measured at: trained (resuming
between checkpoints) or reused, an HF model folder kept at each requested step."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path

from replication.config import TrainConfig
from replication.store import is_complete, staged_dir

CHECKPOINT_KIND = "gradient-variance-checkpoint"
"""The manifest kind of a checkpoint's HF model folder."""


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def train_uniform_checkpoints(cfg: TrainConfig, run_dir: str | Path, steps: Sequence[int],
                              progress: bool = False) -> dict[int, Path]:
    """Train the profile's uniform run in ``run_dir`` (resuming between checkpoints) and keep
    an HF model folder at each step; step 0 is the profile's base model. Existing folders are
    reused, so a second call trains nothing. Each folder is complete or absent (copied beside its
    place with a manifest, renamed in): a measurement killed mid-copy never reuses half a model."""
    from replication.train.loop import train

    run_dir = Path(run_dir)
    cfg = dataclasses.replace(cfg, allocator=dataclasses.replace(cfg.allocator, name="uniform", options={}))
    out: dict[int, Path] = {}
    for s in sorted(steps):
        if s == 0:
            out[0] = Path(cfg.model.path)
            continue
        dest = checkpoint_dir(run_dir, s)
        if not is_complete(dest, kind=CHECKPOINT_KIND):
            from replication.train.checkpoint import load_checkpoint

            ck = load_checkpoint(run_dir)
            if ck is not None and ck["step"] > s:
                raise ValueError(f"{run_dir} is already past step {s} (at {ck['step']}) and has no "
                                 f"complete checkpoint folder for it ({dest}); use a fresh --run folder")
            train(cfg, run_dir, max_steps=s, resume=ck is not None, overwrite=ck is None,
                  progress=progress)
            with staged_dir(dest, kind=CHECKPOINT_KIND, extra={"step": s}) as tmp:
                shutil.copytree(run_dir / "model", tmp, dirs_exist_ok=True)
        out[s] = dest
    return out
