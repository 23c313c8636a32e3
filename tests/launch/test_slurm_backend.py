"""The ``slurm`` launch backend (issue 35): what needs no cluster, and stopping a grid on the
one-node SLURM of scripts/local_slurm.sh.

- launcher.options → sbatch resources; a multi-node shape's plan (nodes, one task per node, GPUs
  and CPUs per node, requeueable); sacct/squeue parsing; gathering runs into one submission; the
  lock hand-off of a job; the in-flight records; the requeued job's command (``--resume``); only a
  scheduler detaches; where SLURM does not answer, nothing recorded is submitted again;
  ``python -m replication status`` on a params file; the skip that REPLICATION_REQUIRE_SLURM=1
  makes a failure;
- against the cluster: the grid's stop path cancels the whole array.

The grid on the cluster is tests/launch/test_slurm_grid.py, requeue and multi-node
tests/launch/test_slurm_job.py. The cluster test skips when SLURM is not running, unless
REPLICATION_REQUIRE_SLURM=1 makes that a failure (tests/slurm_helpers.need_slurm).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

import pytest
from slurm_helpers import need_slurm
from slurm_helpers import sacct as _sacct
from slurm_helpers import wait_for as _wait

from replication.config import ConfigError
from replication.launch import LauncherConfig, RunShape, make_backend
from replication.launch.slurm import SlurmBackend, parse_sacct, sbatch_lines
from replication.launch.slurm_job import lock_state, parse_remote_lock, remote_lock_value
from replication.orchestration import grid, run_cache


# ---------------------------------------------------------------- without a cluster
def test_options_become_sbatch_resources():
    b = SlurmBackend(LauncherConfig(backend="slurm", max_runs=3, options={
        "partition": "gpu", "account": "proj", "qos": "high", "time_min": 30, "mem_gb": 1.5,
        "sbatch": ["--constraint=a100", "#SBATCH --exclusive", "--gres gpu:2"]}))
    p = b.parameters(RunShape(processes=2, gpus_per_process=1, cpus_per_process=4, memory_gb=None))
    assert (p["partition"], p["account"], p["qos"], p["time"], p["mem"]) == ("gpu", "proj", "high", 30, "1536MB")
    assert (p["gpus_per_node"], p["cpus_per_task"], p["array_parallelism"]) == (2, 8, 3)
    assert p["additional_parameters"] == {"requeue": True, "constraint": "a100", "exclusive": True, "gres": "gpu:2"}
    p = b.parameters(RunShape(time_limit_min=600, memory_gb=64))
    assert (p["time"], p["mem"], "gpus_per_node" in p) == (600, "65536MB", False)  # the shape wins
    with pytest.raises(ConfigError, match="unknown key"):
        make_backend({"backend": "slurm", "options": {"partiton": "gpu"}})
    with pytest.raises(ConfigError, match="not an sbatch option"):
        sbatch_lines(["constraint=a100"])
    with pytest.raises(ConfigError, match=r"launcher.options.detach='yes': expected <class 'bool'>"):
        make_backend({"backend": "slurm", "options": {"detach": "yes"}})
    assert make_backend({"backend": "slurm", "options": {"detach": True}}).detach is True


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



def test_a_multi_node_run_is_one_task_per_node_with_the_node_resources():
    """The plan of a 4-node run of 2 processes × 1 GPU × 3 threads, from the backend's own
    ``parameters`` and as submitit writes it into the sbatch script."""
    from submitit.slurm.slurm import _make_sbatch_string

    b = SlurmBackend(LauncherConfig(backend="slurm", options={"signal_delay_s": 90}))
    shape = RunShape(nodes=4, processes=2, gpus_per_process=1, cpus_per_process=3, memory_gb=8)
    b.check(shape)  # multi-node is placed now
    p = b.parameters(shape)
    assert (p["nodes"], p["ntasks_per_node"], p["gpus_per_node"], p["cpus_per_task"], p["mem"]) == \
        (4, 1, 2, 6, "8192MB")
    assert p["additional_parameters"] == {"requeue": True}
    script = _make_sbatch_string(command="python -u -m submitit.core._submit F", folder="/f", **p)
    lines = set(script.splitlines())
    for line in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=2",
                 "#SBATCH --cpus-per-task=6", "#SBATCH --mem=8192MB", "#SBATCH --requeue",
                 "#SBATCH --signal=USR2@90"):
        assert line in lines, (line, script)


def test_each_node_runs_torchrun_with_its_rank_on_one_rendezvous(monkeypatch):
    from replication.launch.slurm_job import node_prefix, node_rank, rendezvous_port
    from replication.store.run_key import normalized_command

    port = rendezvous_port("812_3")
    assert port == rendezvous_port("812_3") and 20000 <= port < 40000  # every task computes the same
    prefix = node_prefix(2, 1, 4, f"node-a:{port}", "812-3")
    torchrun = prefix[prefix.index("torch.distributed.run") + 1:-2]
    assert dict(zip(torchrun[::2], torchrun[1::2])) == {
        "--nnodes": "2", "--node-rank": "1", "--nproc-per-node": "4", "--rdzv-backend": "static",
        "--rdzv-endpoint": f"node-a:{port}", "--rdzv-id": "812-3"}
    train = ["train", "--profile", "smoke", "--seed", "0", "--out", "/x"]
    assert normalized_command(prefix + train) == normalized_command(train)  # placement is not in the key
    assert node_rank({"SLURM_PROCID": "3", "SLURM_NODEID": "3"}) == 3 and node_rank({}) == 0


def test_a_requeued_job_resumes_only_from_a_checkpoint(tmp_path):
    from replication.launch.slurm_job import restart_count, resumed_command

    cmd = ["python", "-m", "replication", "train", "--seed", "0", "--out", str(tmp_path / "run"), "--overwrite"]
    assert resumed_command(cmd) == cmd  # stopped before its first checkpoint: from the start
    assert resumed_command(cmd[:-1] + ["--resume"]) == cmd
    assert restart_count({"SLURM_RESTART_COUNT": "2"}) == 2 and restart_count({}) == 0


def test_in_flight_records_live_beside_the_cache_entry(tmp_path):
    from replication.launch.collect import detached_message
    from replication.launch.inflight import InFlight, read_record, record_path, remove_record, write_record
    from replication.launch.slurm_queue import GONE, phase

    rec = InFlight(key="abc", name="U seed 0", job_id="77_3", host="login1", submitted="2026-12-03T10:00:00Z",
                   log=str(tmp_path / "abc.log"), job_log="/f/77_3_0_log.out")
    assert read_record(tmp_path, "abc") is None
    assert write_record(tmp_path, rec) == record_path(tmp_path, "abc") == tmp_path / "abc.job.json"
    assert read_record(tmp_path, "abc") == rec and (rec.array, rec.index) == ("77", 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc.job.json"]  # no temporary left behind
    record_path(tmp_path, "abc").write_text("{not json")
    with pytest.warns(UserWarning, match="abc.job.json is not readable"):
        assert read_record(tmp_path, "abc") is None
    remove_record(tmp_path, "abc")
    remove_record(tmp_path, "abc")  # gone already: nothing to do
    assert not record_path(tmp_path, "abc").exists()
    assert [phase(s) for s in ("PENDING", "REQUEUED", "RUNNING", "COMPLETED", "TIMEOUT", GONE)] == \
        ["in flight"] * 3 + ["done", "failed", "failed"]
    text = detached_message([rec], [dataclasses.replace(rec, job_id="70_0")])
    assert text.startswith("2 run(s) in flight on SLURM (1 submitted now, 1 submitted earlier; job(s) 70, 77)")
    assert "python -m replication status" in text and "again to collect" in text


ARMS = [grid.Arm("U", {"allocator.name": "uniform"}), grid.Arm("V", {"allocator.name": "vip"})]


def test_only_a_scheduler_can_detach(tmp_path):
    """The local backend's runs are this process's children: detach is refused before any run."""
    for launcher, detach in (({"backend": "local", "options": {"detach": True}}, None), (None, True)):
        with pytest.raises(ConfigError, match="detach: launcher.backend=local runs its runs as this process's"):
            grid.run_grid("smoke", ARMS[:1], [0], tmp_path / "out", steps=1, cache=tmp_path / "cache",
                          launcher=launcher, detach=detach)
    assert not (tmp_path / "cache").exists()


def test_where_slurm_does_not_answer_nothing_recorded_is_submitted_again(tmp_path, monkeypatch):
    """Records of an earlier grid's jobs, on a machine where neither squeue nor sacct answers: the
    grid stops rather than submit a run twice; status shows them unknown."""
    from replication.launch.collect import still_in_flight
    from replication.launch.inflight import InFlight, write_record
    from replication.launch.slurm_queue import QueueUnreadable
    from replication.launch.status import grid_status

    key = run_cache.run_key("smoke", ARMS[0].overrides, 0, 1)[0]
    write_record(tmp_path, InFlight(key=key, name="U seed 0", job_id="77_0", host="login1",
                                    submitted="2026-12-03T10:00:00Z", log="l", job_log="j"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    with pytest.raises(QueueUnreadable, match=r"job\(s\) 77_0: neither squeue nor sacct answered.*U seed 0"):
        still_in_flight(tmp_path, {key: "U seed 0"})
    (row,) = grid_status("smoke", ARMS[:1], [0], tmp_path / "out", tmp_path, steps=1)
    assert (row.state, row.key) == ("unknown", key) and "job 77_0" in row.detail, row


def test_status_shows_a_papers_grid_from_params_yaml(tmp_path):
    """``python -m replication status``: the stage's runs with their keys, one recorded job whose
    state SLURM cannot tell here (no squeue/sacct on PATH), the rest missing; exit 0."""
    import yaml

    from replication.launch.inflight import InFlight, write_record
    from replication.launch.status import paper_status

    params = yaml.safe_load(open("params.yaml"))
    params["profile"] = "smoke"
    params["vip"].update(seeds=[0, 1], run=["RLOO"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    head, rows = paper_status("vip", tmp_path / "params.yaml", tmp_path / "cache")
    assert head.startswith("vip: profile smoke, 1 arms x 2 seeds, exports in workspace/smoke/vip/runs")
    assert [(r.arm, r.seed, r.state) for r in rows] == [("RLOO", 0, "missing"), ("RLOO", 1, "missing")]
    (tmp_path / "cache").mkdir()
    write_record(tmp_path / "cache", InFlight(key=rows[0].key, name="RLOO seed 0", job_id="77_0", host="login1",
                                              submitted="2026-12-03T10:00:00Z", log="l", job_log="j"))
    env = {**os.environ, "PATH": str(tmp_path)}  # no SLURM commands: the job's state is unknown
    p = subprocess.run([sys.executable, "-m", "replication", "status", "--paper", "vip", "--params",
                        str(tmp_path / "params.yaml"), "--cache", str(tmp_path / "cache")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == head
    assert lines[1].split() == ["arm", "seed", "key", "state", "detail"]
    assert lines[2].split()[:4] == ["RLOO", "0", rows[0].key[:12], "unknown"] and "job 77_0" in lines[2]
    assert lines[3].split() == ["RLOO", "1", rows[1].key[:12], "missing"]
    assert lines[4] == "vip: 2 runs: 0 done, 0 in flight, 0 failed, 1 missing, 1 unknown"
    bad = subprocess.run([sys.executable, "-m", "replication", "status", "--paper", "nope"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


def test_slurm_absent_skips_unless_required(tmp_path, monkeypatch):
    """Every SLURM test goes through ``need_slurm``: a skip naming the cause and the command that
    starts the cluster, a failure when REPLICATION_REQUIRE_SLURM=1 (CI)."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no sinfo here
    monkeypatch.delenv("REPLICATION_REQUIRE_SLURM", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"SLURM is not installed \(`sinfo` not on PATH\); start it"):
        need_slurm()
    monkeypatch.setenv("REPLICATION_REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="REPLICATION_REQUIRE_SLURM=1 makes that a failure; start it"):
        need_slurm()


# ---------------------------------------------------------------- against the local SLURM


@pytest.mark.slow
def test_stopping_the_grid_cancels_the_array(tmp_path, monkeypatch):
    """The grid's stop path (RunGuard → ``backend.cancel_all``): every job of the array is
    cancelled in SLURM and the grid raises GridInterrupted."""
    from replication.interrupts import GridInterrupted

    need_slurm()
    name = f"repl-test-{os.getpid()}-stop"
    made: list = []
    real = grid.make_backend
    monkeypatch.setattr(grid, "make_backend", lambda cfg: made.append(real(cfg)) or made[-1])
    result: dict = {}
    launcher = {"backend": "slurm", "options": {"folder": str(tmp_path / "slurm"), "job_name": name, "poll_s": 1,
                                                "time_min": 10}}

    def run():
        try:
            grid.run_grid("smoke", ARMS, [2], tmp_path / "out", steps=1, cache=tmp_path / "cache", launcher=launcher)
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
    # the records of the cancelled jobs stay (status shows them failed; a re-run submits again)
    keys = [run_cache.run_key("smoke", a.overrides, 2, 1)[0] for a in ARMS]
    assert all((tmp_path / "cache" / f"{k}.job.json").exists() for k in keys)
