"""What the SLURM tests share (tests/launch/test_local_slurm.py, test_slurm_backend.py): sacct rows
and a bounded wait."""

from __future__ import annotations

import subprocess
import time


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
