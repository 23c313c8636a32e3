"""benchmarks/bench_host_memory.py: the allocate-fill-free cycle counts faults and seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_host_memory.py"


def test_glibc_setting_removes_the_faults():
    env = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295", "PATH": ""}
    plain = subprocess.run([sys.executable, str(SCRIPT), "--megabytes", "64", "--cycles", "3"],
                           capture_output=True, text=True, timeout=120, check=True, env={"PATH": ""}).stdout
    tuned = subprocess.run([sys.executable, str(SCRIPT), "--megabytes", "64", "--cycles", "3"],
                           capture_output=True, text=True, timeout=120, check=True, env=env).stdout

    def faults(out: str) -> int:
        return int(next(x for x in out.splitlines() if "minor faults" in x).split(",")[-1].split()[0])

    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not (thp.exists() and "[always]" in thp.read_text()):  # else the kernel maps 2 MB pages anyway
        assert faults(plain) >= 3 * 16_000  # 3 × 64 MB of 4 KB pages, faulted in again each cycle
    assert faults(tuned) < 1_000  # the freed memory is reused
