"""Conclusion paragraphs follow the numbers they are given."""

from __future__ import annotations

import pandas as pd
import pytest

from replication.report.conclusions import (
    arm_conclusions,
    conclusions,
    lab_conclusion,
    overhead_conclusion,
    paper_conclusion,
    wse_conclusion,
)
from replication.report.paper_tables import paper_vs_ours
from replication.report.runs import list_runs, load_eval
from replication.report.tables import compare_to_baseline


def test_arm_conclusions_name_significant_winners(results_dir):
    # Family: 2 arms × 2 metrics on the average set; vip's +10 pts survives Holm there.
    cmp = compare_to_baseline(load_eval(results_dir), "uniform", sets=["average"])
    text = arm_conclusions(cmp)
    assert "**uniform**" in text and "Holm p over all 4 comparisons" in text
    assert "Holm-significant gains: vip mean@4" in text
    vip_line = next(line for line in text.splitlines() if line.startswith("- vip (vs uniform), mean@4"))
    assert "Holm-significant gain" in vip_line and "Holm p" in vip_line and "MDE" in vip_line
    assert "at Holm's α=" in vip_line  # the MDE at the level the decision used, beside the raw one
    # Over every set the family has 16 tests: the same effect no longer clears Holm's bar.
    wide = arm_conclusions(compare_to_baseline(load_eval(results_dir), "uniform"))
    assert "p < 0.05 before but not after Holm's correction: vip" in wide


def test_no_winner_sentence():
    cmp = pd.DataFrame([{"arm": "x", "baseline": "b", "set": "average", "metric": "mean@4", "diff": 0.01,
                         "lo": -0.02, "hi": 0.04, "p": 0.4, "p_holm": 0.4, "n": 3, "se": 0.007, "df": 2,
                         "significant": False}])
    assert "no arm has a Holm-significant gain" in arm_conclusions(cmp)


def test_overhead_lab_paper_wse_paragraphs(results_dir):
    runs = list_runs(results_dir)
    assert "1.12 %" in overhead_conclusion(runs) and "vip" in overhead_conclusion(runs)
    lab = pd.DataFrame([
        {"method": "uniform", "metric": "variance_rloo_vs_uniform", "mean": 1.0, "lo": 1.0, "hi": 1.0, "n": 10},
        {"method": "vip-oracle", "metric": "variance_rloo_vs_uniform", "mean": 0.7, "lo": 0.69, "hi": 0.71, "n": 10},
        {"method": "dynamo", "metric": "variance_rloo_vs_uniform", "mean": 0.9, "lo": 0.89, "hi": 0.91, "n": 10},
        {"method": "vip-ma", "metric": "variance_rloo_vs_uniform", "mean": 0.95, "lo": 0.94, "hi": 0.96, "n": 10},
        {"method": "dynamo", "metric": "nonzero_expected_vs_uniform", "mean": 1.3, "lo": 1.2, "hi": 1.4, "n": 10},
    ])
    text = lab_conclusion(lab)
    assert "dynamo: variance ×0.900" in text and "under the rloo objective dynamo ×0.900" in text and "×0.700" in text
    ev = load_eval(results_dir)
    pvo = paper_vs_ours("vip", ev, {"RLOO": "uniform", "RLOO+VIP": "vip"})
    ptext = paper_conclusion(pvo)
    assert "same direction" in ptext and "small-scale analogue" in ptext
    wse = pd.DataFrame({"arm": ["g", "g"], "seed": [0, 1], "reduction_pct": [20.0, 30.0]})
    assert "g 25.0 %" in wse_conclusion(wse) and "37.1" in wse_conclusion(wse)
    full = conclusions(runs=runs, lab=lab, paper=pvo, wse=wse)
    assert full.index("Paper vs ours") < full.index("WSE") < full.index("Method time") < full.index("Allocation lab")


def test_one_seed_says_so_instead_of_nan():
    from replication.report.stats import compare, describe

    text = describe(compare({0: 0.5}, {0: 0.4}))
    assert text == "+10.0 pts, one seed, no CI" and "nan" not in text


def test_lab_caveats_depend_on_the_objective_and_the_predictor():
    rows = []
    for obj, vals in {"variance_rloo_vs_uniform": {"vip-oracle": 0.8, "vip-gp": 1.05, "gdro-sqrt-law": 0.97,
                                                   "dynamo": 0.98},
                      "variance_drgrpo_vs_uniform": {"vip-oracle": 0.82, "vip-gp": 0.99, "gdro-sqrt-law": 0.95,
                                                     "dynamo": 0.90}}.items():
        rows += [{"method": m, "metric": obj, "mean": v, "lo": v, "hi": v, "n": 20} for m, v in vals.items()]
    text = lab_conclusion(pd.DataFrame(rows))
    assert "under the rloo objective gdro-sqrt-law ×0.970" in text
    assert "under the drgrpo objective dynamo ×0.900" in text and "depends on the objective" in text
    assert "GP predictions raises the variance to ×1.050" in text and "×0.800" in text


def test_predictor_study_paragraph_from_measured_mae(tmp_path):
    from replication.report.conclusions import predictor_conclusion

    mae = pd.DataFrame([
        {"predictor": "gp", "subset": "all", "mae": 0.289, "count": 10},
        {"predictor": "moving-average", "subset": "all", "mae": 0.231, "count": 10},
        {"predictor": "gp", "subset": "unseen", "mae": 0.311, "count": 5},
        {"predictor": "moving-average", "subset": "unseen", "mae": 0.356, "count": 5},
    ])
    text = predictor_conclusion(mae)
    assert "WORSE than a per-prompt moving average here (MAE 0.289 vs 0.231" in text
    # conclusions() finds the VIP notebook's predictor_study.csv through the comparisons' attrs.
    mae.to_csv(tmp_path / "predictor_study.csv", index=False)
    cmp = pd.DataFrame([{"arm": "x", "baseline": "b", "set": "average", "metric": "mean@4", "diff": 0.0,
                         "significant": False, "text": "t"}])
    cmp.attrs.update({"paper": "vip", "tables": str(tmp_path)})
    assert "Predictor study" in conclusions(comparisons=cmp)
    cmp.attrs["paper"] = "dynamo"
    assert "Predictor study" not in conclusions(comparisons=cmp)


def test_predictor_paragraph_carries_the_ci_over_seeds(tmp_path):
    """issue 20.5: with the paired table the paragraph states the difference, its CI, the number of
    seeds and a verdict from the CI, not from the means alone."""
    from replication.report.conclusions import predictor_conclusion

    mae = pd.DataFrame([{"predictor": p, "subset": "all", "mae": m, "count": 100, "seeds": 10}
                        for p, m in (("gp", 0.186), ("moving-average", 0.201))])
    paired = pd.DataFrame([
        {"predictor": "gp", "reference": "moving-average", "subset": "seen", "mae": 0.1601, "reference_mae": 0.1612,
         "diff": -0.0011, "lo": -0.0030, "hi": 0.0008, "p": 0.2, "n": 10},
        {"predictor": "gp", "reference": "moving-average", "subset": "unseen", "mae": 0.251, "reference_mae": 0.301,
         "diff": -0.050, "lo": -0.055, "hi": -0.045, "p": 1e-6, "n": 10}])
    text = predictor_conclusion(mae, paired)
    assert "mean over 10 seeds' uniform RLOO runs" in text
    assert "paired over 10 seeds" in text
    assert "seen −0.0011 [−0.0030, +0.0008] (no difference shown)" in text
    assert "unseen −0.0500 [−0.0550, −0.0450] (GP better)" in text
    mae.to_csv(tmp_path / "predictor_study.csv", index=False)
    paired.to_csv(tmp_path / "predictor_vs_reference.csv", index=False)
    cmp = pd.DataFrame([{"arm": "x", "baseline": "b", "set": "average", "metric": "mean@4", "diff": 0.0,
                         "significant": False, "text": "t"}])
    cmp.attrs.update({"paper": "vip", "tables": str(tmp_path)})
    assert "(GP better)" in conclusions(comparisons=cmp)


def test_every_significant_comparison_is_listed_whatever_its_set():
    """Issue 20.4: the GDRO conclusion said nothing was significant while its own table marked a
    per-set pass@8 row significant after Holm."""
    from replication.report.conclusions import significant_after_holm

    cmp = pd.DataFrame([
        {"arm": "P", "baseline": "G", "set": "average", "metric": "mean@8", "diff": 0.003, "lo": -0.002,
         "hi": 0.008, "p": 0.3, "p_holm": 0.3, "n": 8, "significant_holm": False, "family_size": 3},
        {"arm": "P", "baseline": "G", "set": "add1t3-heldout", "metric": "pass@8", "diff": 0.016, "lo": 0.009,
         "hi": 0.024, "p": 0.011, "p_holm": 0.032, "n": 8, "significant_holm": True, "family_size": 3},
        {"arm": "R", "baseline": "G", "set": "add2-heldout", "metric": "mean@8", "diff": -0.02, "lo": -0.03,
         "hi": -0.01, "p": 0.001, "p_holm": 0.003, "n": 8, "significant_holm": True, "family_size": 3},
    ])
    text = significant_after_holm(cmp, "GDRO")
    assert "one family of 3 tests" in text
    assert "- GDRO: P vs G, add1t3-heldout pass@8: gain, +1.6 pts [+0.9, +2.4], Holm p 0.032" in text
    assert "- GDRO: R vs G, add2-heldout mean@8: loss, \u22122.0 pts" in text and "average mean@8" not in text
    none = significant_after_holm(cmp.assign(significant_holm=False, p_holm=1.0), "GDRO")
    assert "- GDRO: none of its 3 tests is Holm-significant." in none


def test_baseline_moves_list_falling_pass_at_k_beside_rising_mean():
    """Issue 20.4: RL lowered held-out pass@8 in every baseline while raising mean@8; say both."""
    from replication.report.conclusions import baseline_moves

    rows = []
    for seed in range(5):
        for phase, mean, pas in (("before", 0.50, 0.85), ("after", 0.55 + 0.002 * seed, 0.83 - 0.001 * seed)):
            rows += [{"arm": "G", "seed": seed, "phase": phase, "set": "average", "metric": "mean@8", "value": mean},
                     {"arm": "G", "seed": seed, "phase": phase, "set": "average", "metric": "pass@8", "value": pas},
                     {"arm": "G", "seed": seed, "phase": phase, "set": "average", "metric": "pass@1",
                      "value": 0.5 + (0.01 if (seed + (phase == "after")) % 2 else -0.01)}]
    text = baseline_moves(pd.DataFrame(rows), ["G", "G"])
    assert "G, average mean@8: +5.4 pts" in text and "(rises)" in text
    assert "G, average pass@8: \u22122.2 pts" in text and "(falls)" in text
    assert "Interval includes 0 (no change shown): G average pass@1." in text


def test_no_degenerate_ranges_or_empty_families():
    """Issue 20: "about 1.1–1.1 pts" and "over all 0 comparisons" were printed."""
    cmp = pd.DataFrame([{"arm": a, "baseline": "b", "set": "average", "metric": m, "diff": 0.01, "n": 5,
                         "lo": -0.01, "hi": 0.03, "p": 0.3, "p_holm": 1.0, "se": 0.0035, "df": 4,
                         "significant": False, "significant_holm": False, "family_size": 0}
                        for a in ("x", "y") for m in ("mean@8", "pass@8")])
    text = arm_conclusions(cmp)
    assert "Design check: on mean@8 the seeds detect 1.8 pts at Holm's strictest level" in text
    assert "1.8\u20131.8" not in text and "over all 0" not in text and "not met" in text


def _bound_rows(vip_diff, vip_sig, oracle_diff, oracle_sig, se=0.003):
    rows = []
    for arm, d, sig in (("RLOO+VIP", vip_diff, vip_sig), ("RLOO+phat16", oracle_diff, oracle_sig)):
        for metric in ("mean@8", "pass@8"):
            p = 0.001 if sig else 0.6
            rows.append({"arm": arm, "baseline": "RLOO", "set": "average", "metric": metric, "diff": d,
                         "lo": d - 2.26 * se, "hi": d + 2.26 * se, "p": p, "p_holm": min(4 * p, 1.0), "n": 10,
                         "se": se, "df": 9, "significant": sig, "significant_holm": sig})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("vip,oracle,se,expect", [
    ((0.0, False), (0.02, True), 0.003, "Told p̂, the allocation has a Holm-significant gain"),
    ((0.0, False), (0.001, False), 0.003, "it is equivalent to the baseline on mean@8, pass@8 (TOST)"),
    ((0.0, False), (0.001, False), 0.02, "on mean@8, pass@8 the data are inconclusive"),
    ((0.0, False), (-0.02, True), 0.003, "Holm-significant loss on mean@8, pass@8"),
])
def test_noisy_p_arm_reading_by_rule(vip, oracle, se, expect):
    """issue 37.4/37.5: the 16-sample arm is told p̂, not p, so it is no upper bound; a null of it
    is read by TOST or its interval, never by its MDE."""
    from replication.report.conclusions import upper_bound_conclusion

    text = upper_bound_conclusion(_bound_rows(*vip, *oracle, se=se))
    assert expect in text and "RLOO+phat16" in text
    assert "not an upper bound" in text and "standard error up to 0.125" in text
    assert "upper bound L" not in text and "less than about" not in text
    rows = _bound_rows(*vip, *oracle, se=se)
    assert upper_bound_conclusion(rows[rows["arm"] == "RLOO+VIP"]) == ""  # no probe arm ran: nothing said


def test_paper_row_outside_the_holm_family_is_read_on_its_raw_p():
    """A metric outside the paper's Holm family has no Holm p; its verdict must follow its raw p
    and say so, not read 'significant (p=0.009)' and then 'not significant here'."""
    row = {"model": "M", "baseline": "GRPO", "method": "DynaMO", "benchmark": "Avg", "metric": "P@1",
           "paper_abs": 3.7, "paper_rel_pct": 12.8, "analogue": "paired", "n": 10, "our_set": "average",
           "our_metric": "pass@1", "ours_text": "−1.0 pts", "our_rel_pct": -2.0, "our_abs": -1.0,
           "significant": True, "p_holm": float("nan"), "significant_holm": False,
           "holm_family": "outside the paper's test family (raw p only)"}
    text = paper_conclusion(pd.DataFrame([row]))
    assert "opposite direction (raw p, outside the Holm family)" in text
    text = paper_conclusion(pd.DataFrame([{**row, "significant": False}]))
    assert "not significant here (raw p, outside the Holm family)" in text
