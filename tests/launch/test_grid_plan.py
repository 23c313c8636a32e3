"""``dry-run --paper``: a paper's grid at a scale, placed by the backend's own code, checked for
memory per GPU before anything runs, with a GPU-hours estimate (issue 35.3). CPU only: the GPUs
are ids, nothing starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from replication.__main__ import main
from replication.arms import select_arms
from replication.config import ConfigError, load_profile
from replication.launch import Job, LauncherConfig, RunShape
from replication.launch import local as launch_local
from replication.launch.gpu_hours import VIP_1_5B, gpu_hours
from replication.launch.grid_plan import plan_grid
from replication.launch.grid_plan_text import render
from replication.launch.local import LocalBackend
from replication.launch.memory import gpu_memory
from replication.launch.placement import place_local, sbatch_flags
from replication.launch.slurm import SlurmBackend
from replication.orchestration.run_cache import DEFAULT_CACHE, run_key, train_command
from replication.stage_params import load_params, section_at_scale

REPO = Path(__file__).resolve().parents[2]
SIXTEEN = ",".join(str(i) for i in range(16))
TRAIN = [sys.executable, "-m", "replication", "train", "--profile", "smoke", "--seed", "0", "--out", "/x"]


@pytest.fixture(scope="module")
def vip16():
    """The vip grid at paper scale on 16 GPUs, from the repository's params.yaml."""
    return plan_grid("vip", scale="paper", params_file=REPO / "params.yaml", launcher="local", gpus=SIXTEEN)


def _section(paper: str, scale: str) -> dict:
    params = {**load_params(REPO / "params.yaml"), "scale": scale}
    return section_at_scale(params, paper, REPO / "params.yaml")


def _params_file(tmp_path: Path, edit) -> Path:
    params = load_params(REPO / "params.yaml")
    edit(params)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_vip_paper_grid_on_16_gpus_runs_two_8_gpu_slices_then_waves(vip16):
    sec = _section("vip", "paper")
    arms, seeds = select_arms(sec)
    assert vip16.profile == "paper-vip" and len(vip16.runs) == len(arms) * len(seeds)
    assert [(r.arm, r.seed) for r in vip16.runs] == [(a.name, s) for s in seeds for a in arms]  # run_grid's order
    assert vip16.at_once == 2 and vip16.waves == -(-len(vip16.runs) // 2)
    slices = {tuple(str(i) for i in range(8)), tuple(str(i) for i in range(8, 16))}
    for wave in range(1, vip16.waves + 1):
        runs = [r for r in vip16.runs if r.wave == wave]
        assert {r.devices for r in runs} <= slices and len({r.devices for r in runs}) == len(runs)  # disjoint
        ports = [r.port for r in runs]
        assert len(set(ports)) == len(ports) and all(p for p in ports)
    for r in vip16.runs:
        assert r.visible == ",".join(r.devices) and len(r.devices) == 8
        flags = r.command[r.command.index("torch.distributed.run") + 1:]
        assert flags[flags.index("--nproc-per-node") + 1] == "8"
        assert flags[flags.index("--rdzv-endpoint") + 1] == f"127.0.0.1:{r.port}"
    assert vip16.runs[2].devices == vip16.runs[0].devices  # wave 2 reuses wave 1's slices


def test_each_command_is_the_stage_s_train_command_behind_the_backend_s_prefix(vip16):
    sec = _section("vip", "paper")
    arms, _ = select_arms(sec)
    overrides = {a.name: a.overrides for a in arms}
    for r in vip16.runs[:3]:
        key = run_key("paper-vip", overrides[r.arm], r.seed, sec.get("steps"), shape=sec["shape"])[0]
        train = train_command("paper-vip", overrides[r.arm], r.seed, sec.get("steps"), DEFAULT_CACHE / key,
                              resume=False, overwrite=True)
        assert r.key == key and r.command[-len(train) + 3:] == train[3:]


def test_plan_commands_equal_what_the_local_backend_launches(vip16, tmp_path, monkeypatch):
    """The same run submitted to the local backend (its process faked, its port the plan's) starts
    exactly the planned command on the planned slice."""
    started: list = []

    class Running:
        pid = 4242

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(launch_local, "start_process", lambda cmd, log, env: started.append((cmd, env)) or Running())
    for i, r in enumerate(vip16.runs[:2]):  # wave 1, in the grid's order: the runs before hold their slices
        backend = LocalBackend(LauncherConfig(gpus=SIXTEEN))
        for earlier in vip16.runs[:i]:
            backend.gpus.busy.update(earlier.devices)
        monkeypatch.setattr(backend.ports, "take", lambda port=r.port: port)
        backend.submit(Job(r.arm, r.command, {}, r.shape, tmp_path / "log"))
        command, env = started[-1]
        assert command == r.command and env["CUDA_VISIBLE_DEVICES"] == r.visible


def test_place_local_fills_free_slices_then_queues_waves_on_them():
    backend = LocalBackend(LauncherConfig(gpus="0,1,2,3"))
    two = RunShape(processes=2, gpus_per_process=1)
    jobs = [Job(f"r{i}", TRAIN, {}, two, Path("/dev/null")) for i in range(5)]
    placed = place_local(backend, jobs, at_once=8)
    assert [p.wave for p in placed] == [1, 1, 2, 2, 3]
    assert [p.devices for p in placed] == [("0", "1"), ("2", "3")] * 2 + [("0", "1")]
    assert backend.gpus.busy == set() and backend.ports.held == set()  # nothing stays held
    command, _ = backend.placed(jobs[0], {"devices": placed[0].devices, "cores": 0, "port": placed[0].port})
    assert placed[0].command == command
    assert [p.wave for p in place_local(backend, jobs, at_once=1)] == [1, 2, 3, 4, 5]  # workers: 1


def test_slurm_plan_lists_each_run_s_sbatch_resources(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)

    def edit(p):
        p["vip"]["scales"]["paper"]["seeds"] = [0]
        p["launcher"] = {"backend": "slurm", "options": {"partition": "gpu", "time_min": 30}}

    plan = plan_grid("vip", scale="paper", params_file=_params_file(tmp_path, edit))
    assert plan.backend == "slurm" and plan.at_once == len(plan.runs) and plan.waves == 1
    want = sbatch_flags(SlurmBackend(LauncherConfig(backend="slurm", options={"partition": "gpu", "time_min": 30}))
                        .parameters(plan.runs[0].shape))
    for r in plan.runs:
        assert r.sbatch == want
        assert r.command[1:4] == ["-m", "replication", "train"]  # the job adds torchrun itself
    assert {"--nodes=1", "--gpus-per-node=8", "--cpus-per-task=16", "--time=720", "--mem=491520MB",
            "--partition=gpu"} <= set(want)  # the shape's time limit wins over the option's default
    assert "sbatch --nodes=1" in render(plan)


def test_gpu_hours_are_anchored_and_scale_with_steps_and_size():
    vip = load_profile("paper-vip")
    h = gpu_hours(vip)
    assert 0 < h and gpu_hours(vip, steps=2 * vip.steps) == pytest.approx(2 * h)
    at_anchor = load_profile("paper-vip", {"rollout.sampling.max_new_tokens": 4096 - 512})
    assert gpu_hours(at_anchor) == pytest.approx(VIP_1_5B.gpu_hours) == pytest.approx(3695 * 8 / 3600)
    assert gpu_hours(load_profile("paper-dynamo")) > 100 * h  # 7B, 4x the rollouts, 2000 steps
    assert gpu_hours(load_profile("paper-vip", {"model.path": "/no/such/model"})) is None  # size unknown


def test_totals_add_up_the_runs(vip16):
    t = vip16.totals()
    assert t["runs"] == len(vip16.runs) and t["gpus_per_run"] == 8 and t["waves"] == vip16.waves
    assert t["gpu_hours"] == pytest.approx(sum(r.gpu_hours for r in vip16.runs), abs=0.1) and t["gpu_hours"] > 0
    assert t["wall_hours_grid"] == pytest.approx(vip16.waves * t["wall_hours_per_run"], abs=0.2)
    text = render(vip16)
    assert f"totals: {len(vip16.runs)} runs x 8 GPU(s), 2 at once, {vip16.waves} wave(s); GPU-hours" in text
    assert "3695 s" in text and "estimate" in text and "wave 2" in text
    assert json.loads(json.dumps(vip16.as_dict()))["totals"] == t


def test_paper_profiles_fit_80gb_gpus_sharded():
    """With float32 master weights (16 B/parameter, train/master_weights.py) every paper profile
    trains FSDP-sharded, as the official code's verl + FSDP: replicated, the 7B state does not fit
    at all, and the 1.5B/1.7B states leave too little beside vLLM's share for the recompute pass."""
    for name in ("paper-vip", "paper-dynamo", "paper-gdro"):
        cfg = load_profile(name)
        assert cfg.model.sharding == "fsdp" and cfg.optim.master_weights, name
        mem = gpu_memory(cfg, world=8, gpu_gib=80)
        assert mem.fits and mem.total_gib <= 80 and mem.pass_warning(name) is None, name
        assert mem.bytes_per_parameter == 16, name
    replicated = gpu_memory(load_profile("paper-dynamo", {"model.sharding": "replicate"}), world=8, gpu_gib=80)
    why = replicated.shortfall("paper-dynamo")
    assert not replicated.fits and why.startswith("paper-dynamo: 113.5 GiB of training state per GPU")
    assert "16 B/parameter" in why and "40.0 GiB vLLM share" in why and "> 80 GiB" in why and "model.sharding=fsdp" in why
    for name in ("paper-vip", "paper-gdro"):
        replicated = gpu_memory(load_profile(name, {"model.sharding": "replicate"}), world=8, gpu_gib=80)
        assert "old-log-prob recompute" in replicated.pass_warning(name), name


def test_the_training_state_per_parameter():
    from replication.launch.memory import train_state_bytes

    assert train_state_bytes("bfloat16") == 16  # bf16 weight + grad, float32 copy + two moments
    assert train_state_bytes("bfloat16", master_weights=False) == 8
    assert train_state_bytes("float32") == train_state_bytes("float32", master_weights=False) == 16
    plain = gpu_memory(load_profile("paper-vip", {"optim.master_weights": False}), world=8, gpu_gib=80)
    assert plain.bytes_per_parameter == 8
    assert plain.train_state_gib == pytest.approx(gpu_memory(load_profile("paper-vip"), 8, 80).train_state_gib / 2)


def test_vllm_share_must_hold_its_weights_and_one_sequence():
    cfg = load_profile("paper-dynamo", {"rollout.vllm.gpu_memory_utilization": 0.15})
    why = gpu_memory(cfg, world=8, gpu_gib=80).shortfall("paper-dynamo")
    assert why.startswith("paper-dynamo: vLLM's share of 12.0 GiB per GPU cannot hold its 14.2 GiB of weights")


def test_a_grid_that_cannot_fit_is_refused_in_one_line_before_any_placement(capsys):
    assert main(["dry-run", "--paper", "vip", "--scale", "paper", "--gpus", SIXTEEN, "--gpu-memory-gib", "7"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: paper-vip: ") and "> 7 GiB" in err and "training state" in err
    assert main(["dry-run", "--profile", "paper-vip", "--gpu-memory-gib", "7"]) == 2  # one profile: the same rule
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: paper-vip: ")


def test_the_cli_refuses_mixed_forms_and_unknown_papers(capsys):
    for argv, words in ((["--paper", "nope"], "--paper: 'nope' is not a paper"),
                        (["--paper", "vip", "--world-size", "8"], "--world-size"),
                        (["--scale", "paper"], "add --paper"),
                        (["--paper", "vip", "--scale", "huge"], "scale: 'huge' is not a scale")):
        assert main(["dry-run", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, (argv, err)


def test_small_scale_on_cpu_plans_cpu_slots(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)

    def edit(p):
        p["vip"]["seeds"] = [0, 1]
        p["launcher"] = {"backend": "local", "gpus": [], "cpus": 4}

    path = _params_file(tmp_path, edit)
    plan = plan_grid("vip", scale="small", params_file=path)
    arms, _ = select_arms(_section("vip", "small"))
    assert plan.profile == "default" and len(plan.runs) == 2 * len(arms)
    assert all(not r.devices and r.visible is None and r.cores == r.shape.cpus_per_node for r in plan.runs)
    assert all(r.command[1:4] == ["-m", "replication", "train"] for r in plan.runs)  # one process: no torchrun
    assert plan.at_once == min(plan.workers, 4 // plan.runs[0].cores)
    assert all(r.memory is None and r.gpu_hours is None for r in plan.runs)
    assert main(["dry-run", "--paper", "vip", "--scale", "small", "--params", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 CPU core(s)" in out and "no GPU-hours (CPU runs)" in out and "CUDA_VISIBLE_DEVICES" not in out


def test_a_local_machine_without_the_gpus_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    path = _params_file(tmp_path, lambda p: p.update(launcher={"backend": "local", "gpus": "0,1,2,3"}))
    with pytest.raises(ConfigError, match="a run needs 8 GPU"):
        plan_grid("dynamo", scale="paper", params_file=path)
