"""The upper-bound arm (issue 20.9): VIP told p by a probe of extra rollouts that stay outside the
budget and the loss (replication/allocation/vip_probe.py, replication/train/probe.py).

Allocator checks run on numbers alone; loop checks run ``train_step`` on the smoke profile's
committed base model (results/base-model), 8 prompts x 4 rollouts, seconds each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from replication.allocation import make_allocator

ROOT = Path(__file__).resolve().parents[2]
BASE_MODEL = ROOT / "results" / "base-model"
Q, NBAR = 8, 4


# ----------------------------------------------------------------------------- the allocator


def _probe_alloc(m: int = 16, **kw):
    return make_allocator("vip-probe", probe_rollouts=m, estimator="rloo", lower=4, upper=24, **kw)


def test_told_p_zero_or_one_gets_the_lower_bound():
    alloc = _probe_alloc(16)
    ids = ["never", "a", "b", "always", "c", "d"]
    successes = np.array([0, 4, 8, 16, 12, 6])
    alloc.tell_probe(ids, successes, 16)
    counts = alloc.plan(ids, 8 * len(ids))
    assert counts.sum() == 48
    assert counts[0] == counts[3] == 4  # p = 0 and p = 1: no gradient signal, the lower bound
    assert np.all(counts[[1, 2, 4, 5]] > 4)
    np.testing.assert_allclose(alloc.plan_details()["predicted_p"], successes / 16)
    assert alloc.last_mode == "vip"  # no cold start: told p from the first plan


def test_allocation_is_vips_program_on_the_told_p():
    """The same counts as the oracle (VIP's convex program + integer solver) given p = k/m."""
    ids = list(range(10))
    k = np.array([1, 2, 3, 5, 7, 8, 0, 16, 11, 13])
    probe = _probe_alloc(16)
    probe.tell_probe(ids, k, 16)
    oracle = make_allocator("oracle", success_probability={i: k[i] / 16 for i in ids}, estimator="rloo",
                            lower=4, upper=24)
    np.testing.assert_array_equal(probe.plan(ids, 80), oracle.plan(ids, 80))


def test_plan_needs_a_fresh_probe_of_those_prompts():
    alloc = _probe_alloc(4)
    with pytest.raises(ValueError, match="no probe estimate for prompt id 'x'"):
        alloc.plan(["x", "y"], 8)
    alloc.tell_probe(["x", "y"], [1, 3], 4)
    alloc.plan(["x", "y"], 8)
    with pytest.raises(ValueError, match="no probe estimate"):  # one probe, one plan
        alloc.plan(["x", "y"], 8)
    with pytest.raises(ValueError, match=r"successes must be integers in \[0, trials=4\]"):
        alloc.tell_probe(["x", "y"], [1, 5], 4)
    with pytest.raises(ValueError, match="successes has shape"):
        alloc.tell_probe(["x", "y"], [1], 4)
    with pytest.raises(ValueError, match="probe_rollouts must be an integer >= 1"):
        _probe_alloc(0)


def test_observe_keeps_no_predictor_state():
    """Told p, the arm learns nothing from the training rollouts (no GP in it)."""
    alloc = _probe_alloc(4)
    assert alloc.predictor is None and alloc.wants_probe == 4
    before = alloc.state_dict()["state"]
    alloc.tell_probe([0, 1], [1, 2], 4)
    counts = alloc.plan([0, 1], 10)
    alloc.observe([0, 1], counts, np.ones(int(counts.sum())))
    assert alloc.state_dict()["state"] == {"plans": before["plans"] + 1}


# ----------------------------------------------------------------------------- the loop


def _cfg(allocator: str, m: int | None = None, seed: int = 0):
    from replication.config import load_profile

    opts = {} if m is None else {"probe_rollouts": m}
    return load_profile("smoke", {
        "model.path": str(BASE_MODEL), "model.threads": 1, "seed": seed,
        "allocator.name": allocator, "allocator.options": opts, "rl.estimator": "rloo",
        "rollout.prompts_per_step": Q, "rollout.mean_rollouts": NBAR, "rollout.lower": 2, "rollout.upper": 8,
    })


def _components(cfg):
    from replication.train.components import build_components

    if not BASE_MODEL.exists():
        pytest.skip(f"{BASE_MODEL} missing (dvc pull / dvc repro base_model)")
    return build_components(cfg)


def _without_timings(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.endswith("_seconds")}


def test_budget_stays_c_and_the_probe_cost_is_logged_apart():
    from replication.train.loop import train_step

    cfg = _cfg("vip-probe", m=6)
    c = _components(cfg)
    seen = []
    observe = c.allocator.observe
    c.allocator.observe = lambda ids, counts, rewards, **kw: (seen.append((counts, rewards)),
                                                              observe(ids, counts, rewards, **kw))
    for step in range(2):
        row, prompts = train_step(cfg, c, step)
        assert row["rollouts"] == sum(p["n"] for p in prompts) == cfg.budget == Q * NBAR
        assert row["probe_rollouts"] == 6 * Q  # beside the budget, never in it
        assert row["probe_seconds"] > 0 and {"generate_seconds", "update_seconds"} <= set(row)
        assert 0 <= row["probe_accuracy"] <= 1
        assert row["step_seconds"] >= row["probe_seconds"] + row["generate_seconds"]
        # the allocation used the probe's p = k/6, and observe saw the budget's rollouts only
        assert all(p["predicted_p"] * 6 == round(p["predicted_p"] * 6) for p in prompts)
        assert len(seen) == step + 1  # one observe a step: the training rollouts'
        counts, rewards = seen[-1]
        assert int(np.sum(counts)) == len(rewards) == cfg.budget
        # the logged reward is the budget rollouts' mean, not the probe's
        succ = sum(p["successes"] for p in prompts)
        assert row["accuracy"] == succ / cfg.budget


def test_probe_rollouts_never_reach_the_update():
    """With the allocation fixed, probing 2 or 12 samples per prompt — or not probing at all —
    gives the same update, bit for bit: the probe changes nothing but what the allocator is told."""
    from replication.train.loop import train_step

    fixed = np.array([2, 6, 3, 5, 4, 4, 2, 6])
    runs = {}
    for name, allocator, m in (("m2", "vip-probe", 2), ("m12", "vip-probe", 12), ("none", "uniform", None)):
        cfg = _cfg(allocator, m)
        c = _components(cfg)
        plan = c.allocator.plan

        def fixed_plan(ids, budget, plan=plan):
            plan(ids, budget)  # the real plan: the probe is told and consumed as usual
            return fixed.copy()

        c.allocator.plan = fixed_plan
        row, prompts = train_step(cfg, c, 0)
        runs[name] = (row, prompts, [p.detach().clone() for p in c.model.parameters()])
    assert runs["m2"][0]["probe_rollouts"] == 2 * Q and runs["m12"][0]["probe_rollouts"] == 12 * Q
    assert "probe_rollouts" not in runs["none"][0]
    for name in ("m12", "none"):
        a, b = runs["m2"], runs[name]
        for k in ("loss", "pg_loss", "grad_norm", "reward", "accuracy", "counts_hist", "n_tokens"):
            assert a[0][k] == b[0][k], (name, k)
        assert [(p["n"], p["successes"], p["loss"]) for p in a[1]] == [(p["n"], p["successes"], p["loss"])
                                                                       for p in b[1]]
        assert all(torch.equal(x, y) for x, y in zip(a[2], b[2])), name


def test_same_seed_same_probe_and_run():
    from replication.train.loop import train_step

    out = []
    for _ in range(2):
        cfg = _cfg("vip-probe", m=4, seed=3)
        c = _components(cfg)
        out.append([(_without_timings(r), p) for r, p in (train_step(cfg, c, s) for s in range(2))])
    assert out[0] == out[1]


def test_probe_draws_its_own_seeded_stream():
    """The probe's seeds are the loop's rollout_seeds with the stream "probe", not "train"."""
    from replication.train.distributed import rollout_seeds
    from replication.train.probe import PROBE_STREAM

    ids = ["a", "b", "c"]
    probe, train = rollout_seeds(0, PROBE_STREAM, 5, ids), rollout_seeds(0, "train", 5, ids)
    assert PROBE_STREAM == "probe" and not np.intersect1d(probe, train).size
    np.testing.assert_array_equal(probe, rollout_seeds(0, "probe", 5, ids))


# ----------------------------------------------------------------------------- two processes


def _train(nproc: int, out: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    launch = [sys.executable, "-m", "replication"] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), "-m",
        "replication"]
    args = ["train", "--profile", "smoke", "--seed", "1", "--out", str(out), "--no-progress", "--max-steps", "2",
            "--allocator", "vip-probe", "--estimator", "rloo", "--set", "rollout.lower=2",
            "--set", 'allocator.options={"probe_rollouts": 6}', "--set", f"model.path={BASE_MODEL}",
            "--set", "model.threads=1"]
    p = subprocess.run(launch + args, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_probe_what_one_does(tmp_path):
    """Each rank probes its share of the prompts; the gathered successes, hence the allocation,
    are the 1-process ones."""
    if not BASE_MODEL.exists():
        pytest.skip(f"{BASE_MODEL} missing")
    one, two = _train(1, tmp_path / "one"), _train(2, tmp_path / "two")
    assert [(p["prompt_id"], p["n"], p["predicted_p"]) for p in one] == \
           [(p["prompt_id"], p["n"], p["predicted_p"]) for p in two]
