"""scripts/gp_synthetic_check.py: the synthetic check behind docs/fidelity/vip.md #5/#6 runs, writes
its rows with the arguments and the command, and reproduces its own numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--prompts", "300", "--clusters", "10", "--dim", "16", "--batch", "32", "--steps", "8", "--burn-in", "2"]


def _run(out: Path) -> dict:
    r = subprocess.run([sys.executable, "scripts/gp_synthetic_check.py", *SMALL, "--out", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def test_synthetic_check_writes_its_grid_and_reproduces(tmp_path):
    study = _run(tmp_path / "a.json")
    assert study["args"]["prompts"] == 300 and "--prompts 300" in study["command"]
    mae = {r["setting"]: r["mae"] for r in study["rows"]}
    grid = [r for r in study["rows"] if r["predictor"] == "gp" and set(r["options"]) == {"noise", "clip_eps"}]
    assert len(grid) == 6 * 5 and {"moving-average", "ridge"} <= set(mae)
    assert all(0 <= r["mae"] <= 1 for r in study["rows"])
    # the code's corner (no observation noise, ε = 1e-6) interpolates ±13.8 logits: worse than smoothing
    assert mae["σ_n² = 0, ε = 1e-06"] > mae["σ_n² = 1, ε = 0.01"]
    assert study["code"] == {"noise": 0.0, "clip_eps": 1e-6}  # which cell is the code's, for the doc's block
    again = _run(tmp_path / "b.json")  # same arguments, same numbers (the timings aside)

    def numbers(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert numbers(again["rows"]) == numbers(study["rows"])
