"""Process and run helpers shared by the fault-injection tests (tests/faults/, test_faults_*.py)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def wait_until(cond: Callable[[], bool], timeout: float, poll: float = 0.05) -> bool:
    """Poll ``cond`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(poll)
    return False


def run_metrics(out: Path) -> dict:
    """A run folder's metrics.json without its wall time (equal for equal runs)."""
    m = json.loads((Path(out) / "metrics.json").read_text())
    m.pop("wall_seconds")
    return m
