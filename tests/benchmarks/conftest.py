"""Shared by the benchmark tests: benchmarks/bench_processes.py loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH_PROCESSES = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_processes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_processes", BENCH_PROCESSES)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
