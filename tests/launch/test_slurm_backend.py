"""The ``slurm`` launch backend (issue 35.2) against the one-node SLURM of scripts/local_slurm.sh.

- a 2 arms × 1 seed grid on the smoke profile (1 step) through ``slurm`` gives the numbers of the
  same grid through ``local``, each with its own run cache; both runs went as ONE array (sacct),
  and each run's provenance names backend slurm, its job ``<array>_<index>`` and its host;
- a job killed with ``scancel`` is reported by its id, the other job of the array still finishes,
  the grid raises, and the next run submits only the killed one.

The SLURM tests skip when SLURM is not running (``sinfo`` absent or failing), unless
REPLICATION_REQUIRE_SLURM=1 makes that a failure (as in tests/launch/test_local_slurm.py). The
first tests need no cluster: the options, sacct parsing and the lock hand-off of a job.
About 2 minutes on 2 busy cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from slurm_helpers import sacct as _sacct
from slurm_helpers import wait_for as _wait

from dist_helpers import _close, _jsonl
from replication.config import ConfigError
from replication.launch import LauncherConfig, RunShape, make_backend
from replication.launch.slurm import SlurmBackend, parse_sacct, sbatch_lines
from replication.launch.slurm_job import lock_state, parse_remote_lock, remote_lock_value
from replication.orchestration import grid, run_cache

REQUIRED = os.environ.get("REPLICATION_REQUIRE_SLURM") == "1"
START_HINT = "start it with `bash scripts/local_slurm.sh start` (docs/slurm.md)"
ARMS = [grid.Arm("U", {"allocator.name": "uniform"}), grid.Arm("V", {"allocator.name": "vip"})]
STEPS = 1


# ---------------------------------------------------------------- without a cluster
def test_options_become_sbatch_resources():
    b = SlurmBackend(LauncherConfig(backend="slurm", max_runs=3, options={
        "partition": "gpu", "account": "proj", "qos": "high", "time_min": 30, "mem_gb": 1.5,
        "sbatch": ["--constraint=a100", "#SBATCH --exclusive", "--gres gpu:2"]}))
    p = b.parameters(RunShape(processes=2, gpus_per_process=1, cpus_per_process=4, memory_gb=None))
    assert (p["partition"], p["account"], p["qos"], p["time"], p["mem"]) == ("gpu", "proj", "high", 30, "1536MB")
    assert (p["gpus_per_node"], p["cpus_per_task"], p["array_parallelism"]) == (2, 8, 3)
    assert p["additional_parameters"] == {"constraint": "a100", "exclusive": True, "gres": "gpu:2"}
    p = b.parameters(RunShape(time_limit_min=600, memory_gb=64))
    assert (p["time"], p["mem"], "gpus_per_node" in p) == (600, "65536MB", False)  # the shape wins
    with pytest.raises(ConfigError, match="unknown key"):
        make_backend({"backend": "slurm", "options": {"partiton": "gpu"}})
    with pytest.raises(ConfigError, match="not an sbatch option"):
        sbatch_lines(["constraint=a100"])
    with pytest.raises(ConfigError, match="multi-node"):
        b.check(RunShape(nodes=2))


def test_sacct_states_with_pending_ranges():
    text = "12_0|RUNNING\n12_[1-3%2]|PENDING\n13|CANCELLED by 0\n14_[5,7]|PENDING\n"
    assert parse_sacct(text) == {"12_0": "RUNNING", "12_1": "PENDING", "12_2": "PENDING", "12_3": "PENDING",
                                 "13": "CANCELLED", "14_5": "PENDING", "14_7": "PENDING"}


def test_runs_are_gathered_into_one_submission(tmp_path, monkeypatch):
    """Every expected run that arrives goes in one batch; one that settles without arriving (found
    finished, or failed before the launcher) is not waited for."""
    from replication.launch.backend import Handle, Job

    b = SlurmBackend(LauncherConfig(backend="slurm"))
    batches: list = []

    def fake_submit(batch):
        batches.append([s["job"].name for s in batch])
        for s in batch:
            s["handle"] = Handle(job=s["job"], job_id=f"7_{len(batches)}")

    monkeypatch.setattr(b, "_submit_batch", fake_submit)
    b.expect(3)
    job = lambda n: Job(name=n, command=["python", "-m", "replication", "train"], env={}, shape=RunShape(),
                        log=tmp_path / f"{n}.log")
    t0 = time.monotonic()
    threads = [threading.Thread(target=lambda n=n: (b.submit(job(n)), b.settled())) for n in ("a", "b")]
    threads.append(threading.Thread(target=b.settled))  # the third never reaches submit
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert [sorted(x) for x in batches] == [["a", "b"]] and time.monotonic() - t0 < 10


HOLD = """
import sys, time
from replication.store.lock import hold_writer_lock
hold_writer_lock(sys.argv[1]); print("held", flush=True); time.sleep(60)
"""


def test_a_job_vouches_only_for_the_grid_that_holds_the_lock(tmp_path):
    folder = str((tmp_path / "entry").resolve())
    assert parse_remote_lock(remote_lock_value(42, "node-a", folder)) == ("42", "node-a", folder)
    assert parse_remote_lock(f"42:{folder}") is None  # the local form is not a remote one
    holder = subprocess.Popen([sys.executable, "-c", HOLD, folder], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        import socket

        host = socket.gethostname()
        assert lock_state(folder, str(holder.pid), host) == "grid"  # held by the grid the job names
        assert lock_state(folder, str(holder.pid), "another-host") == "other"  # same pid elsewhere: not it
        assert lock_state(folder, "1", host) == "other"
    finally:
        holder.kill()
        holder.wait()
    # the grid is gone: the job's process takes the lock itself (a second grid is then refused)
    probe = [sys.executable, "-c", "import sys; from replication.launch.slurm_job import lock_state; "
             "print(lock_state(sys.argv[1], '1', 'x'))", folder]
    assert subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip() == "mine"


# ---------------------------------------------------------------- against the local SLURM
def _skip_or_fail(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason}, and REPLICATION_REQUIRE_SLURM=1 makes that a failure; {START_HINT}")
    pytest.skip(f"{reason}; {START_HINT}")


def _slurm_problem() -> str | None:
    import shutil

    for tool in ("sinfo", "sbatch", "sacct", "scancel", "squeue"):
        if shutil.which(tool) is None:
            return f"SLURM is not installed (`{tool}` not on PATH)"
    for cmd in (["sinfo", "-h", "-o", "%T"], ["sacct", "-n", "-X", "-j", "1"]):
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)
        except (subprocess.SubprocessError, OSError) as e:
            return f"SLURM is not running (`{' '.join(cmd)}` failed: {e})"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install -e '.[slurm]')"
    return None


@pytest.fixture(scope="module")
def slurm():
    problem = _slurm_problem()
    if problem:
        _skip_or_fail(problem)


def _launcher(root: Path, name: str) -> dict:
    return {"backend": "slurm", "options": {"folder": str(root / "slurm"), "job_name": name, "poll_s": 1,
                                            "time_min": 10}}






@pytest.fixture(scope="module")
def grids(slurm, tmp_path_factory) -> dict:
    """The same 2 arms × 1 seed grid through local (2 cores) and through slurm, own caches."""
    root = tmp_path_factory.mktemp("slurm-grid")
    name = f"repl-test-{os.getpid()}"
    grid.run_grid("smoke", ARMS, [0], root / "local-out", steps=STEPS, cache=root / "local-cache",
                  launcher=LauncherConfig(cpus=2))
    grid.run_grid("smoke", ARMS, [0], root / "slurm-out", steps=STEPS, cache=root / "slurm-cache",
                  launcher=_launcher(root, name))
    return {"root": root, "name": name}


def _numbers(folder: Path) -> dict:
    return {"metrics": json.loads((folder / "metrics.json").read_text()), "steps": _jsonl(folder / "steps.jsonl")}


@pytest.mark.slow
def test_slurm_grid_gives_the_local_numbers_as_one_array(grids):
    root, jobs = grids["root"], []
    for arm in ARMS:
        key = run_cache.run_key("smoke", arm.overrides, 0, STEPS)[0]
        local, slurm = root / "local-cache" / key, root / "slurm-cache" / key
        assert run_cache.cached_run(key, root / "slurm-cache") == slurm  # entered the cache, verified
        a, b = _numbers(local), _numbers(slurm)
        _close(a, b, f"{arm.name}: local vs slurm")
        for section in ("eval_before", "eval_after"):
            assert a["metrics"][section] == b["metrics"][section]
        launch = b["metrics"]["provenance"]["launch"]
        assert launch["backend"] == "slurm" and launch["world_size"] == 1 and launch["hosts"], launch
        assert a["metrics"]["provenance"]["launch"]["backend"] == "local"
        jobs.append(launch["job"])
    arrays = {j.split("_")[0] for j in jobs}
    assert len(arrays) == 1 and all("_" in j for j in jobs), jobs  # one array, a task each
    (array,) = arrays
    rows = _wait(lambda: (r := _sacct("-j", array, "-o", "JobID,State,JobName")) and
                 all(x[1] == "COMPLETED" for x in r) and len(r) == 2 and r, 30, f"sacct showing array {array}")
    assert sorted(r[0] for r in rows) == sorted(jobs) and {r[2] for r in rows} == {grids["name"]}


@pytest.mark.slow
def test_a_cancelled_job_is_reported_and_only_it_is_resubmitted(grids, capsys):
    root, name = grids["root"], grids["name"] + "-kill"
    cache, out = root / "kill-cache", root / "kill-out"
    result: dict = {}

    def first():
        try:
            grid.run_grid("smoke", ARMS, [1], out, steps=STEPS, cache=cache, launcher=_launcher(root, name))
        except BaseException as e:  # noqa: BLE001 (handed to the test's thread)
            result["error"] = e

    t = threading.Thread(target=first)
    t.start()

    def running_task():
        q = subprocess.run(["squeue", "-h", "-n", name, "-t", "RUNNING", "-o", "%i"], capture_output=True,
                           text=True).stdout.split()
        return sorted(q)[0] if q else None

    victim = _wait(running_task, 60, f"a running job named {name}")
    subprocess.run(["scancel", victim], check=True)
    t.join(timeout=180)
    assert not t.is_alive(), "the grid did not return after a job was cancelled"
    err = result.get("error")
    assert err is not None and f"slurm job {victim} " in str(err) and "CANCELLED" in str(err), err
    assert "run log:" in str(err) and "job log:" in str(err)
    # the other run of the array finished and entered the cache; the killed one did not
    done = [a for a in ARMS if run_cache.cached_run(run_cache.run_key("smoke", a.overrides, 1, STEPS)[0], cache)]
    assert len(done) == 1, done
    capsys.readouterr()
    grid.run_grid("smoke", ARMS, [1], out, steps=STEPS, cache=cache, launcher=_launcher(root, name))
    captured = capsys.readouterr()
    assert f"1 already exported here, 0 copied from the published results, 0 from the run cache, 1 to train: {[a for a in ARMS if a not in done][0].name} s1" in captured.out
    assert "submitted 1 run(s) as job" in captured.err


@pytest.mark.slow
def test_stopping_the_grid_cancels_the_array(grids, monkeypatch):
    """The grid's stop path (RunGuard → ``backend.cancel_all``): every job of the array is
    cancelled in SLURM and the grid raises GridInterrupted."""
    from replication.interrupts import GridInterrupted

    root, name = grids["root"], grids["name"] + "-stop"
    made: list = []
    real = grid.make_backend
    monkeypatch.setattr(grid, "make_backend", lambda cfg: made.append(real(cfg)) or made[-1])
    result: dict = {}

    def run():
        try:
            grid.run_grid("smoke", ARMS, [2], root / "stop-out", steps=STEPS, cache=root / "stop-cache",
                          launcher=_launcher(root, name))
        except BaseException as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=run)
    t.start()
    jobs = _wait(lambda: subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True,
                                        text=True).stdout.split(), 60, f"jobs named {name} queued")
    made[0].cancel_all()
    t.join(timeout=60)
    assert not t.is_alive() and isinstance(result.get("error"), GridInterrupted), result
    array = jobs[0].split("_")[0]
    rows = _wait(lambda: (r := _sacct("-j", array, "-o", "JobID,State")) and
                 all(x[1].startswith("CANCELLED") for x in r) and r, 30, f"array {array} cancelled in sacct")
    # one array of the two runs; cancelled while pending, sacct shows it as one record, its bare id
    assert sorted(made[0]._handles) == [f"{array}_0", f"{array}_1"]
    assert {r[0].split("_")[0] for r in rows} == {array}, rows
