"""Fault injection (issue 11), grids: a signal stops a grid promptly and starts no queued run; a
real grid killed at a random moment leaves no trainer behind and a re-run resumes it, every
cache entry and export then complete (issue 18: manifests verify; tests/evidence has the rest)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.store.run_evidence import verify_run
from replication.train import checkpoint as ck

from proc_helpers import alive, run_metrics, wait_until

ROOT = Path(__file__).resolve().parents[1]


# ============================================================================ 6. grids

FAKE_GRID = """
import json, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from replication.orchestration import grid

log = Path(sys.argv[2])

def ensure_run(profile, overrides, seed, steps, cache, name="", guard=None, digests=None, **placement):
    guard.run([sys.executable, "-c", "import time; time.sleep(120)"])
    return Path(cache)

real_popen = subprocess.Popen
class Recording(real_popen):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        with open(log, "a") as f:
            f.write(json.dumps({"pid": self.pid}) + "\\n")
subprocess.Popen = Recording
grid.ensure_run = ensure_run
arms = [grid.Arm(n, {"allocator.name": "uniform"}) for n in ("A", "B", "C")]
grid.run_grid("smoke", arms, [0, 1], Path(sys.argv[3]), steps=2, workers=2, cache=Path(sys.argv[3]))
"""


def _records(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_grid_stops_promptly_on_signal(tmp_path, sig):
    """6 queued runs, 2 at a time: a signal stops the grid within seconds, the 2 running
    subprocesses are terminated and none of the 4 queued ones ever starts."""
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", FAKE_GRID, str(ROOT), str(log), str(tmp_path / "c")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: sum("pid" in r for r in _records(log)) >= 2, 120), proc.stderr
    time.sleep(0.5)
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=60)
    stopped_in = time.monotonic() - t0
    time.sleep(1.0)  # anything the pool would (wrongly) start next shows up here
    recs = _records(log)
    assert proc.returncode != 0
    pids = [r["pid"] for r in recs if "pid" in r]
    assert len(pids) == 2, recs  # queued runs never started
    assert wait_until(lambda: not any(alive(p) for p in pids), 15), "running runs were not terminated"
    assert stopped_in < 30


def _grid_driver(small: dict, cache: Path, out: Path) -> list[str]:
    code = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, sys.argv[1])
        from pathlib import Path
        from replication.orchestration import grid
        small = json.loads(sys.argv[2])
        arms = [grid.Arm("U", {**small, "allocator.name": "uniform"}),
                grid.Arm("D", {**small, "allocator.name": "dynamo"})]
        grid.run_grid("default", arms, [0, 1], Path(sys.argv[4]), steps=6, workers=2, cache=Path(sys.argv[3]))
    """)
    return [sys.executable, "-c", code, str(ROOT), json.dumps(small), str(cache), str(out)]


def _trainers_of(cache: Path) -> list[int]:
    """pids of training processes writing into ``cache`` (Linux /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"train" in cmd and any(str(cache).encode() in c for c in cmd) and alive(int(d.name)):
                pids.append(int(d.name))
    return pids


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_grid_killed_at_random_moment_then_rerun_resumes(small_overrides, tmp_path, how):
    """A real grid (2 arms x 2 seeds, 6 steps, checkpoints every 2) stopped at a random moment
    after the first checkpoint — SIGTERM, or kill -9 of the grid process — leaves no training
    process behind; running it again finishes every run, resuming the checkpointed ones, with the
    metrics of uninterrupted runs."""
    small = {**small_overrides, "steps": 6, "checkpoint_every": 2}
    cache, out = tmp_path / "cache", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_grid_driver(small, cache, out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    rng = random.Random(int(os.environ.get("FAULT_SEED", "5")) + (how == "SIGKILL"))
    assert wait_until(lambda: any(ck.checkpoint_path(d) for d in cache.glob("*")), 300)
    time.sleep(rng.uniform(0.0, 3.0))
    proc.send_signal(getattr(signal, how))
    proc.wait(timeout=60)
    assert wait_until(lambda: not _trainers_of(cache), 20), "training processes outlived the grid"
    checkpointed = {d.name for d in cache.glob("*") if ck.checkpoint_path(d) and not (d / "metrics.json").exists()}
    r = subprocess.run(_grid_driver(small, cache, out), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    done = sorted(cache.glob("*/metrics.json"))
    assert len(done) == 4
    # issue 18: every cache entry and every export is complete (its manifest verifies); the
    # trainers' output went beside the entries, and no writer lock is left held
    for d in done:
        verify_run(d.parent, kind="run")
        assert not (d.parent / "train.log").exists() and (cache / f"{d.parent.name}.log").exists()
    exports = sorted(out.glob("*/s*"))
    assert len(exports) == 4
    for d in exports:
        verify_run(d, kind="export")
    # a resumed run ends where an uninterrupted one does
    key = next(iter(checkpointed), None)
    if key is not None:
        cfg = json.loads((cache / key / "config.json").read_text())
        fresh = tmp_path / "fresh"
        over = {**small, "allocator.name": cfg["allocator"]["name"]}
        args = ["train", "--profile", "default", "--seed", str(cfg["seed"]), "--out", str(fresh),
                "--no-progress", "--max-steps", "6"]
        for k, v in over.items():
            args += ["--set", f"{k}={json.dumps(v)}"]
        assert main(args) == 0
        assert run_metrics(fresh)["eval_after"] == run_metrics(cache / key)["eval_after"]
        assert (fresh / "prompts.jsonl").read_text() == (cache / key / "prompts.jsonl").read_text()
