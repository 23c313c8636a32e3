"""Sample efficiency (rollouts to the baseline's final scores) and mechanism onset, on
constructed logs whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from replication.report.engagement import describe_engagement, engagement, engagement_summary
from replication.report.sample_efficiency import (
    describe_sample_efficiency,
    heldout_crossing,
    rollouts_to_target,
    sample_efficiency,
    training_curves,
)

STEPS, C = 100, 10


def _steps(arm: str, seed: int, rate: float, reward_bias: float = 0.0) -> pd.DataFrame:
    t = np.arange(STEPS)
    score = np.minimum(rate * (t + 1) / STEPS, 0.5)
    return pd.DataFrame({"arm": arm, "seed": seed, "step": t, "rollouts": C, "prompt_accuracy": score,
                         "reward": score + reward_bias})


def _eval(arm: str, seed: int, before: float, after: float) -> list[dict]:
    return [{"arm": arm, "seed": seed, "phase": ph, "set": "average", "metric": "mean@8", "value": v}
            for ph, v in (("before", before), ("after", after))]


@pytest.fixture()
def logs():
    steps = pd.concat([_steps("base", s, 0.5) for s in (0, 1)]
                      # fast reaches 0.5 at step 49; its rollout-weighted reward is inflated (a
                      # non-uniform allocation), which must not count
                      + [_steps("fast", s, 1.0, reward_bias=0.3) for s in (0, 1)]
                      + [_steps("slow", s, 0.4, reward_bias=0.3) for s in (0, 1)], ignore_index=True)
    ev = pd.DataFrame(_eval("base", 0, 0.4, 0.5) + _eval("base", 1, 0.4, 0.5) + _eval("fast", 0, 0.4, 0.6)
                      + _eval("fast", 1, 0.4, 0.6) + _eval("slow", 0, 0.4, 0.45) + _eval("slow", 1, 0.4, 0.45))
    return steps, ev


def test_rollouts_to_the_baselines_final_scores(logs):
    steps, ev = logs
    raw = sample_efficiency(steps, ev, baseline="base", window=1)
    tab = raw.set_index("arm")
    assert raw.attrs["train_target"] == pytest.approx(0.5)
    assert tab.loc["base", "rollouts_mean"] == pytest.approx(STEPS * C)  # reaches its final at the last step
    assert tab.loc["fast", "rollouts_mean"] == pytest.approx(50 * C)  # step 49, cumulative incl. that step
    assert tab.loc["slow", "train reached"] == "0/2 (2 censored)"  # prompt_accuracy, not the inflated reward
    assert tab.loc["slow", "rollouts to baseline train score (KM median)"] == "not reached"
    assert tab.loc["fast", "rollouts_km_median"] == pytest.approx(50 * C)
    assert tab.loc["fast", "heldout_rollouts_mean"] == pytest.approx(0.5 * STEPS * C)  # 0.4 → 0.6 crosses 0.5 halfway
    assert tab.loc["slow", "held-out reached"] == "0/2 (2 censored)"
    assert "Targets (baseline base)" in describe_sample_efficiency(raw)


def test_smoothing_and_crossing_helpers(logs):
    steps, ev = logs
    cur = training_curves(steps, window=10)
    g = cur[(cur["arm"] == "base") & (cur["seed"] == 0)]
    assert g["smooth"].iloc[-1] == pytest.approx(np.mean(0.5 * np.arange(91, 101) / STEPS))
    assert g["rollouts_cum"].iloc[-1] == STEPS * C
    hit = rollouts_to_target(cur, 2.0)
    assert hit["rollouts"].isna().all() and (hit["rollouts_total"] == STEPS * C).all()
    cross = heldout_crossing(ev, steps, 0.35, "mean@8").set_index(["arm", "seed"])
    assert cross.loc[("slow", 0), "rollouts_interp"] == 0.0  # already above before training
    with pytest.raises(ValueError, match="prompt_accuracy"):
        training_curves(steps.drop(columns="prompt_accuracy"))
    with pytest.raises(ValueError, match="baseline arm"):
        sample_efficiency(steps, ev, baseline="nope")


def _records(arm: str, depart_from: int | None, weight_from: int | None, steps: int = 8, q: int = 4):
    rows = []
    for t in range(steps):
        for j in range(q):
            n = 4
            if depart_from is not None and t >= depart_from:
                n = 6 if j == 0 else (2 if j == 1 else 4)
            w = 1.0
            if weight_from is not None and t >= weight_from:
                w = 1.5 if j == 0 else 0.9
            rows.append({"arm": arm, "seed": 0, "step": t, "prompt_id": f"p{j}", "n": n, "weight": w})
    return rows


def test_engagement_onsets():
    prompts = pd.DataFrame(_records("uniform", None, None) + _records("alloc", 5, None)
                           + _records("weights", None, 3))
    steps = pd.DataFrame([{"arm": a, "seed": 0, "step": t, "beta_comp_mean": 1.05 if (a == "alloc" and t >= 2) else 1.0,
                           "beta_stab_min": 1.0} for a in ("uniform", "alloc", "weights") for t in range(8)])
    e = engagement(steps, prompts).set_index("arm")
    assert np.isnan(e.loc["uniform", "allocation_from"]) and e.loc["uniform", "departure_share"] == 0
    assert e.loc["alloc", "allocation_from"] == 5
    assert e.loc["alloc", "departure_share"] == pytest.approx(3 / 8 * 2 / 4)
    assert e.loc["alloc", "departure_steps_after"] == 1.0
    assert e.loc["weights", "weights_from"] == 3
    assert e.loc["weights", "weight_ratio_median"] == pytest.approx(1.5 / 0.9)  # 5 of 8 steps at 1.5/0.9
    assert e.loc["alloc", "modulation_from"] == 2 and np.isnan(e.loc["uniform", "modulation_from"])
    s = engagement_summary(e.reset_index()).set_index("arm")
    assert s.loc["uniform", "allocation departs from uniform"] == "never"
    assert s.loc["alloc", "allocation departs from uniform"] == "step 5"
    assert "step 5" in describe_engagement(s.reset_index())


def test_a_lucky_first_batch_does_not_reach_the_target_before_the_window_is_full():
    """Issue 20.6: with min_periods=1 one step-0 batch above the target counted as reaching it."""
    t = np.arange(STEPS)
    lucky = np.where(t == 0, 0.9, 0.2)  # one good batch at step 0, then far below the target
    steps = pd.concat([_steps("base", 0, 0.5), _steps("base", 1, 0.5),
                       pd.DataFrame({"arm": "lucky", "seed": 0, "step": t, "rollouts": C, "prompt_accuracy": lucky,
                                     "reward": lucky})], ignore_index=True)
    curves = training_curves(steps, window=20)
    assert curves[(curves.arm == "lucky") & (curves.step < 19)]["smooth"].isna().all()
    hit = rollouts_to_target(curves, 0.5).set_index("arm")
    assert bool(hit.loc["lucky", "censored"]) and np.isnan(hit.loc["lucky", "rollouts"])


def test_censored_seeds_are_counted_not_dropped():
    """Two of four seeds reach the target at 100 and 200 rollouts, two never (censored at 1000):
    the mean over reached seeds says 150; the Kaplan-Meier median, which counts the censored, 200."""
    from replication.report.sample_efficiency import km_median

    assert km_median([100, 200], [1000, 1000]) == pytest.approx(200)
    assert np.isnan(km_median([100], [1000, 1000, 1000]))  # fewer than half reach it
    assert km_median([100, 200, 300, 400], []) == pytest.approx(200)  # no censoring: the lower median


def test_runs_shorter_than_the_window_use_their_length(logs):
    steps, ev = logs
    short = steps[steps["step"] < 5]
    tab = sample_efficiency(short, ev, baseline="base", window=20)
    assert tab.attrs["window"] == 5 and np.isfinite(tab.attrs["train_target"])
