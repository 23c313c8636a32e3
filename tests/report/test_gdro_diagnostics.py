"""WSE on a hand-computed example; bin replay; rollout shares."""

from __future__ import annotations

import json
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


# --------------------------------------------------------------------------- Prompt-GDRO weights
from replication.report.gdro_diagnostics import all_zero_weight_steps, bin_occupancy, loss_signal  # noqa: E402


def _weighted_records() -> pd.DataFrame:
    # seed 0: steps 0..4, two prompts a step; steps 1, 2 and 4 have every weight 0 (run of 2)
    w = [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.5, 2.0], [0.0, 0.0]]
    rows = [{"seed": 0, "step": t, "prompt_id": f"p{i}", "weight": w[t][i], "bin": [0, 9][i], "n": 4,
             "successes": 2, "loss": 0.0} for t in range(5) for i in range(2)]
    rows += [{"seed": 1, "step": 0, "prompt_id": "p0", "weight": 1.0, "bin": 3, "n": 4, "successes": 2, "loss": 0.0}]
    return pd.DataFrame(rows)


def test_all_zero_weight_steps_by_hand():
    out = all_zero_weight_steps(_weighted_records()).set_index("seed")
    assert out.loc[0, "steps"] == 5 and out.loc[0, "all_zero_steps"] == 3
    assert out.loc[0, "all_zero_share"] == pytest.approx(3 / 5)
    assert out.loc[0, "longest_all_zero_run"] == 2 and out.loc[0, "first_all_zero_step"] == 1
    assert out.loc[0, "zero_weight_share"] == pytest.approx(7 / 10)
    assert out.loc[1, "all_zero_steps"] == 0 and out.loc[1, "first_all_zero_step"] == -1
    late = all_zero_weight_steps(_weighted_records(), from_step=3).set_index("seed")
    assert late.loc[0, "steps"] == 2 and late.loc[0, "all_zero_steps"] == 1


def test_all_zero_weight_steps_needs_weights():
    with pytest.raises(ValueError, match=r"\['weight'\]"):
        all_zero_weight_steps(_weighted_records().drop(columns="weight"))
    bad = _weighted_records()
    bad.loc[0, "weight"] = np.nan
    with pytest.raises(ValueError, match="without a weight"):
        all_zero_weight_steps(bad)


def test_bin_occupancy_by_hand():
    occ = bin_occupancy(_weighted_records()[lambda d: d.seed == 0], step_window=2)
    first = occ[occ.window_start == 0].set_index("bin")
    assert first["occupancy"].tolist() == [0.5, 0.5] and first["records"].tolist() == [2, 2]
    assert first.loc[0, "mean_weight"] == pytest.approx(0.5) and first.loc[9, "zero_weight_share"] == 1.0
    assert np.allclose(occ.groupby("window_start")["occupancy"].sum(), 1.0)
    # without logged bins they are replayed with the classifier options given
    code = dict(n_bins=8, edges=[0.01, 0.2, 0.4, 0.6, 0.8, 0.99], exclude_extremes=True, unseen="zero_score")
    recs = _weighted_records().drop(columns="bin")[lambda d: d.seed == 0]
    recs.loc[(recs.step == 1) & (recs.prompt_id == "p0"), "successes"] = 0
    replayed = bin_occupancy(recs, step_window=5, **code).set_index("bin")
    # p1 is correct at every visit (estimate 1 -> class 7, first visit unseen -> 7); p0 is 7, 7,
    # then 1/2 -> bin 3, then 2/3 and 3/4 -> bin 4
    assert replayed["records"].to_dict() == {3: 1, 4: 2, 7: 7}


def test_loss_signal_by_hand():
    # one run, two steps; step 0: bin 0 holds 1 prompt (loss 0.2), bin 1 holds 3 (losses 0, 0, 0.3)
    recs = pd.DataFrame({
        "step": [0, 0, 0, 0, 1, 1],
        "prompt_id": list("abcdab"),
        "bin": [0, 1, 1, 1, 0, 0],
        "loss": [0.2, 0.0, 0.0, 0.3, 0.0, -0.1],
        "weight": [2.0, 1.0, 1.0, 0.5, 0.0, 1.0],
    })
    out = loss_signal(recs, share_floor=0.3).iloc[0]
    assert out["records"] == 6 and out["steps"] == 2
    assert out["loss_zero_share"] == pytest.approx(3 / 6) and out["loss_positive_share"] == pytest.approx(2 / 6)
    assert out["loss_mean"] == pytest.approx(0.4 / 6)
    # step 0: bin 0 = 0.2 / max(1/4, 0.3), bin 1 = 0.1 / 0.75 -> spread; step 1: one bin -> 0
    s0 = 0.2 / 0.3 - 0.1 / 0.75
    assert out["bin_mean_spread_median"] == pytest.approx(s0 / 2)
    assert out["weight_ratio_median"] == pytest.approx((4.0 + 1.0) / 2)  # 2/0.5 and 1/1 (0 left out)
    assert out["weight_ratio_ge_1_2_share"] == pytest.approx(1 / 2)  # step 0 (×4) of the two
    assert out["weight_sd_median"] == pytest.approx((np.std([2, 1, 1, 0.5]) + 0.5) / 2)
    with pytest.raises(ValueError, match="share_floor"):
        loss_signal(recs, share_floor=0.0)


def test_weight_signal_by_arm_summarises_runs(tmp_path):
    """issue 20.2/20.8: one row per arm — the share of all-zero steps over runs and the signal's
    medians — and the generated block of README / gdro.md reads it beside the arm's comparison."""
    from replication.report import gdro_diagnostics as gd
    from replication.report import prose

    recs = pd.concat([_weighted_records().assign(arm="Prompt-GDRO-code"),
                      _weighted_records().assign(arm="Prompt-GDRO", weight=1.0)], ignore_index=True)
    t = gd.weight_signal_by_arm(gd.all_zero_weight_steps(recs), gd.loss_signal(recs)).set_index("arm")
    code = t.loc["Prompt-GDRO-code"]
    assert code["runs"] == 2 and code["runs_with_all_zero_steps"] == 1 and code["longest_all_zero_run_max"] == 2
    assert code["all_zero_share_mean"] == pytest.approx((3 / 5 + 0) / 2) and code["all_zero_share_max"] == pytest.approx(0.6)
    assert t.loc["Prompt-GDRO", "all_zero_share_max"] == 0 and t.loc["Prompt-GDRO", "weight_ratio"] == 1.0
    assert t.loc["Prompt-GDRO", "weight_ratio_ge_1_2_share"] == 0
    assert code["weight_ratio_ge_1_2_share"] == pytest.approx((1 / 2 + 0) / 2)  # seed 0: step 3 (×4) of the 2 steps with a positive weight
    (tmp_path / "results/gdro/tables").mkdir(parents=True)
    t.reset_index().to_csv(tmp_path / "results/gdro/tables/prompt_gdro_weight_signal.csv", index=False)
    (tmp_path / "results/gdro/summary.json").write_text(json.dumps({"comparisons": [
        {"arm": "Prompt-GDRO-code", "metric": "average mean@8", "diff": -0.105, "ci_low": -0.113, "ci_high": -0.098,
         "p_holm": 1.7e-07}]}))
    from replication.store.products import write_products_manifest

    write_products_manifest(tmp_path / "results/gdro")  # as the stage seals it (prose verifies it)
    block = prose.GENERATORS["gdro-weight-signal"](tmp_path)
    assert "| Prompt-GDRO-code | 2 | 30.0 % (0.0–60.0 %) | 2 steps |" in block and "| 25.0 % |" in block
    assert "\u221210.5 pts [\u221211.3, \u22129.8] (Holm p 1.7e-07)" in block
    paper_row = next(ln for ln in block.splitlines() if ln.startswith("| Prompt-GDRO |"))
    assert paper_row.startswith("| Prompt-GDRO | 2 | 0.0 % (0.0–0.0 %) |") and paper_row.endswith("| — |")
