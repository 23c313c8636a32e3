"""Rollout-GDRO's loss signal, measured by replay (report/rollout_gdro_signal.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from replication.allocation import PromptPool, make_allocator
from replication.report import rollout_gdro_signal as rs


def _simulated_run(loss_scale: float, steps: int = 40, q: int = 16, nbar: int = 4, seed: int = 0) -> tuple[pd.DataFrame, list]:
    """A Rollout-GDRO 'run' in the trainer's order: plan → rollouts → observe(losses), logged
    as the trainer's per-prompt records."""
    rng = np.random.default_rng(seed)
    ids = [f"q{i}" for i in range(48)]
    p = dict(zip(ids, rng.uniform(0.05, 0.95, len(ids))))
    alloc = make_allocator("rollout-gdro", seed=seed, pool=PromptPool(tuple(ids), tuple(ids)), lower=2, upper=12)
    rows = []
    for step in range(steps):
        batch = list(rng.choice(ids, q, replace=False))
        n = np.asarray(alloc.plan(batch, q * nbar))
        k = np.array([rng.binomial(ni, p[b]) for b, ni in zip(batch, n)])
        rewards = np.concatenate([np.r_[np.ones(ki), np.zeros(ni - ki)] for ni, ki in zip(n, k)])
        losses = loss_scale * rng.normal(size=q) * (k % n != 0)  # all-equal groups: exactly 0
        bins = alloc.classifier.bins(batch)
        alloc.observe(batch, n, rewards, prompt_losses=losses)
        rows += [{"step": step, "prompt_id": b, "n": int(ni), "successes": int(ki), "bin": int(bi), "loss": float(li)}
                 for b, ni, ki, bi, li in zip(batch, n, k, bins, losses)]
    return pd.DataFrame(rows).assign(arm="Rollout-GDRO", seed=seed), ids


def test_replay_reproduces_the_run_and_zero_losses_change_nothing_when_the_run_had_none():
    run, ids = _simulated_run(loss_scale=0.0)
    rep = rs.replay_departures(run, {}, ids, 2, 12, seed=0)
    assert rep["replay_match"].all()  # deterministic plan: the replay IS the run
    assert rep["replays_agree"].all()  # the run saw only zeros: the blind replay is the same
    assert (rep["run_departs"] == rep["replay_departs"]).all()


def test_a_loss_signal_shows_up_as_plans_the_blind_replay_does_not_make():
    run, ids = _simulated_run(loss_scale=5.0)
    rep = rs.replay_departures(run, {}, ids, 2, 12, seed=0)
    assert rep["replay_match"].all()
    assert not rep["replays_agree"].all()  # large losses move the bandits: the blind plans differ
    table = rs.signal_table(run, {}, ids, 2, 12)
    assert table.loc[0, "replay_matches_run"] == 1.0 and table.loc[0, "zero_loss_plans_the_same"] < 1.0
    assert 0 < table.loc[0, "loss_exactly_0"] < 1
    summary = rs.summary(table)
    assert summary.loc[0, "runs"] == 1 and summary.loc[0, "replay_matches_run"] == 100.0
    assert "Rollout-GDRO" in rs.signal_conclusion(table)
