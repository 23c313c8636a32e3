"""Each paper profile rehearsed end to end on 2 CPU cores (issue 36, docs/rehearsal.md):
`dvc exp run -S scale=rehearsal <paper>` in a clean clone of this repository, as a user types it,
through the base stage (SmolLM2 converted from its PyPI package), the encoder stage, the paper's
notebook under papermill, the grid and the launch layer (2 processes per run: torchrun, gloo).

A rehearsal that "passes" while exercising nothing is the failure this guards against, so each
test fails unless, in the trial's outputs (workspace/rehearsal/<paper>/):
- every run trained with 2 processes on the math task with the math-verify reward;
- rewards are mixed: at every step some prompt's group has successes and failures (a non-zero
  advantage);
- an allocating arm's counts differ from uniform on some step; DynaMO's modulation moved some
  advantage; Prompt-GDRO bins and weights every visit (its weights' movement is not asserted:
  under the paper's loss its signal is zero at ratio 1, docs/fidelity/gdro.md #11);
- evaluation scored at least one problem of every evaluation set, with the paper's metrics
  (VIP: Maj@32 and the bootstrapped best@32);
- the notebook wrote its tables (the paper-vs-ours one included) and summary;
- a finished run's cache entry holds no optimizer state.
It prints the minutes and megabytes each paper took (the closing figures of docs/rehearsal.md),
then removes the paper's run-cache entries (kept when a check fails).

Marker `rehearsal`: deselected from the default run (tests/conftest.py); `.ci/run` runs
`pytest -m rehearsal tests/rehearsal` as its own step after the parallel suite.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.rehearsal

LIMIT_S = int(os.environ.get("REPLICATION_REHEARSAL_LIMIT_S", "1200"))
"""A paper's rehearsal past 20 minutes fails (the target is 10 on 2 idle cores; the variable
raises the limit on a machine shared with other work)."""

@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A clean clone of the committed repository (what CI checks out), run with this venv."""
    where = tmp_path_factory.mktemp("rehearsal") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    return where


def _env(clone: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(clone), "DVC_NO_ANALYTICS": "1", "HF_HUB_OFFLINE": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _records(run: Path) -> list[dict]:
    with gzip.open(run / "prompts.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def _steps(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines() if line.strip()]


def _mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2 ** 20


@pytest.mark.parametrize("paper", ["vip", "dynamo", "gdro"])
def test_a_paper_rehearses_end_to_end(clone, paper):
    t0 = time.perf_counter()
    # its own process group: past the limit the whole tree goes (dvc, the stage, papermill's
    # kernel, the trainers), not dvc alone
    proc = subprocess.Popen([sys.executable, "-m", "dvc", "exp", "run", "-S", "scale=rehearsal", paper],
                            cwd=clone, env=_env(clone), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"rehearsal {paper} ran past {LIMIT_S} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    minutes = (time.perf_counter() - t0) / 60
    assert proc.returncode == 0, (stdout[-4000:], stderr[-4000:])
    out = clone / "workspace" / "rehearsal" / paper
    runs = sorted(p for p in (out / "runs").glob("*/s*") if p.is_dir())
    assert runs and len(runs) <= 4, runs
    arms = {run.parent.name for run in runs}
    allocating: set[str] = set()
    for run in runs:
        arm, config, metrics = run.parent.name, json.loads((run / "config.json").read_text()), \
            json.loads((run / "metrics.json").read_text())
        assert config["profile"] == f"rehearsal-{paper}" and config["task"]["kind"] == "math"
        assert config["task"]["options"]["reward"]  # the math-verify reward's settings (MathVerifier)
        assert metrics["provenance"]["world_size"] == 2, (arm, metrics["provenance"])
        records = _records(run)
        by_step = defaultdict(list)
        for rec in records:
            by_step[rec["step"]].append(rec)
        assert sorted(by_step) == list(range(config["steps"]))
        for step, recs in by_step.items():  # mixed rewards: a non-zero advantage at every step
            assert any(0 < rec["successes"] < rec["n"] for rec in recs), (arm, step, recs)
        if config["allocator"]["name"] != "uniform":  # VIP's GP, DynaMO's, Rollout-GDRO's
            allocating.add(arm)
            assert any(len({rec["n"] for rec in recs}) > 1 for recs in by_step.values()), (arm, by_step)
        if config["rl"].get("modulation") == "dynamo":
            steps = _steps(run)
            assert any(s.get("beta_comp_mean", 1.0) != 1.0 or s.get("beta_stab_mean", 1.0) != 1.0
                       for s in steps), steps
        if config["rl"].get("prompt_weights") == "gdro":
            # engaged: every visit is binned (in more than one bin) and weighted, and the EXP3P
            # weights' mass per bin is logged at every step. That the weights MOVE is not asserted:
            # under the paper's loss the adversary's signal is zero at ratio 1 (one PPO pass, the
            # paper's learning rate), so they differ only at rounding level here, as at the
            # default scale (docs/fidelity/gdro.md #11; docs/rehearsal.md)
            assert all(rec["bin"] is not None and rec["weight"] > 0 for rec in records)
            assert len({rec["bin"] for rec in records}) > 1, records
            for s in _steps(run):
                assert abs(sum(s["weight_mass_per_bin"]) - 1.0) < 1e-6, s
        for when in ("eval_before", "eval_after"):
            for name in config["task"]["options"]["eval"]:
                row = metrics[when][name]
                assert row["n_prompts"] >= 1, (arm, when, name, row)
                k = config["eval"]["k"]
                assert f"mean@{k}" in row and f"pass@{k}" in row
                if paper == "vip":
                    assert f"best@{k}" in row and f"maj@{k}" in row  # VIP's Pass@32 and Maj@32
        key = json.loads((run / "key.json").read_text())["key"]
        entry = clone / ".cache" / "runs" / key
        if entry.exists():  # the run cache keeps the trained folder: no optimizer state left in it
            from replication.train.checkpoint import load_checkpoint

            assert load_checkpoint(entry)["components"]["optimizer"] is None, entry
    assert allocating, f"no arm of {sorted(arms)} allocates"  # every rehearsal runs its paper's allocator
    tables = sorted(p.name for p in (out / "tables").glob("*.csv"))
    assert any("paper" in t for t in tables), tables
    summary = json.loads((out / "summary.json").read_text())
    assert summary["profile"] == f"rehearsal-{paper}" and summary["seeds"] == [0]
    cache = sum(_mb(clone / ".cache" / "runs" / json.loads((run / "key.json").read_text())["key"])
                for run in runs if (clone / ".cache" / "runs").exists())
    trained = sum(json.loads((run / "metrics.json").read_text())["wall_seconds"] for run in runs) / 60
    print(f"\nrehearsal {paper}: {minutes:.1f} min ({trained:.1f} inside the runs' training loops), "
          f"{len(runs)} runs ({', '.join(sorted(arms))}), outputs {_mb(out):.0f} MB, run cache {cache:.0f} MB")
    # checked: the runs' cache entries go (about 1 GB each, the model and the last checkpoint), so
    # the next paper and CI's vLLM step do not meet a full disk; a failed check above keeps them
    for run in runs:
        shutil.rmtree(clone / ".cache" / "runs" / json.loads((run / "key.json").read_text())["key"],
                      ignore_errors=True)
