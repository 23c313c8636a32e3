"""Multi-process training on CPU (gloo): 2 processes give the 1-process run of the same global batch.

Each check runs the real CLI in subprocesses — ``python -m replication train`` for one process,
``python -m torch.distributed.run --standalone --nproc_per_node 2 -m replication train`` (and once
``accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2``) for two — with
one thread per process, so both runs use the same kernels.

Tolerance and helpers: tests/dist_helpers.py. Faults of multi-process runs:
test_ddp_faults.py; the DDP collectives in-process: test_ddp.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from replication.train.distributed import RowShard, World, rollout_seeds, split_groups

from dist_helpers import CASES, REPO, _env, _jsonl, _launcher, _run, _same_run, _train_args

# ------------------------------------------------------------------------- the pieces, in-process
def test_split_groups_whole_balanced_deterministic():
    counts = np.array([8, 1, 1, 8, 2, 2, 6, 4])
    parts = split_groups(counts, 2)
    assert parts == split_groups(counts.copy(), 2)
    assert parts[0].start == 0 and parts[-1].stop == len(counts)
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))  # contiguous, whole groups
    loads = [int(counts[p].sum()) for p in parts]
    assert sum(loads) == counts.sum() and max(loads) - min(loads) <= counts.max()
    # every rank gets at least one group, even when one group holds most of the budget
    assert all(p.stop > p.start for p in split_groups(np.array([100, 1, 1, 1]), 4))
    with pytest.raises(ValueError, match="3 prompts cannot be split across 4"):
        split_groups(np.array([1, 2, 3]), 4)


def test_rollout_seeds_depend_on_prompt_not_position():
    a = rollout_seeds(0, "train", 3, ["x", "y", 7])
    b = rollout_seeds(0, "train", 3, [7, "x"])
    assert a[0] == b[1] and a[2] == b[0]
    assert rollout_seeds(0, "train", 4, ["x"])[0] != a[0]
    assert rollout_seeds(1, "train", 3, ["x"])[0] != a[0]
    assert rollout_seeds(0, "eval/add2", 3, ["x"])[0] != a[0]
    assert rollout_seeds(0, "train", 3, ["7"])[0] != a[2]  # "7" and 7 are different ids


def test_one_process_world_is_identity():
    w = World()
    assert not w.distributed and w.is_main
    assert w.sum(3.5) == 3.5 and w.gather("x") == ["x"]
    np.testing.assert_array_equal(w.concat(np.arange(3)), np.arange(3))
    np.testing.assert_array_equal(RowShard.whole(5).local(np.array([4, 0, 2])), [4, 0, 2])
    shard = RowShard(w, 10, 4, 7)
    np.testing.assert_array_equal(shard.local(np.array([1, 4, 6, 7, 9])), [0, 2])


def test_launch_checks_before_compute():
    from replication.config import ConfigError, load_profile
    from replication.train.distributed import check_world

    cfg = load_profile("smoke", {"rollout.prompts_per_step": 3})
    check_world(cfg, World(rank=0, size=3))
    with pytest.raises(ConfigError, match="rollout.prompts_per_step=3 is smaller than the 4 processes"):
        check_world(cfg, World(rank=0, size=4))
    assert World().on_main(lambda: 7) == 7


def test_engine_groups_for_tensor_parallel_vllm():
    """vLLM with tensor_parallel_size > 1 across training ranks: consecutive ranks share one
    engine and generate their union; the TP size must divide the ranks."""
    from replication.config import ConfigError, load_profile
    from replication.train.distributed import check_world, engine_group_size, generation_share

    cfg = load_profile("smoke", {"rollout.engine": "vllm", "rollout.vllm.tensor_parallel_size": 2})
    assert engine_group_size(cfg, World()) == 1  # one process: its own engine, whatever TP
    assert engine_group_size(cfg, World(rank=1, size=4)) == 2
    assert engine_group_size(load_profile("smoke", {}), World(rank=1, size=4)) == 1  # HF: per rank
    check_world(cfg, World(rank=0, size=4))
    with pytest.raises(ConfigError, match="does not divide the 3 processes"):
        check_world(cfg, World(rank=0, size=3))
    parts = split_groups(np.array([3, 1, 2, 2, 4, 1, 1, 2]), 4)
    assert [generation_share(parts, r, 2) for r in range(4)] == [
        slice(parts[0].start, parts[1].stop)] * 2 + [slice(parts[2].start, parts[3].stop)] * 2
    assert generation_share(parts, 3, 1) == parts[3]


def test_shared_engine_share_equals_own_generation(base_model_dir):
    """What a rank keeps of its engine group's union (select_groups) is what it would have
    generated alone: samples are seeded per prompt, whoever asks."""
    import torch

    from replication.models import load_policy
    from replication.rollout.base import SamplingConfig
    from replication.rollout.hf_engine import HFRolloutEngine

    model, tok = load_policy(base_model_dir, device="cpu")
    eng = HFRolloutEngine(model, tok)
    s = SamplingConfig(1.0, 1.0, 0, 6)
    ids, texts, answers = ["a", "b", "c", "d"], ["12+7=", "3*4=", "40+41=", "5+5="], ["19", "12", "81", "10"]
    counts = np.array([3, 1, 2, 2])
    seeds = rollout_seeds(0, "train", 0, ids)
    union = eng.generate(ids, texts, answers, counts, s, torch.Generator(), seeds=seeds)
    kept = union.select_groups(2, 4)
    alone = eng.generate(ids[2:], texts[2:], answers[2:], counts[2:], s, torch.Generator(), seeds=seeds[2:])
    kept.check_alignment()
    assert kept.prompt_ids == ["c", "d"] and kept.completions == alone.completions
    assert kept.row_answers == alone.row_answers and kept.counts.tolist() == [2, 2]
    m = kept.completion_mask.bool()
    width = alone.input_ids.shape[1]  # the union pads its prompts wider on the left
    assert torch.equal(kept.input_ids[:, -width:][alone.completion_mask.bool()], alone.input_ids[alone.completion_mask.bool()])
    assert torch.allclose(kept.old_logprobs[m], alone.old_logprobs[alone.completion_mask.bool()], atol=1e-5)
    with pytest.raises(ValueError, match="out of 4"):
        union.select_groups(3, 5)


def test_evaluator_counts_each_engine_group_once(monkeypatch):
    """With an engine shared by 2 ranks, the group evaluates one share and its result is
    counted once (not once per rank)."""
    from types import SimpleNamespace

    from replication.evaluate.runner import Evaluator

    calls = []

    class Engine:
        def generate(self, ids, inputs, answers, counts, sampling, generator=None, seeds=None, logprobs=True):
            calls.append(list(ids))
            rows = np.repeat(np.arange(len(ids)), counts)
            return SimpleNamespace(completions=["1"] * len(rows), row_answers=["1"] * len(rows),
                                   group_index=rows)

    class Verifier:
        def is_correct(self, completions, answers, sources):
            return [True] * len(completions)

    world = World(rank=1, size=2)
    monkeypatch.setattr(World, "gather_arrays", lambda self, part, lengths=None: [part, part])
    data = SimpleNamespace(ids=["p0", "p1", "p2"], inputs=["x"] * 3, answers=["1"] * 3, sources=["s"] * 3)
    ev = Evaluator(Engine(), {}, Verifier(), SimpleNamespace(), world=world, group_size=2)
    ev.seed = 0
    out = ev._correct_counts(data, 2, None, None, "eval/x/sample")
    assert calls == [["p0", "p1", "p2"]] and out.tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="does not divide"):
        Evaluator(Engine(), {}, Verifier(), SimpleNamespace(), world=World(rank=0, size=3), group_size=2)


def test_rollout_groups_do_not_depend_on_the_batch(base_model_dir):
    """The HF engine with per-prompt seeds: a group's samples are the same alone or batched."""
    import torch

    from replication.models import load_policy
    from replication.rollout.base import SamplingConfig
    from replication.rollout.hf_engine import HFRolloutEngine

    model, tok = load_policy(base_model_dir, device="cpu")
    eng = HFRolloutEngine(model, tok)
    s = SamplingConfig(1.0, 1.0, 0, 6)
    ids, texts = ["a", "b", "c"], ["12+7=", "3*4=", "40+41="]
    seeds = rollout_seeds(0, "train", 0, ids)
    whole = eng.generate(ids, texts, ["", "", ""], np.array([3, 1, 2]), s, torch.Generator(), seeds=seeds)
    parts = [eng.generate(ids[i:i + 1], texts[i:i + 1], [""], np.array([c]), s, torch.Generator(), seeds=seeds[i:i + 1])
             for i, c in enumerate([3, 1, 2])]
    assert whole.completions == [t for p in parts for t in p.completions]


def test_dry_run_prints_world_and_per_rank_plan(capsys):
    from replication.__main__ import main

    assert main(["dry-run", "--profile", "paper-vip", "--accelerate-config",
                 str(REPO / "configs/accelerate/ddp.yaml")]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["world_size"] == 8 and p["launch"].endswith("ddp.yaml")
    assert p["rollouts_per_rank_per_step"] == p["budget_per_step"] / 8
    assert p["rollouts_per_rank_per_step_max"] >= p["rollouts_per_rank_per_step"]
    assert "engine" in p and p["memory"]["per_gpu"]["total_gib"] > p["memory"]["per_gpu"]["train_states_gib"]
    assert main(["dry-run", "--profile", "paper-vip", "--world-size", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["rollouts_per_rank_per_step"] == p["budget_per_step"] / 2
    assert main(["dry-run", "--profile", "paper-vip", "--accelerate-config", "/no/such.yaml"]) == 2
    assert "--accelerate-config" in capsys.readouterr().err


def test_dry_run_fsdp_shards_the_training_states(capsys):
    """Under accelerate's FSDP config (or model.sharding=fsdp, paper-dynamo's own) a rank holds
    1/world of the training states; replicated, all of them — which for the 7B policy beside
    vLLM's share does not fit an 80 GiB GPU: refused in one line, planned on a larger one."""
    from replication.__main__ import main

    replicate = ["dry-run", "--profile", "paper-dynamo", "--set", "model.sharding=replicate", "--world-size", "8"]
    assert main(["dry-run", "--profile", "paper-dynamo", "--accelerate-config",
                 str(REPO / "configs/accelerate/fsdp.yaml")]) == 0
    f = json.loads(capsys.readouterr().out)
    assert main(replicate) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "training state" in err and "model.sharding=fsdp" in err and "> 80 GiB" in err
    assert main([*replicate, "--gpu-memory-gib", "320"]) == 0  # 113.5 GiB of state + 0.6 of the GPU
    d = json.loads(capsys.readouterr().out)
    assert f["sharding"] == "fsdp" and d["sharding"] == "replicate" and "error" not in f
    assert f["memory"]["per_gpu"]["train_states_gib"] == pytest.approx(
        d["memory"]["per_gpu"]["train_states_gib"] / 8, abs=0.1)


def test_fsdp_is_selected_by_config_or_accelerate(capsys):
    """model.sharding=fsdp, or accelerate's FSDP config (ACCELERATE_USE_FSDP), shards the policy;
    a bad value is refused by `validate` before compute."""
    from replication.__main__ import main
    from replication.train.fsdp import wants_fsdp

    assert wants_fsdp("fsdp", {}) and not wants_fsdp("replicate", {})
    assert wants_fsdp("replicate", {"ACCELERATE_USE_FSDP": "true"})
    assert main(["train", "--profile", "smoke", "--seed", "0", "--out", "/tmp/never",
                 "--set", "model.sharding=zero3"]) == 2
    assert "model.sharding" in capsys.readouterr().err


# ------------------------------------------------------------------------- real multi-process runs
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_equal_one(small_overrides, tmp_path, case):
    one, two = tmp_path / "one", tmp_path / "two"
    _run(1, _train_args(small_overrides, one, case))
    _run(2, _train_args(small_overrides, two, case))
    _same_run(one, two)
    # rank 0 alone wrote the run's files, once each
    assert len(_jsonl(two / "steps.jsonl")) == 3
    assert not list(two.glob("*rank*"))
    # how each ran is in metrics.json alone (provenance); config.json is the same
    p1, p2 = (json.loads((d / "metrics.json").read_text())["provenance"] for d in (one, two))
    assert (p1["world_size"], p1["sharding"]) == (1, "none") and (p2["world_size"], p2["sharding"]) == (2, "ddp")
    assert (one / "config.json").read_text() == (two / "config.json").read_text()
    # every rank's per-phase split, rank-indexed, in rank 0's step rows
    row = _jsonl(two / "steps.jsonl")[-1]
    for phase in ("generate", "old_logprob", "update", "sync", "wait"):
        assert len(row[f"rank_{phase}_seconds"]) == 2 and row[f"rank_{phase}_seconds"][0] == row[f"{phase}_seconds"]
    # comm: the listed figure stops before the gather that carries the lists
    assert all(t > 0 for t in row["rank_comm_seconds"]) and row["comm_seconds"] > row["rank_comm_seconds"][0]


@pytest.mark.slow
def test_two_processes_equal_one_over_two_ppo_epochs(small_overrides, tmp_path):
    """Two PPO epochs over two mini-batches: every epoch's deal is planned up front and the
    rows a rank trains in any of them are fetched once (train/row_dispatch.py); the run is the
    1-process run."""
    one, two = tmp_path / "one", tmp_path / "two"
    extra = ("--set", "rl.ppo_epochs=2", "--set", "rl.mini_batches=2")
    _run(1, _train_args(small_overrides, one, "vip", *extra))
    _run(2, _train_args(small_overrides, two, "vip", *extra))
    assert json.loads((two / "config.json").read_text())["rl"]["ppo_epochs"] == 2
    _same_run(one, two)


FSDP = ("--set", "model.sharding=fsdp")


@pytest.mark.slow
@pytest.mark.parametrize("case,extra", [
    ("dynamo+modulation", ()),
    ("rollout-gdro+prompt-gdro", ("--set", "rl.kl_coef=0.05")),  # the reference model is sharded too
    ("vip", ("--set", "optim.fused=true")),  # the fused AdamW over DTensor shards, both sides
])
def test_two_fsdp_processes_equal_one(small_overrides, tmp_path, case, extra):
    """The policy FSDP-sharded over 2 ranks (train/fsdp.py): same files as one process, within
    the same tolerance; the saved model is a full HF folder."""
    one, two = tmp_path / "one", tmp_path / "two"
    _run(1, _train_args(small_overrides, one, case, *extra))
    _run(2, _train_args(small_overrides, two, case, *extra, *FSDP))
    assert json.loads((two / "config.json").read_text())["model"]["sharding"] == "fsdp"
    _same_run(one, two)


@pytest.mark.slow
def test_two_fsdp_processes_kill9_then_resume(small_overrides, tmp_path):
    """kill -9 of a sharded 2-process job after its (gathered, full) checkpoint, then --resume:
    the uninterrupted sharded run's files."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    case, steps = "dynamo+modulation", 4
    extra = ("--set", "checkpoint_every=2", *FSDP)
    _run(2, _train_args(small_overrides, full, case, *extra, steps=steps))
    _kill9_after_checkpoint(_launcher(2) + _train_args(small_overrides, killed, case, *extra, steps=steps), killed)
    _run(2, _train_args(small_overrides, killed, case, *extra, "--resume", steps=steps))
    _same_run(full, killed)


@pytest.mark.slow
def test_two_fsdp_processes_bf16_kill9_then_resume(small_overrides, tmp_path):
    """The paper path's layout: a bf16 policy sharded over 2 ranks, stepped through float32 master
    weights (train/master_weights.py). The gathered checkpoint holds the float32 copies and
    moments; kill -9 after it, then --resume: the uninterrupted run's files."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    case, steps = "vip", 4
    extra = ("--set", "checkpoint_every=2", "--set", "model.dtype=bfloat16", *FSDP)
    _run(2, _train_args(small_overrides, full, case, *extra, steps=steps))
    _kill9_after_checkpoint(_launcher(2) + _train_args(small_overrides, killed, case, *extra, steps=steps), killed)
    state = _checkpoint_optimizer_state(killed)
    masters = [s["master"] for s in state.values() if "master" in s]
    assert masters and len(masters) == len(state)  # every parameter is bf16
    assert all(m.dtype == torch.float32 for m in masters)
    assert all(s["exp_avg_sq"].dtype == torch.float32 for s in state.values())
    _run(2, _train_args(small_overrides, killed, case, *extra, "--resume", steps=steps))
    _same_run(full, killed)


def _checkpoint_optimizer_state(run: Path) -> dict:
    """The optimizer's per-parameter state in ``run``'s checkpoint (FSDP: keyed by parameter name)."""
    from replication.train.checkpoint import load_checkpoint

    return load_checkpoint(run)["components"]["optimizer"]["state"]


def _kill9_after_checkpoint(cmd: list[str], out: Path) -> None:
    """Start a 2-process job and SIGKILL the launcher and both ranks once ``out/checkpoint`` exists."""
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "checkpoint").exists() and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks
    proc.wait()
    assert (out / "checkpoint").exists() and not (out / "metrics.json").exists()


@pytest.mark.slow
def test_two_processes_kill9_then_resume(small_overrides, tmp_path):
    """kill -9 of the whole 2-process job after a checkpoint, then a 2-process --resume: the
    files of the uninterrupted (1-process) run."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    case, steps = "rollout-gdro+prompt-gdro", 4
    extra = ("--set", "checkpoint_every=2")
    _run(1, _train_args(small_overrides, full, case, *extra, steps=steps))
    _kill9_after_checkpoint(_launcher(2) + _train_args(small_overrides, killed, case, *extra, steps=steps), killed)
    _run(2, _train_args(small_overrides, killed, case, *extra, "--resume", steps=steps))
    _same_run(full, killed)


@pytest.mark.slow
def test_two_processes_refuse_an_existing_run_folder(tmp_path):
    """Rank 0's run-folder refusal (no --overwrite) stops both ranks before any model is loaded."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text("{}")
    p = subprocess.run(_launcher(2) + ["train", "--profile", "smoke", "--seed", "0", "--out", str(out)],
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "already holds a run" in p.stderr
    assert (out / "metrics.json").read_text() == "{}"


@pytest.mark.slow
def test_accelerate_launch_ddp_config(small_overrides, tmp_path):
    """``accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2`` on a CPU
    machine starts two ranks through torchrun (RANK/WORLD_SIZE set); the trainer picks gloo."""
    pytest.importorskip("accelerate")
    one, two = tmp_path / "one", tmp_path / "two"
    _run(1, _train_args(small_overrides, one, "vip", steps=2))
    _run(2, _train_args(small_overrides, two, "vip", steps=2), how="accelerate")
    _same_run(one, two)


@pytest.mark.slow
def test_accelerate_launch_fsdp_config(small_overrides, tmp_path):
    """``accelerate launch --config_file configs/accelerate/fsdp.yaml --num_processes 2`` on CPU:
    accelerate's FSDP environment selects the sharded policy (recorded in config.json), and the
    run equals the 1-process one."""
    pytest.importorskip("accelerate")
    one, two = tmp_path / "one", tmp_path / "two"
    _run(1, _train_args(small_overrides, one, "vip", steps=2))
    _run(2, _train_args(small_overrides, two, "vip", steps=2), how="accelerate-fsdp")
    assert json.loads((two / "config.json").read_text())["model"]["sharding"] == "fsdp"
    _same_run(one, two)
