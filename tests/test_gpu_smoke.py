"""scripts/gpu_smoke.sh, the parts a CPU machine can check: the refusal without CUDA, and the
whole script (trainer, timing split, summary lines) in its ``--device cpu --steps 2`` mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable,
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_with_the_cpu_alternative():
    proc = _run("--steps", "1")
    assert proc.returncode == 1
    assert "no CUDA device" in proc.stderr and "--device cpu --steps 2" in proc.stderr


def test_bad_arguments_exit_2():
    assert _run("--bogus").returncode == 2


def test_cpu_mode_runs_the_trainer_and_prints_the_split(tmp_path):
    proc = _run("--device", "cpu", "--steps", "2", "--out", str(tmp_path / "smoke"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "gpu_smoke [hf] cpu float32: 2 steps," in out and "rollouts/s" in out
    split = next(line for line in out.splitlines() if "step split" in line)
    for part in ("generate", "old_logprob", "update", "sync", "allocator", "whole step"):
        assert part in split
    assert "held-out pass@1 before" in out and "peak RSS" in out
    assert (tmp_path / "smoke" / "hf" / "metrics.json").exists()
