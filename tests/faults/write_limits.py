"""Real write limits for the write-fault tests (tests/faults/test_write_faults*.py).

A fault here is the kernel's, not a mock: ``RLIMIT_FSIZE`` set in the child before it starts (no
privilege needed; a write past it fails with EFBIG once SIGXFSZ is ignored, which the CLI does)
or a small tmpfs (ENOSPC, or EROFS remounted read-only; root only, skipped elsewhere).
The children run with their working folder outside the repository, so dvclive opens no DVC
repository index (under /var/tmp/dvc) that a small limit would hit first.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faults.cli_helpers import ROOT


def _fsize(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def run_cli_limited(*args: str, limit: int | None, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m replication ARGS`` with every file it writes capped at ``limit`` bytes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1"}
    return subprocess.run([sys.executable, "-m", "replication", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout, preexec_fn=None if limit is None else _fsize(limit))


def run_python(code: str, *, cwd: Path, limit: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """A Python snippet in a child under a file-size ``limit``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout, preexec_fn=None if limit is None else _fsize(limit))


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str):
    """A tmpfs of ``size`` mounted on ``folder`` (skips the test where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {got.stderr.strip() or got.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders a failed write must not leave behind."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob(".*")
                  if ".tmp" in p.name or ".files-" in p.name or ".old" in p.name)


def rows(path: Path) -> int:
    data = Path(path).read_bytes()
    assert data.endswith(b"\n"), f"{path} ends in a partial line"
    return data.count(b"\n")
