"""Faults of a multi-process run (issue 18.6, train/rank_faults.py): a stopped rank, a killed
launcher, a relaunch beside live ranks. Each check runs real gloo ranks on CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dist_helpers import _env, _free_port, _launcher, _train_args

RANK_SCRIPT = """
import os, sys, time
from pathlib import Path
from replication.train.distributed import World
from replication.train.rank_faults import stop_on_collective_failure
w = World.from_env()
with stop_on_collective_failure(w.rank, w.size, w.distributed):
    w.sum(1.0)  # every rank arrives once
    Path(sys.argv[1], f"rank{w.rank}.pid").write_text(str(os.getpid()))
    if w.rank == 1 or sys.argv[2] == "all":
        time.sleep(float(sys.argv[3]))  # stopped before the next collective
    w.sum(2.0)
print(f"rank {w.rank} done")
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_collective_timeout_ends_the_waiting_rank_with_one_line(tmp_path):
    """Rank 1 stops before a collective; with a 2 s timeout rank 0 exits non-zero (4) within
    seconds, printing one line that names it — not torch's 30-minute wait."""
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    port = _free_port()
    procs = []
    for rank in (0, 1):
        env = {**_env(), "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "REPLICATION_COLLECTIVE_TIMEOUT_S": "2"}
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path), "one", "60"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        t0 = time.monotonic()
        out, err = procs[0].communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert procs[0].returncode == 4, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: rank 0 of 2: a collective failed"), err
    assert "REPLICATION_COLLECTIVE_TIMEOUT_S" in lines[0]
    assert waited < 40


def test_timeout_setting_is_checked():
    from replication.config import ConfigError
    from replication.train.rank_faults import collective_timeout

    assert collective_timeout("gloo", {}).total_seconds() == 300
    assert collective_timeout("nccl", {}).total_seconds() == 1800
    assert collective_timeout("gloo", {"REPLICATION_COLLECTIVE_TIMEOUT_S": "7.5"}).total_seconds() == 7.5
    with pytest.raises(ConfigError, match="REPLICATION_COLLECTIVE_TIMEOUT_S='soon'"):
        collective_timeout("gloo", {"REPLICATION_COLLECTIVE_TIMEOUT_S": "soon"})


def test_ranks_die_with_their_torchrun_launcher(tmp_path):
    """``kill -9`` of the torchrun launcher alone: its ranks (busy, not in a collective) exit
    within seconds instead of training on as orphans."""
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(script), str(tmp_path), "all", "120"]
    launcher = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(pids) < 2:
            pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid") if p.read_text()]
            time.sleep(0.2)
        assert len(pids) == 2, "the ranks did not start"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        assert not any(_alive(p) for p in pids), "a rank outlived its killed launcher"
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_resume_beside_live_ranks_is_refused(small_overrides, tmp_path):
    """A ``--resume`` relaunch while the first job's ranks still train on the folder: refused
    with one line naming the folder (the run-folder lock), and the first job finishes intact."""
    out = tmp_path / "run"
    args = _train_args(small_overrides, out, "vip", "--set", "checkpoint_every=1", steps=5000)  # killed below
    first = subprocess.Popen(_launcher(2) + args, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (out / "checkpoint").exists() and first.poll() is None:
            time.sleep(0.1)
        assert (out / "checkpoint").exists() and first.poll() is None
        second = subprocess.run(_launcher(2) + args + ["--resume"], env=_env(), capture_output=True,
                                text=True, timeout=300)
        assert second.returncode != 0
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert errors and all(e == errors[0] for e in errors), second.stderr[-2000:]
        assert str(out) in errors[0] and "is being written by pid" in errors[0]
        assert first.poll() is None, "the relaunch disturbed the running job"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == list(range(len(rows)))  # no second writer's rows
