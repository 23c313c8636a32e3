"""WSE on a hand-computed example; bin replay; rollout shares."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from replication.allocation import DifficultyClassifier
from replication.report.gdro_diagnostics import high_bin_share, replay_bins, rollout_share, wse, wse_reduction


def _hand_records() -> pd.DataFrame:
    # One step, four prompts: bin 0 has rates 0 and 1/2 at n = 2, bin 1 has 1/4 and 3/4 at n = 4;
    # q = 1/2 per bin and n̄ = (2 + 2 + 4 + 4) / 4 = 3.
    return pd.DataFrame({
        "step": [0, 0, 0, 0],
        "prompt_id": ["a", "b", "c", "d"],
        "n": [2, 2, 4, 4],
        "successes": [0, 1, 1, 3],
        "bin": [0, 0, 1, 1],
        "loss": [0.0, 0.0, 0.0, 0.0],
    })


def test_wse_hand_example():
    out = wse(_hand_records(), window=1).iloc[0]
    sd0 = np.std([0.0, 0.5], ddof=1)
    sd1 = np.std([0.25, 0.75], ddof=1)
    expected = 0.5 * sd0 / math.sqrt(2) + 0.5 * sd1 / math.sqrt(4)
    uniform = (0.5 * sd0 + 0.5 * sd1) / math.sqrt(3)
    assert out["wse"] == pytest.approx(expected)
    assert out["wse_uniform"] == pytest.approx(uniform)
    assert out["n_bar"] == 3 and out["bins_used"] == 2
    red = wse_reduction(wse(_hand_records(), window=1))
    assert red["reduction_pct"].iloc[0] == pytest.approx(100 * (1 - expected / uniform))


def test_wse_window_pools_records_and_skips_single_record_bins():
    recs = _hand_records()
    later = recs.assign(step=1, successes=[0, 2, 2, 2])
    lone = pd.DataFrame({"step": [1], "prompt_id": ["e"], "n": [4], "successes": [2], "bin": [5], "loss": [0.0]})
    both = pd.concat([recs, later, lone], ignore_index=True)
    out = wse(both, window=2).set_index("step")
    sd0 = np.std([0.0, 0.5, 0.0, 1.0], ddof=1)  # bin 0 over steps 0 and 1
    sd1 = np.std([0.25, 0.75, 0.5, 0.5], ddof=1)
    q = 2 / 5
    assert out.loc[1, "bins_used"] == 2  # bin 5 has one record: no spread
    assert out.loc[1, "wse"] == pytest.approx(q * sd0 / math.sqrt(2) + q * sd1 / math.sqrt(4))


def test_replay_bins_match_the_classifier():
    recs = pd.DataFrame({"step": [0, 0, 1, 1, 2], "prompt_id": ["a", "b", "a", "c", "b"],
                         "n": [4] * 5, "successes": [0, 3, 2, 1, 0]})
    bins = replay_bins(recs)
    clf = DifficultyClassifier()
    assert bins[0] == bins[1] == clf.unseen_bin  # first visits
    clf.update(["a", "b"], [False, True])
    assert bins[2] == clf.bins(["a"])[0] == 0 and bins[3] == clf.unseen_bin
    assert bins[4] == 9  # b: one any-correct visit → score 1 → top bin
    filled = wse(recs.assign(loss=0.0), window=3)
    assert len(filled) == 3


def test_rollout_share_sums_to_one_and_high_bins():
    recs = pd.DataFrame({"step": [0, 0, 0, 1, 1], "prompt_id": list("abcde"), "n": [2, 2, 12, 4, 4],
                         "successes": [0, 1, 6, 1, 1], "bin": [0, 1, 7, 2, 3]})
    share = rollout_share(recs, step_window=1)
    sums = share.groupby("window_start")[["rollout_share", "prompt_share"]].sum()
    assert np.allclose(sums, 1.0)
    hi = high_bin_share(share).set_index("window_start")
    assert hi.loc[0, "rollout_share"] == pytest.approx(12 / 16)
    assert hi.loc[0, "prompt_share"] == pytest.approx(1 / 3)
    assert hi.loc[0, "ratio"] == pytest.approx((12 / 16) / (1 / 3))
    assert hi.loc[1, "rollout_share"] == 0.0
