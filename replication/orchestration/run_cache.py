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
from pathlib import Path

from replication.code_digest import code_digest as _code_digest
from replication.config import load_profile, to_dict
from replication.interrupts import GridInterrupted, RunGuard
from replication.train.checkpoint import checkpoint_path

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
"""The ``replication`` package folder whose sources ``code_digest`` hashes."""
NOT_TRAINING = ("report", "orchestration", "analysis")
"""Sub-packages that never run inside ``train`` (module docstring): left out of the code digest."""


def code_digest(root: str | Path | None = None) -> str:
    """Digest (16 hex) of every ``*.py`` under ``root`` (the package by default), sub-packages in
    ``NOT_TRAINING`` excluded, in sorted path order (``replication.code_digest``)."""
    return _code_digest(root if root is not None else PACKAGE, exclude=NOT_TRAINING)


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


def cached_run(key: str, cache: Path = DEFAULT_CACHE) -> Path | None:
    """The finished run with this key in the cache, or None."""
    run_dir = Path(cache) / key
    return run_dir if (run_dir / "metrics.json").exists() else None


def ensure_run(profile: str, overrides: dict, seed: int, steps: int | None,
               cache: Path = DEFAULT_CACHE, name: str = "", guard: RunGuard | None = None) -> Path:
    """The run's folder in the cache, training it first (or resuming it) when it is not finished."""
    key, _ = run_key(profile, overrides, seed, steps)
    done = cached_run(key, cache)
    if done is not None:
        return done
    if guard is not None and guard.stopped:
        raise GridInterrupted(f"run {name or key} seed {seed} not started: the grid was stopped")
    run_dir = Path(cache) / key
    # a killed run continues from its checkpoint; one killed before its first checkpoint restarts
    resume = checkpoint_path(run_dir) is not None
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "train.log"
    cmd = train_command(profile, overrides, seed, steps, run_dir, resume, overwrite=not resume)
    env = {**os.environ, "REPLICATION_PARENT_PID": str(os.getpid())}  # the run dies with us
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
    return run_dir


def export_run(run_dir: Path, dest: Path, key: str | None = None) -> None:
    """Copy what readers compare (metrics, per-step log, gzipped per-prompt records) and, with
    ``key``, the run's cache key (``run.json``: a later grid reuses this export without training)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.json", "steps.jsonl", "config.json"):
        shutil.copyfile(run_dir / name, dest / name)
    # mtime=0 keeps the gzip bytes identical for identical records (stable in git and DVC).
    with open(run_dir / "prompts.jsonl", "rb") as src, open(dest / "prompts.jsonl.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as dst:
        shutil.copyfileobj(src, dst)
    if key is not None:
        (dest / RUN_FILE).write_text(json.dumps({"key": key}) + "\n")


def exported_key(dest: Path) -> str | None:
    """The cache key recorded beside a complete export, or None."""
    f = Path(dest) / RUN_FILE
    needed = ("metrics.json", "steps.jsonl", "config.json", "prompts.jsonl.gz")
    if not f.exists() or not all((Path(dest) / n).exists() for n in needed):
        return None
    try:
        return json.loads(f.read_text()).get("key")
    except (OSError, ValueError):
        return None
