"""How a multi-process run starts (issue 35.2): torchrun with --nproc-per-node k on a rendezvous
port of its own, behind the wrapper that binds it to the grid; the variables it hands the ranks;
the provenance variables the trainer reads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from replication.launch import Job, LauncherConfig, RunShape, make_backend
from replication.launch import bound, env as launch_env_mod
from replication.launch import local as launch_local
from replication.launch.torchrun import PortBook, torchrun_prefix
from replication.store.run_key import normalized_command

TRAIN = [sys.executable, "-m", "replication", "train", "--profile", "smoke", "--seed", "0", "--out", "/x"]


def test_torchrun_command_of_a_multi_process_run():
    prefix = torchrun_prefix(4, 29511, "r1")
    assert prefix[:4] == [sys.executable, "-m", "replication.launch.bound", "--"]
    torchrun = prefix[4:]
    assert torchrun[:3] == [sys.executable, "-m", "torch.distributed.run"]
    flags = dict(zip(torchrun[3:-2:2], torchrun[4:-2:2]))
    assert flags == {"--nnodes": "1", "--nproc-per-node": "4", "--rdzv-backend": "c10d",
                     "--rdzv-endpoint": "127.0.0.1:29511", "--rdzv-id": "r1"}
    assert torchrun[-2:] == ["-m", "replication"]
    assert normalized_command(prefix + TRAIN[3:]) == normalized_command(TRAIN)  # not in the key


def test_concurrent_runs_get_unique_ports_and_one_process_runs_none(tmp_path, monkeypatch):
    started: list = []

    class Running:
        def __init__(self, pid):
            self.pid, self.returncode = pid, None

        def poll(self):
            return self.returncode

        def wait(self, timeout=None):
            self.returncode = 0
            return 0

    monkeypatch.setattr(launch_local, "start_process",
                        lambda cmd, log, env: started.append(cmd) or Running(20_000 + len(started)))
    backend = make_backend(LauncherConfig(cpus=64, gpus=()))
    two = RunShape(processes=2)
    handles = [backend.submit(Job(f"r{i}", TRAIN, {}, two, tmp_path / f"{i}.log")) for i in range(8)]
    ports = [cmd[cmd.index("--rdzv-endpoint") + 1] for cmd in started]
    assert len(set(ports)) == 8 and all(p.startswith("127.0.0.1:") for p in ports)
    assert all(cmd[cmd.index("--nproc-per-node") + 1] == "2" for cmd in started)
    assert backend.ports.held == {int(p.split(":")[1]) for p in ports}
    for h in handles:
        backend.wait(h)
    assert backend.ports.held == set()  # given back when the runs end
    one = backend.submit(Job("single", TRAIN, {}, RunShape(), tmp_path / "s.log"))
    assert started[-1] == TRAIN  # a one-process run starts exactly as the grid always started it
    backend.wait(one)


def test_port_book_never_hands_a_held_port_twice():
    book = PortBook()
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(book.take())) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 20


def test_the_wrapper_hands_the_grid_pid_on_as_its_own():
    from replication.__main__ import PARENT_ENV
    from replication.train.run_folder import LOCK_ENV

    assert (bound.PARENT_ENV, bound.LOCK_ENV) == (PARENT_ENV, LOCK_ENV)
    env = {PARENT_ENV: "100", LOCK_ENV: "100:/c/key", "OTHER": "x"}
    assert bound.handed_on(env, parent=100, me=200) == {PARENT_ENV: "200", LOCK_ENV: "200:/c/key", "OTHER": "x"}
    # variables naming another process are not ours to hand on
    assert bound.handed_on({PARENT_ENV: "7", LOCK_ENV: "7:/c"}, parent=100, me=200) == {PARENT_ENV: "7", LOCK_ENV: "7:/c"}


def test_the_wrapper_becomes_its_command():
    """exec: the command runs under the wrapper's pid, with the variables handed on."""
    code = "import json, os; print(json.dumps([os.getpid(), os.environ['REPLICATION_PARENT_PID'], " \
           "os.environ['REPLICATION_RUN_LOCKED']]))"
    env = {**os.environ, "REPLICATION_PARENT_PID": str(os.getpid()), "REPLICATION_RUN_LOCKED": f"{os.getpid()}:/c/k"}
    p = subprocess.run([sys.executable, "-m", "replication.launch.bound", "--", sys.executable, "-c", code],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pid, parent, lock = json.loads(p.stdout)
    assert parent == str(pid) and lock == f"{pid}:/c/k"
    assert subprocess.run([sys.executable, "-m", "replication.launch.bound"], capture_output=True).returncode == 2


def test_provenance_reads_what_the_launcher_sets():
    from replication.provenance import LAUNCH_ENV, launch_provenance

    assert launch_env_mod.PREFIX == LAUNCH_ENV
    env = {**launch_env_mod.launch_env("slurm", ["n1", "n2"], job="4242_3"), "CUDA_VISIBLE_DEVICES": "0,1"}
    assert launch_provenance(16, env) == {"backend": "slurm", "job": "4242_3", "hosts": ["n1", "n2"],
                                          "world_size": 16, "devices": "0,1"}
    by_hand = launch_provenance(1, {})
    assert by_hand["backend"] is None and by_hand["job"] is None and len(by_hand["hosts"]) == 1
