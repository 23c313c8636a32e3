"""scripts/gpu_check.sh, the parts a CPU machine can check: the one-line refusal without CUDA,
bad arguments, and the whole script in its ``--device cpu`` mode (launch-layer runs, the
2-process torchrun run, the HF trainer, bench_processes, the skipped vLLM check) down to its
final table."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _run(*args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_refuses_in_one_line(tmp_path):
    proc = _run("--out", str(tmp_path / "out"), timeout=300)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no CUDA device" in lines[0] and "--device cpu" in lines[0]
    assert proc.stdout == ""  # refused before any check ran
    assert not (tmp_path / "out").exists()


def test_bad_arguments_exit_2():
    assert _run("--bogus", timeout=300).returncode == 2
    assert _run("--device", "tpu", timeout=300).returncode == 2


def test_vllm_check_is_skipped_when_its_interpreter_cannot_import_vllm(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_PYTHON", str(tmp_path / "no-such-python"))
    table = gpu_check.Table()
    gpu_check.vllm_check("cpu", tmp_path, table)
    [(check, status, result)] = table.rows
    assert check == "vLLM engine in the loop vs standalone" and status == "skipped"
    assert "vllm not importable" in result
    assert not table.failed


def test_the_table_lines_up_and_fails_on_a_failed_row(gpu_check):
    table = gpu_check.Table()
    table.add("a", "ok", "1")
    table.add("a longer check", "skipped", "why")
    assert not table.failed
    text = table.render("title")
    lines = text.splitlines()
    assert lines[0] == "title" and lines[1].startswith("check") and len(lines) == 5
    assert lines[3].index("ok") == lines[4].index("skipped")
    table.add("b", "FAILED", "")
    assert table.failed


def test_cpu_mode_runs_every_check_and_prints_the_table(tmp_path):
    """The whole script on CPU; vllm is made unimportable (a package that raises on import, first
    on the path) so the vLLM check is skipped whichever venv runs the test."""
    fake = tmp_path / "fake"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("raise ImportError('made unimportable by the test')\n")
    out = tmp_path / "check"
    proc = _run("--device", "cpu", "--out", str(out),
                env={"PYTHONPATH": str(fake), "VLLM_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("gpu_check --device cpu (the script's own check)"))
    assert lines[head + 1].split() == ["check", "status", "result"]
    rows = {line.split("  ")[0].strip(): line for line in lines[head + 3:] if line.strip()}
    slots = [c for c in rows if c.startswith("launch: 1-process run on CPU slot")]
    assert 1 <= len(slots) <= 2
    expected = slots + ["launch: 2-process torchrun (gloo, 2 cores)", "trainer, HF engine (float32)",
                        "bench_processes --device cpu (1x1)", "vLLM engine in the loop vs standalone"]
    assert list(rows) == expected
    for check in expected[:-1]:
        assert "  ok  " in rows[check], rows[check]
    assert "rollouts/s" in rows["trainer, HF engine (float32)"]
    assert "world size 2" in rows["launch: 2-process torchrun (gloo, 2 cores)"]
    assert "1x1" in rows["bench_processes --device cpu (1x1)"] and "median step" in rows["bench_processes --device cpu (1x1)"]
    vllm_row = rows["vLLM engine in the loop vs standalone"]
    assert "  skipped  " in vllm_row and "vllm not importable" in vllm_row
    assert "gpu_check: vllm is not importable" in proc.stdout and "the vLLM check is skipped" in proc.stdout
    assert "step split (mean s)" in proc.stdout and "held-out pass@1 before" in proc.stdout
    assert (out / "hf" / "metrics.json").exists() and (out / "launch" / "torchrun2" / "metrics.json").exists()
