"""A paper's grid through the ``slurm`` backend on the one-node SLURM of scripts/local_slurm.sh
(issue 35), on the smoke profile for 1 step, each run asking for one of the cluster's fake GPUs:

- a 2 arms × 2 seeds grid through ``slurm`` gives the numbers of the same grid through ``local``,
  each with its own run cache; sacct shows its 4 runs as ONE array; the jobs that ran at the same
  time were given different GPUs (``CUDA_VISIBLE_DEVICES``, recorded in each run's provenance);
- a job killed with ``scancel`` is reported by its id within a minute, the grid raises, and the
  next run submits only that one (its record said CANCELLED);
- ``detach``: the grid submits (held, so that the jobs surely wait) and raises ``GridDetached``;
  ``status`` shows the runs in flight; a second detached run submits nothing; once released, a
  plain re-run collects them into the cache and the exports without submitting anything (sacct:
  still the one array).

Skipped when SLURM is not running, unless REPLICATION_REQUIRE_SLURM=1 makes that a failure
(tests/slurm_helpers.need_slurm). About 2.5 minutes on 2 busy cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from slurm_helpers import need_slurm
from slurm_helpers import sacct as _sacct
from slurm_helpers import wait_for as _wait

from dist_helpers import _close, _jsonl
from replication.launch import LauncherConfig
from replication.launch.inflight import GridDetached, read_record
from replication.launch.slurm import SlurmBackend
from replication.launch.status import grid_status
from replication.orchestration import grid, run_cache

pytestmark = pytest.mark.slow
ARMS = [grid.Arm("U", {"allocator.name": "uniform"}), grid.Arm("V", {"allocator.name": "vip"})]
STEPS = 1
GPU = {"gpus_per_process": 1}
"""Every run asks for one GPU (the cluster's fake ones; the runs compute on CPU): enters the key."""


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    need_slurm()
    return tmp_path_factory.mktemp("slurm-grid")


def _launcher(root: Path, name: str, **options) -> dict:
    return {"backend": "slurm", "options": {"folder": str(root / "slurm"), "job_name": name, "poll_s": 1,
                                            "time_min": 10, **options}}


def _name(what: str) -> str:
    return f"repl-test-{os.getpid()}-{what}"


def _key(arm: grid.Arm, seed: int) -> str:
    return run_cache.run_key("smoke", arm.overrides, seed, STEPS, shape=GPU)[0]


@pytest.fixture(scope="module")
def grids(root) -> dict:
    """The 2 × 2 grid through local (2 fake GPUs, 2 runs at a time) and through slurm, at the same
    time, own caches."""
    errors: list = []

    def local():
        try:
            grid.run_grid("smoke", ARMS, [0, 1], root / "local-out", steps=STEPS, cache=root / "local-cache",
                          launcher=LauncherConfig(gpus=("0", "1")), shape=GPU)
        except BaseException as e:  # noqa: BLE001 (handed to the fixture's thread)
            errors.append(e)

    _key(ARMS[0], 0)  # imports done here: two threads importing (transformers' lazy modules) race
    t = threading.Thread(target=local)
    t.start()
    grid.run_grid("smoke", ARMS, [0, 1], root / "slurm-out", steps=STEPS, cache=root / "slurm-cache",
                  launcher=_launcher(root, _name("grid")), shape=GPU)
    t.join()
    assert not errors, errors
    return {"root": root}


def _numbers(folder: Path) -> dict:
    return {"metrics": json.loads((folder / "metrics.json").read_text()), "steps": _jsonl(folder / "steps.jsonl")}


def test_slurm_grid_gives_the_local_numbers_as_one_array(grids):
    root, jobs = grids["root"], {}
    for arm in ARMS:
        for seed in (0, 1):
            key = _key(arm, seed)
            local, slurm = root / "local-cache" / key, root / "slurm-cache" / key
            assert run_cache.cached_run(key, root / "slurm-cache") == slurm  # entered the cache, verified
            assert run_cache.exported_key(root / "slurm-out" / arm.name / f"s{seed}") == key
            a, b = _numbers(local), _numbers(slurm)
            _close(a, b, f"{arm.name} s{seed}: local vs slurm")
            for section in ("eval_before", "eval_after"):
                assert a["metrics"][section] == b["metrics"][section]
            launch = b["metrics"]["provenance"]["launch"]
            assert launch["backend"] == "slurm" and launch["world_size"] == 1 and launch["hosts"], launch
            assert a["metrics"]["provenance"]["launch"]["backend"] == "local"
            jobs[launch["job"]] = launch["devices"]
            assert read_record(root / "slurm-cache", key) is None  # collected: its in-flight record is gone
    arrays = {j.split("_")[0] for j in jobs}
    assert len(arrays) == 1 and all("_" in j for j in jobs), jobs  # one array, a task each
    (array,) = arrays
    rows = _wait(lambda: (r := _sacct("-j", array, "-o", "JobID,State,JobName,Start,End")) and
                 all(x[1] == "COMPLETED" for x in r) and len(r) == 4 and r, 30, f"sacct showing array {array}")
    assert sorted(r[0] for r in rows) == sorted(jobs) and {r[2] for r in rows} == {_name("grid")}
    # jobs that ran at the same time held different GPUs (each one GPU: SLURM's gres, fake devices)
    span = {r[0]: (datetime.fromisoformat(r[3]), datetime.fromisoformat(r[4])) for r in rows}
    assert all(d is not None and "," not in d for d in jobs.values()), jobs
    overlapping = [(a, b) for a in jobs for b in jobs if a < b and span[a][0] < span[b][1] and span[b][0] < span[a][1]]
    assert overlapping, span  # 4 one-CPU jobs on 8 CPUs: they ran side by side
    for a, b in overlapping:
        assert jobs[a] != jobs[b], f"jobs {a} and {b} ran at the same time on GPU {jobs[a]}"


def test_a_cancelled_job_is_reported_within_a_minute_and_only_it_is_resubmitted(root, monkeypatch, capsys):
    name = _name("kill")
    cache, out = root / "kill-cache", root / "kill-out"
    reported: dict = {}
    real_failure = SlurmBackend.failure

    def failure(self, handle, state):  # the real report, timed
        reported[handle.job_id] = time.monotonic()
        return real_failure(self, handle, state)

    monkeypatch.setattr(SlurmBackend, "failure", failure)
    result: dict = {}

    def first():
        try:
            grid.run_grid("smoke", ARMS, [2], out, steps=STEPS, cache=cache, launcher=_launcher(root, name), shape=GPU)
        except BaseException as e:  # noqa: BLE001 (handed to the test's thread)
            result["error"] = e

    t = threading.Thread(target=first)
    t.start()

    def running_task():
        q = subprocess.run(["squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%i"], capture_output=True,
                           text=True).stdout.split()
        return sorted(q)[0] if q else None

    victim = _wait(running_task, 60, f"a running job named {name}", step=0.2)
    subprocess.run(["scancel", victim], check=True)
    killed = time.monotonic()
    t.join(timeout=180)
    assert not t.is_alive(), "the grid did not return after a job was cancelled"
    assert victim in reported and reported[victim] - killed < 60, (victim, reported)
    err = result.get("error")
    assert err is not None and f"slurm job {victim} " in str(err) and "CANCELLED" in str(err), err
    assert "run log:" in str(err) and "job log:" in str(err)
    # the other run of the array finished and entered the cache; the killed one did not
    done = [a for a in ARMS if run_cache.cached_run(_key(a, 2), cache)]
    assert len(done) == 1, done
    (lost,) = [a for a in ARMS if a not in done]
    assert read_record(cache, _key(lost, 2)).job_id == victim  # its record says which job it was
    capsys.readouterr()
    grid.run_grid("smoke", ARMS, [2], out, steps=STEPS, cache=cache, launcher=_launcher(root, name), shape=GPU)
    captured = capsys.readouterr()
    assert (f"1 already exported here, 0 copied from the published results, 0 from the run cache, 1 to train: "
            f"{lost.name} s2") in captured.out
    assert f"slurm job {victim} ({lost.name} seed 2, submitted" in captured.err and "ended CANCELLED" in captured.err
    assert "submitted 1 run(s) as job" in captured.err
    assert run_cache.cached_run(_key(lost, 2), cache) is not None and read_record(cache, _key(lost, 2)) is None


def test_a_detached_grid_returns_at_once_and_a_rerun_collects_without_submitting(root, capsys):
    """The array is submitted held (``sbatch --hold``, through launcher.options.sbatch), so that it
    is surely still in flight while status and a second detached run look at it."""
    name = _name("detach")
    cache, out = root / "detach-cache", root / "detach-out"
    with pytest.raises(GridDetached, match=r"2 run\(s\) in flight on SLURM \(2 submitted now; job\(s\) \d+\)"):
        grid.run_grid("smoke", ARMS, [3], out, steps=STEPS, cache=cache, shape=GPU,
                      launcher=_launcher(root, name, detach=True, sbatch=["--hold"]))
    records = [read_record(cache, _key(a, 3)) for a in ARMS]
    assert all(records) and len({r.array for r in records}) == 1, records
    (array,) = {r.array for r in records}
    states = grid_status("smoke", ARMS, [3], out, cache, steps=STEPS, shape=GPU)
    assert [s.state for s in states] == ["in flight"] * 2, states
    assert all(f"job {array}_" in s.detail and "PENDING" in s.detail for s in states), states
    # detached again while they fly: nothing is submitted a second time
    capsys.readouterr()
    with pytest.raises(GridDetached, match=r"2 run\(s\) in flight on SLURM \(2 submitted earlier"):
        grid.run_grid("smoke", ARMS, [3], out, steps=STEPS, cache=cache, shape=GPU, detach=True,
                      launcher=_launcher(root, name))
    assert "slurm: submitted" not in capsys.readouterr().err
    subprocess.run(["scontrol", "release", array], check=True, capture_output=True, timeout=30)
    # a plain re-run waits for them and collects them exactly as it collects its own runs
    frame = grid.run_grid("smoke", ARMS, [3], out, steps=STEPS, cache=cache, shape=GPU, launcher=_launcher(root, name))
    captured = capsys.readouterr()
    assert "2 run(s) in flight from an earlier submission, not submitted again" in captured.out
    assert "slurm: submitted" not in captured.err
    assert len(frame) == 2
    for arm in ARMS:
        key = _key(arm, 3)
        assert run_cache.cached_run(key, cache) is not None and read_record(cache, key) is None
        assert run_cache.exported_key(out / arm.name / "s3") == key
    assert [s.state for s in grid_status("smoke", ARMS, [3], out, cache, steps=STEPS, shape=GPU)] == ["done"] * 2
    rows = _sacct("--name", name, "-o", "JobID,State")
    assert {r[0].split("_")[0] for r in rows} == {array}, rows  # one array: the re-run submitted nothing
