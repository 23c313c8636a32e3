"""The one-node SLURM of `scripts/local_slurm.sh`, driven through submitit as the `slurm` launch
backend will drive it: job arrays, accounting (`sacct`), fake GPUs as generic resources,
cancellation, time limits.

Skipped when SLURM is not running (`sinfo` absent or failing), unless REPLICATION_REQUIRE_SLURM=1,
which turns the skip into a failure (tests/slurm_helpers.need_slurm; CI sets it after
`bash scripts/local_slurm.sh start`).
About 1.5 minutes: the time-limit test waits for SLURM's once-every-30-s time-limit check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_helpers import need_slurm, slurm_problem
from slurm_helpers import sacct as _sacct
from slurm_helpers import wait_for as _wait


def _run(*cmd: str, timeout: float = 30) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout).stdout


@pytest.fixture(scope="module")
def submitit():
    need_slurm()
    import cloudpickle
    import submitit
    # The jobs unpickle this module's functions in a process that cannot import the test module
    # (pytest imports it with importlib): ship them by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return submitit


@pytest.fixture(scope="module")
def timeout_job(submitit, tmp_path_factory):
    """A job that outlives its 1-minute limit, submitted first so that its wait (60 to ~95 s:
    SLURM checks time limits every 30 s) overlaps the other tests; checked by the last test."""
    folder = tmp_path_factory.mktemp("timeout")
    out = _run("sbatch", "--parsable", "--time=1", "--cpus-per-task=1", "--job-name=timeout-test",
               f"--output={folder}/%j.out", "--wrap", "sleep 600")
    job_id = out.strip().split(";")[0]
    yield folder, job_id
    subprocess.run(["scancel", job_id], capture_output=True, timeout=30)  # when a test was deselected


@pytest.fixture(autouse=True, scope="module")
def _start_timeout_job_early(request):
    if slurm_problem() is None:
        request.getfixturevalue("timeout_job")


def _executor(submitit, folder: Path, **params):
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(**{"timeout_min": 5, "cpus_per_task": 1, "mem_gb": 1, **params})
    return ex


# ---------------------------------------------------------------- functions the jobs run
def square(x: int) -> dict:
    return {"x": x, "square": x * x, "task": os.environ.get("SLURM_ARRAY_TASK_ID")}


def gpu_rendezvous(folder: str, n: int) -> dict:
    """Report this job's GPUs, after waiting until all n jobs are running at once."""
    me = os.environ["SLURM_JOB_ID"]
    Path(folder, f"running-{me}").touch()
    t0 = time.monotonic()
    while len(list(Path(folder).glob("running-*"))) < n:
        if time.monotonic() - t0 > 60:
            raise RuntimeError("the other job never ran at the same time as this one")
        time.sleep(0.2)
    return {"job": me, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}


def sleep_long() -> None:
    time.sleep(600)


class ResumesAfterRequeue:
    """Checkpointable: the first run waits for SLURM's warning signal, submitit checkpoints
    (pickles self, attempt=1) and requeues the job; the requeued run returns at once."""

    def __init__(self) -> None:
        self.attempt = 0

    def __call__(self) -> str:
        self.attempt += 1
        if self.attempt == 1:
            time.sleep(600)
        return f"attempt {self.attempt}"

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


# ---------------------------------------------------------------- tests
def test_job_array_runs_and_is_one_array_in_sacct(submitit, tmp_path):
    ex = _executor(submitit, tmp_path, slurm_array_parallelism=3)
    jobs = ex.map_array(square, [1, 2, 3])
    results = [job.result() for job in jobs]
    assert [r["square"] for r in results] == [1, 4, 9]
    assert sorted(r["task"] for r in results) == ["0", "1", "2"]
    # one array: every job id is <array id>_<index>, and sacct lists the three under that id
    array_ids = {job.job_id.split("_")[0] for job in jobs}
    assert len(array_ids) == 1, [job.job_id for job in jobs]
    (array_id,) = array_ids

    def all_completed():
        rows = _sacct("-j", array_id, "-o", "JobID,State")
        return rows if len(rows) == 3 and all(r[1] == "COMPLETED" for r in rows) else None

    rows = _wait(all_completed, 30, f"sacct showing array {array_id}'s 3 tasks COMPLETED")
    assert sorted(r[0] for r in rows) == [f"{array_id}_{i}" for i in range(3)]


def test_concurrent_gpu_jobs_get_disjoint_devices(submitit, tmp_path):
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    ex = _executor(submitit, tmp_path / "jobs", gpus_per_node=1)
    jobs = ex.map_array(gpu_rendezvous, [str(rendezvous)] * 2, [2] * 2)
    results = [job.result() for job in jobs]  # each returned only once both were running
    gpus = [r["gpus"] for r in results]
    assert all(g is not None and "," not in g for g in gpus), gpus  # one GPU each
    assert gpus[0] != gpus[1], f"two running jobs were given the same GPU: {gpus}"
    # accounting records the GPU each job held (slurmctld reports to slurmdbd asynchronously)
    for job in jobs:
        rows = _wait(lambda: _sacct("-j", job.job_id, "-o", "AllocTRES"), 30, f"job {job.job_id} in sacct")
        assert len(rows) == 1 and "gres/gpu=1" in rows[0][0], rows


def test_cancelled_job_is_seen_by_submitit(submitit, tmp_path):
    job = _executor(submitit, tmp_path).submit(sleep_long)
    _wait(lambda: job.get_info(mode="force").get("State") == "RUNNING", 30, f"job {job.job_id} running")
    _run("scancel", job.job_id)
    t0 = time.monotonic()
    _wait(lambda: job.done(force_check=True), 60, f"submitit seeing cancelled job {job.job_id} done")
    assert job.state.startswith("CANCELLED"), job.state
    assert time.monotonic() - t0 < 60
    # (not job.result(): with no result file it waits ~20 s for a slow shared file system first)


def test_job_at_time_limit_is_requeued_and_resumes(submitit, tmp_path):
    # 2-minute limit, SLURM's warning signal (USR2) asked 60 s before it: submitit catches the
    # signal, checkpoints the callable and requeues the job, which then completes from its
    # checkpoint. slurmctld looks at limits every 30 s and sends the signal once the time left is
    # at most the delay + 30 s, here 30 to 60 s after the start. It must not come sooner: a signal
    # before submitit has installed its handler kills the job outright (seen with a 90 s delay on
    # a 2-min limit: the requeued run was signalled 0.5 s after it started and FAILED).
    ex = _executor(submitit, tmp_path, timeout_min=2, slurm_signal_delay_s=60)
    job = ex.submit(ResumesAfterRequeue())
    assert job.result() == "attempt 2"

    def requeued_then_completed():  # -D: every run of the job, not only the last
        states = [r[0] for r in _sacct("-D", "-j", job.job_id, "-o", "State")]
        return states if states[-1:] == ["COMPLETED"] else None

    states = _wait(requeued_then_completed, 30, f"sacct showing job {job.job_id} COMPLETED")
    assert "REQUEUED" in states or "PREEMPTED" in states, states


def test_job_past_time_limit_ends_timeout(submitit, timeout_job):
    # submitted at the start of the module; SLURM ends it 60 to ~95 s after it started
    folder, job_id = timeout_job
    job = submitit.SlurmJob(folder=folder, job_id=job_id)
    _wait(lambda: job.done(force_check=True), 150, f"job {job_id} past its time limit ending", step=2)
    assert job.state == "TIMEOUT", job.state
    assert _sacct("-j", job_id, "-o", "State") == [["TIMEOUT"]]
