"""What the SLURM tests share (tests/launch/test_local_slurm.py, test_slurm_*.py): whether SLURM is
there (skipped when not, a failure when REPLICATION_REQUIRE_SLURM=1), sacct rows and a bounded wait."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

REQUIRE_ENV = "REPLICATION_REQUIRE_SLURM"
START_HINT = "start it with `bash scripts/local_slurm.sh start` (docs/slurm.md)"


def slurm_problem(submitit: bool = True) -> str | None:
    """Why SLURM cannot be used here (not installed, not running, submitit missing), or None."""
    for tool in ("sinfo", "sbatch", "sacct", "scancel", "squeue", "scontrol"):
        if shutil.which(tool) is None:
            return f"SLURM is not installed (`{tool}` not on PATH)"
    for cmd in (["sinfo", "-h", "-o", "%T"], ["sacct", "-n", "-X", "-j", "1"]):
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            return f"SLURM is not running (`{' '.join(cmd)}` timed out)"
        except (subprocess.CalledProcessError, OSError) as e:
            last = (getattr(e, "stderr", None) or getattr(e, "stdout", None) or str(e)).strip().splitlines()[-1:]
            return f"SLURM is not running (`{' '.join(cmd)}` failed: {(last or ['no output'])[0]})"
    if submitit:
        try:
            import submitit as _  # noqa: F401
        except ImportError:
            return "submitit is not installed (pip install -e '.[slurm]')"
    return None


def need_slurm(submitit: bool = True) -> None:
    """Skip the calling test (or fixture) when SLURM cannot be used; with
    REPLICATION_REQUIRE_SLURM=1 (CI, after `bash scripts/local_slurm.sh start`) fail instead."""
    problem = slurm_problem(submitit)
    if problem is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{problem}, and {REQUIRE_ENV}=1 makes that a failure; {START_HINT}", pytrace=False)
    pytest.skip(f"{problem}; {START_HINT}")


def sacct(*args: str) -> list[list[str]]:
    """``sacct -n -P -X ARGS`` as rows of fields."""
    out = subprocess.run(["sacct", "-n", "-P", "-X", *args], capture_output=True, text=True, check=True,
                         timeout=30).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def wait_for(predicate, timeout: float, what: str, step: float = 0.5):
    """``predicate()``'s first truthy value, polled every ``step`` s; AssertionError after ``timeout``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} not within {timeout:.0f} s")
