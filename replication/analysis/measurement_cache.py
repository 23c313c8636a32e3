"""What a paper notebook calls: one gradient-variance measurement per base config, cached, copied
to the notebook's output folder."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from replication.analysis.checkpoint_measurement import run_grad_variance
from replication.analysis.gradvar_config import GradVarConfig
from replication.config import to_dict


def baseline_overrides(section: str, baseline: str, params_file: str | Path = "params.yaml",
                       overrides: dict | None = None) -> dict:
    """The config overrides of a paper's baseline arm: params.yaml's ``base`` + the arm's keys +
    the notebook's ``overrides`` (what the measured uniform run must share with the paper's arms)."""
    from replication.orchestration.grid import load_section

    sec = load_section(section, params_file)
    if baseline not in (sec.get("arms") or {}):
        raise ValueError(f"{section}: no arm {baseline!r} in {params_file}; arms: {sorted(sec.get('arms') or {})}")
    return {**(sec.get("base") or {}), **sec["arms"][baseline], **dict(overrides or {})}


def measure(profile: str, overrides: dict | None, out_dir: str | Path, cache_root: str | Path | None = None,
            log: Callable[[str], None] = print, **settings) -> pd.DataFrame:
    """What a paper notebook calls: ``run_grad_variance`` for ``profile`` + ``overrides`` (the
    paper's base keys), cached under ``cache_root/<key>`` where the key hashes the resolved
    training config, the measurement settings, the base model's files and this module's source —
    so the papers that share a base (DynaMO and GDRO) measure once. Copies the CSV/JSON to
    ``out_dir`` and returns the frame. ``settings``: GradVarConfig fields (steps, draws, ...);
    steps None = (0, a third of the profile's steps, all of them). ``cache_root`` None =
    $REPLICATION_RUN_CACHE/gradvar (the run cache's root, default .cache/runs)."""
    import hashlib
    import os

    from replication.config import load_profile

    cfg = load_profile(profile, dict(overrides or {}))
    if settings.get("steps") is None:
        settings["steps"] = tuple(dict.fromkeys((0, max(1, cfg.steps // 3), cfg.steps)))
    if cache_root is None:
        cache_root = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs")) / "gradvar"
    gv = GradVarConfig(**settings)
    h = hashlib.sha256()
    h.update(json.dumps({"cfg": to_dict(cfg), "gv": dataclasses.asdict(gv)}, sort_keys=True, default=str).encode())
    model_dir = Path(cfg.model.path)
    if model_dir.is_dir():
        for f in sorted(model_dir.iterdir()):
            if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".model", ".txt"):
                h.update(f.name.encode())
                h.update(f.read_bytes())
    h.update(Path(__file__).read_bytes())
    cache = Path(cache_root) / h.hexdigest()[:16]
    out_dir = Path(out_dir)
    if not (cache / "gradient_variance.csv").exists():
        run_grad_variance(cfg, cache / "run", cache, gv, log=log)
        shutil.rmtree(cache / "run", ignore_errors=True)  # checkpoints are not needed once measured
    else:
        log(f"grad-variance: cached {cache}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("gradient_variance.csv", "gradient_variance.json"):
        shutil.copy2(cache / name, out_dir / name)
    return pd.read_csv(out_dir / "gradient_variance.csv")
