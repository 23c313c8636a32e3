"""Helpers shared by the fault-injection tests (tests/faults/): the trainer's command line, run
in-process or as a subprocess, and the one-line error it must print."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def train_args(small: dict, out: Path, *extra: str, overrides: dict | None = None) -> list[str]:
    o = {**small, **(overrides or {})}
    args = ["train", "--profile", "default", "--out", str(out), "--no-progress", "--seed", "0"]
    for k, v in o.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "replication", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def one_line_error(err: str, *needles: str) -> None:
    """One ``error:`` line naming the needles, no traceback (progress bars of a model load that
    happened before the fault may precede it)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
