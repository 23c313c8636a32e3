"""What a paper notebook calls: one gradient-variance measurement per base config, cached, copied
to the notebook's output folder — each of them one writer, complete or absent, verified on read.

The cache entry ``cache_root/<key>`` is keyed by ``measurement_key``: the resolved training
config, the measurement settings, the base model's files, the training code digest the run cache
uses (``run_cache.code_digest``: editing an allocator changes the key) and the digest of this
measurement's own code (replication/analysis). Both folders are written by ``run_grad_variance``
or ``staged_dir`` with a manifest (kind ``gradient-variance``, the key in ``extra``) and read
only once it verifies:

- a damaged (or manifest-less) cache entry is measured again, with a warning naming it;
- a committed measurement of the same key (the stage's destination, or results/<paper>/ for a
  trial) is copied into the cache instead of measured again: the same key on a clean clone gives
  the committed numbers, not a re-measurement whose rows may differ in the last bits on another
  CPU (docs/reproducibility.md);
- the output folder (committed under results/<paper>/gradient_variance) is used as it is when its
  manifest carries the same key; if it then does not verify, the call stops with an error naming
  it, since committed evidence is never silently replaced. An output folder of another key (or
  none) is replaced from the cache.

A second measurement of the same key while one runs gets one line (``LockHeld``) naming the
cache folder and the holder's pid, command and start time, before any compute.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from replication.analysis.checkpoint_measurement import run_grad_variance
from replication.analysis.gradvar_config import KIND, GradVarConfig
from replication.code_digest import PACKAGE, code_digest
from replication.config import TrainConfig, to_dict
from replication.store import MANIFEST, DamagedArtifact, staged_dir, verify_manifest, writer_lock
from replication.store.manifest import read_manifest
from replication.store.run_key import DIGESTS

FILES = ("gradient_variance.csv", "gradient_variance.json")
"""What a measurement folder holds (besides its manifest)."""


def measurement_key(cfg: TrainConfig, gv: GradVarConfig, package: str | Path | None = None) -> str:
    """16 hex over what a measurement depends on: the resolved config, the settings, the base
    model's files, the training code (the run cache's ``code_digest``) and replication/analysis.
    ``package``: the package folder whose code is hashed (default: this one; tests pass a copy)."""
    from replication.orchestration.run_cache import code_digest as training_code

    pkg = Path(package) if package is not None else PACKAGE
    h = hashlib.sha256()
    h.update(json.dumps({"cfg": to_dict(cfg), "gv": dataclasses.asdict(gv), "training_code": training_code(pkg),
                         "measurement_code": code_digest(pkg, include=("analysis",))},
                        sort_keys=True, default=str).encode())
    # the model's content as the run key sees it (store.run_key: reports and manifests beside the
    # weights are not the model)
    h.update(DIGESTS(cfg.model.path).encode())
    return h.hexdigest()[:16]


def baseline_overrides(section: str, baseline: str, params_file: str | Path | None = None,
                       overrides: dict | None = None) -> dict:
    """The config overrides of a paper's baseline arm: params.yaml's ``base`` + the arm's keys +
    the notebook's ``overrides`` (what the measured uniform run must share with the paper's arms)."""
    from replication.orchestration.grid import load_section

    sec = load_section(section, params_file)
    if baseline not in (sec.get("arms") or {}):
        raise ValueError(f"{section}: no arm {baseline!r} in {params_file or 'params.yaml'}; arms: {sorted(sec.get('arms') or {})}")
    return {**(sec.get("base") or {}), **sec["arms"][baseline], **dict(overrides or {})}


def _current_output(out_dir: Path, key: str, log: Callable[[str], None]) -> bool:
    """True when ``out_dir`` holds this key's measurement and it verifies; DamagedArtifact naming
    it when its manifest is unreadable, or names this key but does not verify (committed evidence
    is not replaced silently); False when it holds another key's measurement, or one written
    without a manifest (before issue 18), or none."""
    if not (out_dir / MANIFEST).exists():
        if out_dir.exists():
            log(f"grad-variance: {out_dir} has no {MANIFEST} (written before manifests); replaced by key {key}")
        return False
    try:
        found = (read_manifest(out_dir).get("extra") or {}).get("key")
        if found != key:
            log(f"grad-variance: {out_dir} holds the measurement of key {found}; replaced by key {key}")
            return False
        verify_manifest(out_dir, kind=KIND)
    except DamagedArtifact as e:
        raise DamagedArtifact(f"{e}; {out_dir} is a damaged gradient-variance measurement: restore it "
                              f"(git checkout {out_dir}) or remove it to measure again") from None
    return True


def _usable_cache(cache: Path) -> bool:
    """True when the cache entry verifies; a damaged entry is reported (a warning naming it, as
    the run cache does) and measured again."""
    if not cache.exists():
        return False
    try:
        verify_manifest(cache, kind=KIND)
    except DamagedArtifact as e:
        warnings.warn(f"gradient-variance cache entry {cache} is damaged ({e}); it will be measured again",
                      stacklevel=3)
        return False
    return True


def _committed_copies(out_dir: Path) -> list[Path]:
    """Where a committed measurement of ``out_dir`` may already be: under a DVC stage (which has
    the notebook write into a temporary folder) the same place in the stage's destination, and
    for any paper folder the published ``results/<paper>/<name>``."""
    from replication.orchestration.workspace import LOCK_ENV, PRODUCTS_ENV, RESULTS

    found = []
    products, dest = os.environ.get(PRODUCTS_ENV), os.environ.get(LOCK_ENV)
    if products and dest:
        try:
            found.append(Path(dest) / out_dir.resolve().relative_to(Path(products).resolve()))
        except ValueError:
            pass
    found.append(Path(RESULTS) / out_dir.parent.name / out_dir.name)
    return [p for p in dict.fromkeys(found) if p.resolve() != out_dir.resolve()]


def _reuse_committed(out_dir: Path, key: str, cache: Path, log: Callable[[str], None]) -> bool:
    """Copy a committed measurement of this key into the cache entry instead of measuring again;
    True when one was found and verified (a damaged one is skipped with a warning)."""
    for src in _committed_copies(out_dir):
        if not (src / MANIFEST).exists():
            continue
        try:
            manifest = read_manifest(src)
            if (manifest.get("extra") or {}).get("key") != key:
                continue
            verify_manifest(src, kind=KIND)
        except DamagedArtifact as e:
            warnings.warn(f"committed measurement {src} not reused: {e}", stacklevel=3)
            continue
        with staged_dir(cache, kind=KIND, extra=manifest.get("extra")) as tmp:
            for name in FILES:
                shutil.copy2(src / name, tmp / name)
        log(f"grad-variance: reusing the committed measurement {src} (key {key}); nothing measured")
        return True
    return False


def measure(profile: str, overrides: dict | None, out_dir: str | Path, cache_root: str | Path | None = None,
            log: Callable[[str], None] = print, **settings) -> pd.DataFrame:
    """What a paper notebook calls: ``run_grad_variance`` for ``profile`` + ``overrides`` (the
    paper's base keys), cached under ``cache_root/<measurement_key>`` — so the papers that share
    a base (DynaMO and GDRO) measure once. Copies the CSV/JSON with their manifest to
    ``out_dir`` and returns the frame. ``settings``: GradVarConfig fields (steps, draws, ...);
    steps None = (0, a third of the profile's steps, all of them). ``cache_root`` None =
    $REPLICATION_RUN_CACHE/gradvar (the run cache's root, default .cache/runs). One writer,
    complete or absent, verified on read: the module docstring."""
    from replication.config import load_profile

    cfg = load_profile(profile, dict(overrides or {}))
    if settings.get("steps") is None:
        settings["steps"] = tuple(dict.fromkeys((0, max(1, cfg.steps // 3), cfg.steps)))
    if cache_root is None:
        cache_root = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs")) / "gradvar"
    gv = GradVarConfig(**settings)
    key = measurement_key(cfg, gv)
    cache, out_dir = Path(cache_root) / key, Path(out_dir)
    with writer_lock(out_dir, "a gradient-variance measurement"):
        if _current_output(out_dir, key, log):
            log(f"grad-variance: {out_dir} is current (key {key})")
            return pd.read_csv(out_dir / FILES[0])
        with writer_lock(cache, "a gradient-variance measurement"):
            if _usable_cache(cache):
                log(f"grad-variance: cached {cache}")
            elif _reuse_committed(out_dir, key, cache, log):
                pass
            else:
                # the uniform run beside the entry (a dot name: never part of it); a killed
                # measurement resumes from its checkpoints, a finished one removes it
                run_dir = cache.parent / f".{key}.uniform-run"
                run_grad_variance(cfg, run_dir, cache, gv, log=log, extra={"key": key, "profile": profile})
                shutil.rmtree(run_dir, ignore_errors=True)
            extra = read_manifest(cache).get("extra")
            with staged_dir(out_dir, kind=KIND, extra=extra) as tmp:
                for name in FILES:
                    shutil.copy2(cache / name, tmp / name)
    return pd.read_csv(out_dir / FILES[0])
