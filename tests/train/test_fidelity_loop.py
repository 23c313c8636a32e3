"""Training-loop wiring of issue 9: the sampler's epoch boundary reaches allocator.end_epoch(),
Prompt-GDRO's own time is logged, and the per-prompt loss with/without the KL term (GDRO row #4)."""

from __future__ import annotations

import json

import numpy as np

from replication.config import load_profile
from replication.train.loop import train

TINY_POOL = {"train_sizes": {"add2": 16}, "heldout_size": 8, "heldout_levels": ["add2"]}


def _cfg(small_overrides, **over):
    o = {**small_overrides, "task.options": dict(TINY_POOL), "eval.prompts_per_set": 4, **over}
    return load_profile("default", o)


def _rows(out, name):
    return [json.loads(line) for line in (out / name).read_text().splitlines()]


def test_sampler_epoch_boundary_calls_end_epoch(small_overrides, tmp_path, monkeypatch):
    from replication.allocation.dynamo import DynamoDRA

    calls = []
    original = DynamoDRA.end_epoch
    monkeypatch.setattr(DynamoDRA, "end_epoch", lambda self: (calls.append(1), original(self))[1])
    # 16 prompts, 8 per step: steps 0-1 are epoch 0, steps 2-3 epoch 1 -> two boundaries crossed.
    cfg = _cfg(small_overrides, **{"allocator.name": "dynamo",
                                   "allocator.options": {"lower": 2, "upper": 8, "refresh": "epoch",
                                                         "uniform_first_epoch": True}})
    train(cfg, tmp_path, progress=False)
    assert len(calls) == 2


def test_prompt_gdro_time_logged_and_loss_with_or_without_kl(small_overrides, tmp_path):
    # The default small pool mixes easy and hard levels: step 0 has mixed groups, so the policy
    # moves after the first mini-batch and the KL to the reference becomes positive.
    base = {**small_overrides, "eval.prompts_per_set": 4, "rl.prompt_weights": "gdro", "rl.kl_coef": 0.05,
            "rl.mini_batches": 4, "steps": 1, "optim.lr": 1e-3, "rollout.prompts_per_step": 16}
    with_kl, without = tmp_path / "kl", tmp_path / "nokl"
    train(load_profile("default", base), with_kl, progress=False)
    train(load_profile("default", {**base, "rl.prompt_loss_kl": False}), without, progress=False)
    step = _rows(with_kl, "steps.jsonl")[0]
    assert step["prompt_weights_seconds"] > 0
    a = np.array([r["loss"] for r in _rows(with_kl, "prompts.jsonl")])
    b = np.array([r["loss"] for r in _rows(without, "prompts.jsonl")])
    # Same seed, same update: the only difference is β·KL (≥ 0, > 0 after the first mini-batch).
    assert np.all(a - b >= -1e-9) and (a - b).sum() > 0


def test_sleeping_engine_sleeps_through_the_update(small_overrides, tmp_path, monkeypatch):
    """rollout.vllm.enable_sleep_mode (the engine's ``sleeps_during_update``): each step goes
    generate -> sleep -> (update) -> wake_up -> sync_weights, so the weights are reloaded into
    an awake engine. The HF engine stands in for vLLM, recording the calls."""
    from replication.rollout.hf_engine import HFRolloutEngine

    calls = []
    for name in ("generate", "sync_weights"):
        original = getattr(HFRolloutEngine, name)
        monkeypatch.setattr(HFRolloutEngine, name,
                            lambda self, *a, _o=original, _n=name, **k: (calls.append(_n), _o(self, *a, **k))[1])
    monkeypatch.setattr(HFRolloutEngine, "sleeps_during_update", True, raising=False)
    monkeypatch.setattr(HFRolloutEngine, "sleep", lambda self, level=1: calls.append(f"sleep{level}"), raising=False)
    monkeypatch.setattr(HFRolloutEngine, "wake_up", lambda self: calls.append("wake_up"), raising=False)
    cfg = _cfg(small_overrides, **{"steps": 2, "eval.prompts_per_set": 1})
    train(cfg, tmp_path, progress=False)
    step_calls = [c for c in calls if c != "generate"]  # eval generates too
    assert step_calls.count("sleep1") == 2 and step_calls.count("wake_up") == 2
    seq = "".join({"sleep1": "s", "wake_up": "w", "sync_weights": "y"}[c] for c in step_calls)
    assert "swy" in seq and seq.count("swy") == 2  # sleep, wake, then the reload, each step
