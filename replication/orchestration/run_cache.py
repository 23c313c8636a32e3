"""One training run, content-addressed: key, train (or reuse), export.

Each run is the real CLI (``python -m replication train ...``) in a subprocess, so a notebook, a
DVC stage and a user at a shell all run exactly the same thing. The key hashes the resolved
configuration, the seed, the step count, the base model's weights AND the code that produces a
run (``code_digest``), so a run that several papers share (the same uniform GRPO baseline) is
trained once and reused, a killed sweep resumes (finished runs are skipped, a half-finished one
continues with --resume), and after a change to training code ``dvc repro`` retrains instead of
silently reusing runs of the old code.

Which code: every ``*.py`` of the ``replication`` package except ``report/``, ``orchestration/``
and ``analysis/``. Those three only read finished runs, schedule them, or measure gradients
outside training (the ``grad-variance`` command); nothing a ``train`` run computes depends on
them, so editing a table or a plot does not invalidate hours of training. Everything else (the
loop, allocators, RL maths, rollout engines, tasks, verifiers, models, config and profiles'
loader, CLI) is hashed — conservative: a comment edit there retrains too.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from replication.code_digest import NOT_TRAINING, training_code_digest
from replication.config import load_profile, to_dict
from replication.interrupts import GridInterrupted, RunGuard
from replication.report.run_evidence import EXPORT_KIND, read_json, verify_run
from replication.store import MANIFEST, DamagedArtifact, staged_dir, writer_lock
from replication.train.checkpoint import CheckpointError, checkpoint_path, load_checkpoint
from replication.train.run_folder import LOCK_ENV, RUN_KIND
from replication.train.run_log import logs_problem

DEFAULT_CACHE = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs"))

# What defines a model: weights, architecture and tokenizer — not reports written beside them
# (sft_report.json carries wall times and would make every rebuild look like a new model).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json")

RUN_FILE = "run.json"
"""Written beside an exported run: its cache key, so a later grid reuses the export as is."""


def _model_digest(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(Path(path).glob("*.safetensors")) + [Path(path) / n for n in MODEL_FILES]
    for f in files:
        if f.exists():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


PACKAGE = Path(__file__).resolve().parents[1]
"""The ``replication`` package folder whose sources ``code_digest`` hashes (``NOT_TRAINING`` left out)."""


def code_digest(root: str | Path | None = None) -> str:
    """Digest (16 hex) of every ``*.py`` under ``root`` (the package by default), sub-packages in
    ``NOT_TRAINING`` excluded, in sorted path order (``replication.code_digest``)."""
    return training_code_digest(root if root is not None else PACKAGE)


def run_key(profile: str, overrides: dict, seed: int, steps: int | None) -> tuple[str, dict]:
    """(key, resolved config) of one run; validates the configuration (ConfigError names the key).
    The key covers config, seed, steps, base model and training code (``code_digest``)."""
    cfg = load_profile(profile, {**overrides, "seed": seed})
    resolved = to_dict(cfg)
    resolved["profile"] = None  # the same settings under another profile name are the same run
    model = Path(cfg.model.path)
    digest = _model_digest(model) if model.exists() else "missing"
    blob = json.dumps({"cfg": resolved, "steps": steps or cfg.steps, "model": digest, "code": code_digest()},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20], resolved


def train_command(profile: str, overrides: dict, seed: int, steps: int | None, out: Path,
                  resume: bool, overwrite: bool = False) -> list[str]:
    """The CLI call that trains one run into ``out``."""
    cmd = [sys.executable, "-m", "replication", "train", "--profile", profile, "--seed", str(seed),
           "--out", str(out), "--no-progress"]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    if steps is not None:
        cmd += ["--max-steps", str(steps)]
    if resume:
        cmd.append("--resume")
    elif overwrite:
        cmd.append("--overwrite")
    return cmd


def _entry_state(run_dir: Path) -> tuple[str, str]:
    """("done", "") for a verified run, ("damaged", why) for one that looks finished (manifest
    or metrics.json) but does not verify, ("unfinished", "") otherwise."""
    looks_done = (run_dir / MANIFEST).exists() or (run_dir / "metrics.json").exists()
    if not looks_done:
        return "unfinished", ""
    try:
        verify_run(run_dir, kind=RUN_KIND)
    except DamagedArtifact as e:
        return "damaged", str(e)
    return "done", ""


def cached_run(key: str, cache: Path = DEFAULT_CACHE, *, warn: bool = True) -> Path | None:
    """The finished run with this key in the cache (its manifest verifies), or None; a damaged
    one is None with a warning naming it (it will be retrained)."""
    run_dir = Path(cache) / key
    state, why = _entry_state(run_dir)
    if state == "damaged" and warn:
        warnings.warn(f"run cache entry {run_dir} is damaged ({why}); it will be retrained", stacklevel=2)
    return run_dir if state == "done" else None


def _resumable(run_dir: Path) -> bool:
    """A checkpoint that loads and whose logs reach its step; otherwise False (with a warning
    naming the entry when a checkpoint is there but unusable)."""
    if checkpoint_path(run_dir) is None:
        return False
    try:
        ckpt = load_checkpoint(run_dir)
    except CheckpointError as e:
        warnings.warn(f"{e}; run cache entry {run_dir} trains again from step 0", stacklevel=3)
        return False
    problem = logs_problem(run_dir, ckpt["step"])
    if problem:
        warnings.warn(f"run cache entry {run_dir}: checkpoint at step {ckpt['step']} not resumable "
                      f"({problem}); it trains again from step 0", stacklevel=3)
        return False
    return True


def ensure_run(profile: str, overrides: dict, seed: int, steps: int | None,
               cache: Path = DEFAULT_CACHE, name: str = "", guard: RunGuard | None = None) -> Path:
    """The run's folder in the cache, training it first (or resuming it) when it is not finished.
    Holds the entry's writer lock meanwhile (a second writer: ``LockHeld`` naming the holder)."""
    key, _ = run_key(profile, overrides, seed, steps)
    done = cached_run(key, cache)
    if done is not None:
        return done
    if guard is not None and guard.stopped:
        raise GridInterrupted(f"run {name or key} seed {seed} not started: the grid was stopped")
    run_dir = Path(cache) / key
    Path(cache).mkdir(parents=True, exist_ok=True)
    with writer_lock(run_dir, "run cache entry"):
        state, _ = _entry_state(run_dir)  # finished by another writer since our first look?
        if state == "done":
            return run_dir
        # a killed run continues from its checkpoint (if its logs reach it); a damaged or
        # checkpoint-less one starts again
        resume = state == "unfinished" and _resumable(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        log = Path(cache) / f"{key}.log"
        cmd = train_command(profile, overrides, seed, steps, run_dir, resume, overwrite=not resume)
        env = {**os.environ, "REPLICATION_PARENT_PID": str(os.getpid()),  # the run dies with us
               LOCK_ENV: f"{os.getpid()}:{run_dir.resolve()}"}  # and we hold its folder's lock
        with open(log, "a") as f:
            if guard is None:
                returncode = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
            else:  # Ctrl-C / SIGTERM of a grid: no new start, running ones terminated
                returncode = guard.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        if guard is not None and guard.stopped:
            raise GridInterrupted(f"run {name or key} seed {seed} stopped (exit {returncode})")
        if returncode != 0:
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"run {name or key} seed {seed} failed (exit {returncode}):\n{tail}")
        verify_run(run_dir, kind=RUN_KIND)  # exit 0 without a verifying run is not a run
    return run_dir


def export_run(run_dir: Path, dest: Path, key: str | None = None) -> None:
    """Copy what readers compare (metrics, per-step log, gzipped per-prompt records) and, with
    ``key``, the run's cache key (``run.json``: a later grid reuses this export without training),
    into a staged folder swapped in with its manifest, under ``dest``'s writer lock. The run is
    verified first: a damaged run is never exported."""
    run_dir, dest = Path(run_dir), Path(dest)
    verify_run(run_dir)
    steps = read_json(run_dir / "metrics.json")["steps"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    extra = {"steps": steps} if key is None else {"steps": steps, "key": key}
    with writer_lock(dest, "export"), staged_dir(dest, kind=EXPORT_KIND, extra=extra) as tmp:
        for name in ("metrics.json", "steps.jsonl", "config.json"):
            shutil.copyfile(run_dir / name, tmp / name)
        # mtime=0 keeps the gzip bytes identical for identical records (stable in git and DVC).
        with open(run_dir / "prompts.jsonl", "rb") as src, open(tmp / "prompts.jsonl.gz", "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as dst:
            shutil.copyfileobj(src, dst)
        if key is not None:
            (tmp / RUN_FILE).write_text(json.dumps({"key": key}) + "\n")
    verify_run(dest, kind=EXPORT_KIND)


def exported_key(dest: Path) -> str | None:
    """The cache key recorded in a verified export; None when there is no export (or it has no
    key). An export that is there but does not verify is an error naming it: committed results
    are restored, not silently retrained over."""
    dest = Path(dest)
    if not dest.is_dir() or not any(dest.iterdir()):
        return None
    try:
        verify_run(dest, kind=EXPORT_KIND)
    except DamagedArtifact as e:
        raise DamagedArtifact(f"damaged export, not used: {e} (restore it, e.g. `git checkout -- "
                              f"{dest}`, or remove the folder to train that run again)") from None
    f = dest / RUN_FILE
    return read_json(f).get("key") if f.exists() else None
