"""The local backend's slots (issue 35.2): on CPU, runs × processes × threads ≤ cores; on GPUs,
disjoint slices of a run's size from a faked GPU list, a run waiting until one is free and
giving it back when it ends, whether it succeeded or failed. No trainer runs here: the
backend's process start is faked."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest

from replication.config import ConfigError
from replication.launch import Job, LauncherConfig, RunShape, make_backend
from replication.launch import local as launch_local
from replication.launch.slots import CpuSlots, GpuSlices, visible_gpus

TRAIN = ["python", "-m", "replication", "train", "--profile", "smoke", "--out", "/x"]


# ------------------------------------------------------------------------------- counting


@pytest.mark.parametrize("cores,processes,threads,at_once", [
    (2, 1, 1, 2),    # the reference machine: two 1-process 1-thread runs, as the grid always ran
    (2, 1, 2, 1),    # a 2-thread run has the machine to itself
    (2, 2, 1, 1),    # so has a 2-process run
    (16, 2, 2, 4),
    (16, 1, 3, 5),
    (2, 4, 4, 1),    # more than the machine: alone, never refused
])
def test_cpu_slots_keep_runs_times_processes_times_threads_within_the_cores(cores, processes, threads, at_once):
    backend = make_backend(LauncherConfig(cpus=cores, gpus=()))
    shape = RunShape(processes=processes, cpus_per_process=threads)
    assert backend.capacity(shape) == at_once
    slots = CpuSlots(cores)
    taken = [slots.take(slots.need(processes, threads)) for _ in range(at_once)]
    assert slots.free < slots.need(processes, threads) and sum(taken) <= cores


def test_max_runs_caps_the_slots():
    backend = make_backend(LauncherConfig(cpus=16, gpus=(), max_runs=3))
    assert backend.capacity(RunShape()) == 3


def test_the_default_counts_this_process_cores():
    backend = make_backend(None)
    assert backend.cpus.cores == len(os.sched_getaffinity(0))
    assert LauncherConfig.from_mapping({"gpus": "0, 1", "cpus": 4}).gpus == ("0", "1")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['gpu'\]"):
        LauncherConfig.from_mapping({"gpu": 1})
    with pytest.raises(ConfigError, match="launcher.cpus=0"):
        LauncherConfig(cpus=0)
    with pytest.raises(ConfigError, match="an id is listed twice"):
        LauncherConfig(gpus="1,1")
    with pytest.raises(ConfigError, match=r"launcher.backend='nope'.*known: \[.*'local'"):
        make_backend({"backend": "nope"})


# ------------------------------------------------------------------------------- GPU slices


def test_gpu_slices_are_disjoint_sized_and_aligned():
    pool = GpuSlices(["0", "1", "2", "3", "4", "5", "6", "7"])
    assert pool.capacity(2) == 4 and pool.capacity(3) == 2 and pool.capacity(8) == 1
    a, b = pool.take(2), pool.take(2)
    assert (a, b) == (("0", "1"), ("2", "3"))
    c = pool.take(1)
    d = pool.take(3)  # no aligned block of 3 is free: the lowest free ids
    assert c == ("4",) and len(d) == 3 and not set(d) & set(a + b + c)
    pool.give(a)
    assert pool.take(2) == ("0", "1")
    with pytest.raises(ValueError, match="a slice of 9 GPUs out of 8"):
        pool.take(9)


def test_a_run_waits_for_a_free_slice():
    pool = GpuSlices(["0", "1"])
    held = pool.take(2)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(pool.take(1)))
    waiter.start()
    time.sleep(0.3)
    assert got == []  # still waiting: every GPU is busy
    pool.give(held)
    waiter.join(5)
    assert got == [("0",)]


def test_visible_gpus_from_the_environment_or_nvidia_smi(tmp_path, monkeypatch):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == ("3", "5")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert visible_gpus({}) == ("0", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert make_backend(None).gpus.gpus == ("7",)
    assert make_backend({"gpus": [0, 1, 2]}).gpus.gpus == ("0", "1", "2")  # launcher.gpus wins


# ------------------------------------------------------------------------------- the backend


class FakeRun:
    """A trainer process that ends when told, with the given exit status."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode, self.done = pid, None, threading.Event()

    def end(self, code: int) -> None:
        self.returncode = code
        self.done.set()

    def wait(self, timeout=None):
        self.done.wait(timeout)
        return self.returncode

    def poll(self):
        return self.returncode

    def terminate(self):
        self.end(-15)

    kill = terminate


@pytest.fixture
def runs(monkeypatch) -> list:
    started: list = []

    def start(cmd, log, env):
        started.append((cmd, env, FakeRun(10_000 + len(started))))
        return started[-1][2]

    monkeypatch.setattr(launch_local, "start_process", start)
    return started


def _job(tmp_path: Path, name: str, shape: RunShape) -> Job:
    return Job(name=name, command=TRAIN, env={"KEEP": "1"}, shape=shape, log=tmp_path / f"{name}.log")


def test_concurrent_runs_get_disjoint_devices_and_give_them_back_on_success_and_failure(tmp_path, runs):
    backend = make_backend(LauncherConfig(gpus="0,1,2,3"))
    shape = RunShape(processes=2, gpus_per_process=1)
    assert backend.capacity(shape) == 2
    h1, h2 = backend.submit(_job(tmp_path, "a", shape)), backend.submit(_job(tmp_path, "b", shape))
    devices = [env["CUDA_VISIBLE_DEVICES"] for _, env, _ in runs]
    assert devices == ["0,1", "2,3"] and (h1.devices, h2.devices) == (("0", "1"), ("2", "3"))
    assert all(env["KEEP"] == "1" and env["REPLICATION_LAUNCH_BACKEND"] == "local" and "REPLICATION_LAUNCH_JOB"
               not in env for _, env, _ in runs)
    third: list = []
    waiter = threading.Thread(target=lambda: third.append(backend.submit(_job(tmp_path, "c", shape))))
    waiter.start()
    time.sleep(0.3)
    assert len(runs) == 2  # the third waits: no slice of 2 is free
    runs[1][2].end(1)  # b fails ...
    assert backend.wait(h2) == 1
    waiter.join(5)
    assert third and third[0].devices == ("2", "3")  # ... and its GPUs go to the next run
    runs[0][2].end(0)
    assert backend.wait(h1) == 0
    assert backend.gpus.busy == {"2", "3"}
    backend.cancel(third[0])
    assert backend.gpus.busy == set() and backend.running() == []


def test_a_cpu_run_on_a_gpu_machine_sees_no_gpu_and_a_too_big_run_is_refused(tmp_path, runs):
    backend = make_backend(LauncherConfig(gpus="0,1", cpus=2))
    h = backend.submit(_job(tmp_path, "cpu", RunShape()))
    assert runs[0][1]["CUDA_VISIBLE_DEVICES"] == "" and h.devices == ()
    runs[0][2].end(0)
    backend.wait(h)
    with pytest.raises(ConfigError, match=r"needs 4 GPU\(s\).*gives 2"):
        backend.submit(_job(tmp_path, "big", RunShape(processes=4, gpus_per_process=1)))
    with pytest.raises(ConfigError, match="one-node shapes"):
        backend.check(RunShape(nodes=2))
    cpu_only = make_backend(LauncherConfig(gpus=(), cpus=2))
    with pytest.raises(ConfigError, match=r"needs 1 GPU\(s\).*visible: none"):
        cpu_only.check(RunShape(gpus_per_process=1))


def test_cpu_slots_hold_a_third_run_until_one_ends(tmp_path, runs):
    backend = make_backend(LauncherConfig(cpus=2, gpus=()))
    shape = RunShape()  # 1 process x 1 thread
    h1, h2 = backend.submit(_job(tmp_path, "a", shape)), backend.submit(_job(tmp_path, "b", shape))
    assert "CUDA_VISIBLE_DEVICES" not in runs[0][1]  # a CPU machine's environment is left as it is
    third: list = []
    waiter = threading.Thread(target=lambda: third.append(backend.submit(_job(tmp_path, "c", shape))))
    waiter.start()
    time.sleep(0.3)
    assert len(runs) == 2 and backend.cpus.free == 0
    runs[0][2].end(0)
    backend.wait(h1)
    waiter.join(5)
    assert len(runs) == 3


def test_cancel_all_stops_the_waiting_and_the_running(tmp_path, runs):
    backend = make_backend(LauncherConfig(cpus=1, gpus=()))
    h = backend.submit(_job(tmp_path, "a", RunShape()))
    errors: list = []

    def queued():
        try:
            backend.submit(_job(tmp_path, "b", RunShape()))
        except BaseException as e:  # LaunchStopped is a KeyboardInterrupt
            errors.append(e)

    waiter = threading.Thread(target=queued)
    waiter.start()
    time.sleep(0.3)
    backend.cancel_all()
    waiter.join(5)
    assert runs[0][2].returncode == -15 and len(runs) == 1
    assert errors and isinstance(errors[0], launch_local.LaunchStopped)
    with pytest.raises(launch_local.LaunchStopped):
        backend.submit(_job(tmp_path, "c", RunShape()))
    assert backend.wait(h) == -15 and backend.running() == []
