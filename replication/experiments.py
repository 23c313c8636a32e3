"""Run a grid of (arm × seed) training runs — two at a time on two cores — with a run cache.

An arm is a name plus config overrides. Each run is the real CLI
(``python -m replication train ...``) in a subprocess, so a notebook, a DVC stage and a user
at a shell all run exactly the same thing. Runs are content-addressed: the key hashes the
resolved configuration, the seed, the step count and the base model's weights, so a run that
several papers share (the same uniform GRPO baseline) is trained once and reused, and a
killed sweep resumes (finished runs are skipped, a half-finished one continues with --resume).

The key does not hash the source code: after changing training code, clear the cache
(``rm -rf .cache/runs``) or point ``REPLICATION_RUN_CACHE`` elsewhere, so no stale run is reused.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from replication.config import load_profile, to_dict

DEFAULT_CACHE = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs"))


@dataclasses.dataclass(frozen=True)
class Arm:
    name: str
    """Display name, e.g. 'RLOO+VIP'."""
    overrides: dict
    """Config overrides with dotted keys, e.g. {'allocator.name': 'vip', 'rl.estimator': 'rloo'}."""


# What defines a model: weights, architecture and tokenizer — not reports written beside them
# (sft_report.json carries wall times and would make every rebuild look like a new model).
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json")


def _model_digest(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(Path(path).glob("*.safetensors")) + [Path(path) / n for n in MODEL_FILES]
    for f in files:
        if f.exists():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run_key(profile: str, overrides: dict, seed: int, steps: int | None) -> tuple[str, dict]:
    cfg = load_profile(profile, {**overrides, "seed": seed})
    resolved = to_dict(cfg)
    resolved["profile"] = None  # the same settings under another profile name are the same run
    model = Path(cfg.model.path)
    digest = _model_digest(model) if model.exists() else "missing"
    blob = json.dumps({"cfg": resolved, "steps": steps or cfg.steps, "model": digest}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20], resolved


def _cli(profile: str, overrides: dict, seed: int, steps: int | None, out: Path, resume: bool) -> list[str]:
    cmd = [sys.executable, "-m", "replication", "train", "--profile", profile, "--seed", str(seed),
           "--out", str(out), "--no-progress"]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    if steps is not None:
        cmd += ["--max-steps", str(steps)]
    if resume:
        cmd.append("--resume")
    return cmd


def _run_one(profile: str, arm: Arm, seed: int, steps: int | None, cache: Path) -> Path:
    key, _ = run_key(profile, arm.overrides, seed, steps)
    run_dir = cache / key
    if (run_dir / "metrics.json").exists():
        return run_dir
    resume = (run_dir / "checkpoint").exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "train.log"
    with open(log, "a") as f:
        proc = subprocess.run(_cli(profile, arm.overrides, seed, steps, run_dir, resume),
                              stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"run {arm.name} seed {seed} failed (exit {proc.returncode}):\n{tail}")
    return run_dir


def export_run(run_dir: Path, dest: Path) -> None:
    """Copy what readers compare (metrics, per-step log, gzipped per-prompt records)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.json", "steps.jsonl", "config.json"):
        shutil.copyfile(run_dir / name, dest / name)
    # mtime=0 keeps the gzip bytes identical for identical records (stable in git and DVC).
    with open(run_dir / "prompts.jsonl", "rb") as src, open(dest / "prompts.jsonl.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as dst:
        shutil.copyfileobj(src, dst)


def run_grid(
    profile: str,
    arms: list[Arm],
    seeds: list[int],
    out_dir: str | Path,
    *,
    steps: int | None = None,
    workers: int = 2,
    cache: str | Path = DEFAULT_CACHE,
) -> pd.DataFrame:
    """Train every (arm, seed), export each to OUT/<arm>/s<seed>/, return one row per run."""
    cache, out_dir = Path(cache), Path(out_dir)
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique: {names}")
    for arm in arms:  # validate every configuration before any compute
        run_key(profile, arm.overrides, seeds[0], steps)
    jobs = [(a, s) for s in seeds for a in arms]
    rows = []
    with cf.ThreadPoolExecutor(max_workers=workers) as pool, tqdm(total=len(jobs), desc="runs") as bar:
        futures = {pool.submit(_run_one, profile, a, s, steps, cache): (a, s) for a, s in jobs}
        for fut in cf.as_completed(futures):
            arm, seed = futures[fut]
            run_dir = fut.result()
            dest = out_dir / _slug(arm.name) / f"s{seed}"
            export_run(run_dir, dest)
            rows.append({"arm": arm.name, "seed": seed, "dir": str(dest)})
            bar.update(1)
    order = {n: i for i, n in enumerate(names)}
    return pd.DataFrame(rows).sort_values(["arm", "seed"], key=lambda c: c.map(order) if c.name == "arm" else c).reset_index(drop=True)


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name).strip("_")
