"""A run's shape enters its key; where it is placed never does (issue 35.2).

The shape a config declares today is the one the key always recorded (1 node, 1 process, a GPU
per process on cuda), so the committed keys do not move; an override of the shape is another
run; two placements of the same run (backends, GPU slices, torchrun ports) write the same key
record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replication.config import ConfigError, load_profile
from replication.launch import LauncherConfig, RunShape, make_backend
from replication.launch import local as launch_local
from replication.orchestration import run_cache
from replication.store.run_key import normalized_command

OVER = {"allocator.name": "uniform"}


def test_the_shape_a_config_declares():
    cpu = RunShape.of(load_profile("smoke", {}))
    assert (cpu.nodes, cpu.processes, cpu.gpus_per_process, cpu.cpus_per_process) == (1, 1, 0, 1)
    gpu = RunShape.of(load_profile("smoke", {"model.device": "cuda", "model.threads": 4}))
    assert (gpu.gpus_per_process, gpu.cpus_per_process) == (1, 4)
    big = RunShape.of(load_profile("smoke", {}), {"processes": 8, "memory_gb": 64, "time_limit_min": 600})
    assert (big.world_size, big.cpus_per_node, big.memory_gb) == (8, 8, 64)
    # the key's part is what the run key has always recorded: committed keys stay as they are
    assert run_cache.run_shape(load_profile("smoke", {})) == {"nodes": 1, "processes": 1, "gpus_per_process": 0}
    assert cpu.key() == run_cache.run_key("smoke", OVER, 0, 2)[1]["inputs"]["shape"]


@pytest.mark.parametrize("override,match", [
    ({"procs": 2}, r"unknown field\(s\) \['procs'\]"),
    ({"processes": 0}, r"shape.processes=0"),
    ({"gpus_per_process": -1}, r"shape.gpus_per_process=-1"),
    ({"memory_gb": "lots"}, r"shape.memory_gb='lots'"),
])
def test_a_bad_shape_is_refused_naming_the_field(override, match):
    with pytest.raises(ConfigError, match=match):
        RunShape.of(load_profile("smoke", {}), override)


def test_a_changed_shape_changes_the_key_and_resources_do_not():
    key = run_cache.run_key("smoke", OVER, 0, 2)[0]
    assert run_cache.run_key("smoke", OVER, 0, 2, shape={"processes": 2})[0] != key
    assert run_cache.run_key("smoke", OVER, 0, 2, shape={"nodes": 2})[0] != key
    assert run_cache.run_key("smoke", OVER, 0, 2, shape={"gpus_per_process": 1})[0] != key
    # memory and time limit are a scheduler's business: the same numbers come out
    assert run_cache.run_key("smoke", OVER, 0, 2, shape={"memory_gb": 32, "time_limit_min": 60})[0] == key


class _Exited:
    """A trainer that has finished with 0 (the run's files are written by the fake start)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, 0

    def wait(self, timeout=None) -> int:
        return 0

    poll = wait


def _fake_start(seen: list):
    from evidence.evidence_helpers import synthetic_run

    def start(cmd, log, env):
        seen.append((cmd, env))
        out = Path(cmd[cmd.index("--out") + 1])
        record = json.loads((out / "key.json").read_text())
        synthetic_run(out, seed=record["inputs"]["config"]["seed"], steps=2, record=record)
        return _Exited(-len(seen))

    return start


@pytest.mark.parametrize("over,shape,placements,devices", [
    (OVER, None, [LauncherConfig(gpus=(), cpus=2), LauncherConfig(gpus=("0",), cpus=16)], [None, ""]),
    ({**OVER, "model.device": "cuda"}, {"processes": 2},
     [LauncherConfig(gpus=("0", "1", "2", "3")), LauncherConfig(gpus="2,3")], ["0,1", "2,3"]),
], ids=["cpu", "2-gpu torchrun"])
def test_two_placements_write_the_same_key(tmp_path, monkeypatch, over, shape, placements, devices):
    """The same run placed on other cores, other GPUs or another rendezvous port is one key: the
    key record ensure_run writes before the start, and the command from `train` on, are equal."""
    seen: list = []
    monkeypatch.setattr(launch_local, "start_process", _fake_start(seen))
    records = []
    for i, placement in enumerate(placements):
        run_dir = run_cache.ensure_run("smoke", over, 0, 2, tmp_path / f"cache{i}",
                                       launcher=make_backend(placement), shape=shape)
        records.append(json.loads((run_dir / "key.json").read_text()))
    assert records[0] == records[1]
    (cmd0, env0), (cmd1, env1) = seen
    assert normalized_command(cmd0) == normalized_command(cmd1) == records[0]["inputs"]["command"]
    assert [env0.get("CUDA_VISIBLE_DEVICES"), env1.get("CUDA_VISIBLE_DEVICES")] == devices
    assert env0["REPLICATION_LAUNCH_BACKEND"] == "local"
    if shape:  # each on its own rendezvous port
        assert "torch.distributed.run" in cmd0 and cmd0 != cmd1


def test_the_launcher_is_no_notebook_parameter_and_no_key_input():
    """run_key takes no launcher at all: nothing about placement can reach the key."""
    import inspect

    assert "launcher" not in inspect.signature(run_cache.run_key).parameters
    assert set(run_cache.run_key("smoke", OVER, 0, 2)[1]["inputs"]) == {
        "config", "steps", "command", "shape", "code", "inputs", "revisions"}
