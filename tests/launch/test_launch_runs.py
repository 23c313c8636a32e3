"""Real runs through the local backend (issue 35.2), on the smoke profile for 2 steps, 2 cores:

- a grid through the launcher gives the runs the grid always gave: each export holds the numbers
  of the same command run by hand (``python -m replication train ...``, as the grid started it
  before the launch layer), two at a time on the 2 cores;
- a re-run loads the finished runs and launches only the missing one;
- a 2-process run (torchrun on its own port, gloo) launched by the same backend is the
  1-process run within the multi-process tolerance (tests/dist_helpers.py), and its provenance
  says how it was placed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dist_helpers import _close, _env, _jsonl, _same_run
from replication.launch import LauncherConfig
from replication.launch import local as launch_local
from replication.orchestration import grid, run_cache

OVER = {"allocator.name": "uniform"}
STEPS = 2


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """A 1-arm × 2-seed grid through the default launcher, both runs at once on 2 cores."""
    root = tmp_path_factory.mktemp("launched")
    cache, out = root / "cache", root / "out"
    starts: list = []
    real = launch_local.start_process

    def recording(cmd, log, env):
        starts.append((cmd, env))
        return real(cmd, log, env)

    launch_local.start_process = recording
    try:
        frame = grid.run_grid("smoke", [grid.Arm("U", OVER)], [0, 1], out, steps=STEPS, cache=cache,
                              launcher=LauncherConfig(cpus=2))
    finally:
        launch_local.start_process = real
    return {"root": root, "cache": cache, "out": out, "frame": frame, "starts": starts}


def _results(folder: Path) -> dict:
    prompts = folder / "prompts.jsonl"
    if not prompts.exists():
        prompts_rows = [json.loads(x) for x in gzip.open(folder / "prompts.jsonl.gz", "rt").read().splitlines()]
    else:
        prompts_rows = _jsonl(prompts)
    metrics = json.loads((folder / "metrics.json").read_text())
    return {"metrics": metrics, "steps": _jsonl(folder / "steps.jsonl"), "prompts": prompts_rows}


@pytest.mark.slow
def test_a_grid_through_the_launcher_gives_the_runs_started_by_hand(launched, tmp_path):
    assert sorted(launched["frame"]["seed"]) == [0, 1]
    commands = [cmd for cmd, _ in launched["starts"]]
    assert len(commands) == 2 and all(cmd[1:4] == ["-m", "replication", "train"] for cmd in commands)
    assert all(env["REPLICATION_LAUNCH_BACKEND"] == "local" for _, env in launched["starts"])
    by_hand = tmp_path / "by-hand"
    cmd = run_cache.train_command("smoke", OVER, 0, STEPS, by_hand, resume=False)
    p = subprocess.run(cmd, env={k: v for k, v in _env().items() if k != "OMP_NUM_THREADS"},
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    export = _results(launched["out"] / "U" / "s0")
    mine = _results(by_hand)
    _close(export, mine, "export vs by hand")  # timings and provenance aside, the same numbers
    for section in ("eval_before", "eval_after"):
        assert export["metrics"][section] == mine["metrics"][section]  # exactly: the same process
    prov = export["metrics"]["provenance"]["launch"]
    assert (prov["backend"], prov["job"], prov["world_size"]) == ("local", None, 1)
    assert json.loads((by_hand / "metrics.json").read_text())["provenance"]["launch"]["backend"] is None


@pytest.mark.slow
def test_a_rerun_loads_finished_runs_and_launches_only_the_missing_one(launched, monkeypatch, capsys):
    key1 = run_cache.run_key("smoke", OVER, 1, STEPS)[0]
    shutil.rmtree(launched["out"] / "U" / "s1")
    shutil.rmtree(launched["cache"] / key1)
    starts: list = []
    real = launch_local.start_process
    monkeypatch.setattr(launch_local, "start_process", lambda cmd, log, env: starts.append(cmd) or real(cmd, log, env))
    capsys.readouterr()
    grid.run_grid("smoke", [grid.Arm("U", OVER)], [0, 1], launched["out"], steps=STEPS, cache=launched["cache"],
                  launcher={"backend": "local", "cpus": 2})
    assert "1 already exported here, 0 copied from the published results, 0 from the run cache, 1 to train: U s1" \
        in capsys.readouterr().out
    assert len(starts) == 1 and starts[0][starts[0].index("--seed") + 1] == "1"
    assert run_cache.exported_key(launched["out"] / "U" / "s1") == key1


@pytest.mark.slow
def test_two_processes_through_the_launcher_equal_one(launched):
    """shape processes=2: torchrun --nproc-per-node 2 on its own rendezvous port, gloo on CPU;
    another key (the shape), the same numbers as the 1-process run of the grid above."""
    one = run_cache.cached_run(run_cache.run_key("smoke", OVER, 0, STEPS)[0], launched["cache"])
    assert one is not None
    two = run_cache.ensure_run("smoke", OVER, 0, STEPS, launched["cache"], "U",
                               launcher=launch_local.LocalBackend(LauncherConfig(cpus=2)), shape={"processes": 2})
    assert two != one and json.loads((two / "key.json").read_text())["inputs"]["shape"]["processes"] == 2
    _same_run(one, two)
    prov = json.loads((two / "metrics.json").read_text())["provenance"]
    assert prov["world_size"] == 2 and prov["backend"] == "gloo"
    assert {k: prov["launch"][k] for k in ("backend", "job", "world_size")} == {"backend": "local", "job": None,
                                                                                 "world_size": 2}
    log = (launched["cache"] / f"{two.name}.log").read_text()
    assert "Traceback" not in log
