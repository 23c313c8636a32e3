"""How a run ran: the facts that config.json does not hold, recorded beside its results.

``run_provenance(cfg, world, engine)`` is written into every training run's metrics.json (key
``provenance``; config.json stays as it is: it is part of the resume check and of the run key)
and into the gradient-variance outputs. A 1-process and a 2-process run, or an FSDP and a
replicated one, are told apart from it alone. Every field is recorded when known and None when
not (a package that is not installed, git missing or the package not in a git checkout):
gathering provenance never fails a run.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
GIT_TIMEOUT_S = 5.0


def package_version(name: str) -> str | None:
    """The installed distribution's version, without importing it (vLLM takes seconds)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        p = subprocess.run(["git", *args], cwd=PACKAGE_DIR, capture_output=True, text=True,
                           timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None
    return p.stdout if p.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """{'commit': HEAD or None, 'dirty': uncommitted changes (True/False) or None}, read from
    the checkout that holds this package."""
    head = _git("rev-parse", "HEAD")
    if head is None:
        return {"commit": None, "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head.strip() or None, "dirty": None if status is None else bool(status.strip())}


def _device(cfg: Any, engine: Any) -> str:
    dev = getattr(engine, "device", None)
    if dev is not None and not callable(dev):
        return str(dev)
    import torch

    d = cfg.model.device
    return ("cuda" if torch.cuda.is_available() else "cpu") if d == "auto" else str(d)


def run_provenance(cfg: Any, world: Any, engine: Any) -> dict[str, Any]:
    """World size, sharding, engine, device, dtype, threads, package versions, code digest and
    git commit (with a dirty flag) of the run that ``cfg``, ``world`` and ``engine`` make up.

    ``world``: a ``replication.train.distributed.World`` (None = one process); ``engine``: the
    run's rollout engine (None when there is none, e.g. a measurement)."""
    import torch

    from replication.code_digest import training_code_digest as code_digest  # never report/ (pandas)

    size = int(getattr(world, "size", 1) or 1)
    sharding = getattr(world, "sharding", None) or "none"
    gpu = None
    if torch.cuda.is_available():
        try:
            gpu = torch.cuda.get_device_name()
        except RuntimeError:
            gpu = None
    return {
        "world_size": size,
        "sharding": sharding,
        "backend": getattr(world, "backend", None) if size > 1 else None,
        "engine": getattr(getattr(cfg, "rollout", None), "engine", None),
        "engine_class": None if engine is None else type(engine).__name__,
        "device": _device(cfg, engine),
        "gpu": gpu,
        "dtype": cfg.model.dtype,
        "threads": torch.get_num_threads(),
        "versions": {name: package_version(name) for name in ("torch", "transformers", "vllm")},
        "code_digest": code_digest(),
        **git_state(),
    }
