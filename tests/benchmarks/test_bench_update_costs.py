"""benchmarks/bench_update_costs.py runs end to end on the tiny model (2 gloo ranks) and prints
every cost it names, the replicated-against-sharded optimizer step included."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_cost_is_timed(base_model_dir):
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_update_costs.py"),
                        "--model", base_model_dir, "--repeats", "1"],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    timed = dict(re.findall(r"^\s*(.+\(s\))\s+([0-9.]+)$", p.stdout, flags=re.M))
    for row in ("gradient all-reduce, 2 ranks (s)", "AdamW step (loop), all parameters (s)",
                "AdamW step (loop), all parameters, 2 ranks at once (s)",
                "ZeRO-1 step (loop on its share + broadcast), 2 ranks at once (s)",
                "FSDP AdamW step (fused), steady, 2 ranks at once (s)"):
        assert row in timed, f"{row!r} not printed:\n{p.stdout}"
        assert float(timed[row]) > 0
