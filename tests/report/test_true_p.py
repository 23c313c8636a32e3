"""The positive control's paragraph in each paper's conclusions (issue 37.1, report/true_p.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from replication.report.conclusions import conclusions
from replication.report.oracle_share import oracle_share
from replication.report.true_p import ORACLE_ARMS, oracle_arm, true_p_conclusion


def _rows(oracle: str, baseline: str, diff: float, sig: bool, se: float = 0.003) -> pd.DataFrame:
    rows = []
    for arm, d, s in (("Method", 0.0, False), (oracle, diff, sig)):
        for metric in ("mean@8", "pass@8"):
            p = 0.001 if s else 0.6
            rows.append({"arm": arm, "baseline": baseline, "set": "average", "metric": metric, "diff": d,
                         "lo": d - 2.26 * se, "hi": d + 2.26 * se, "p": p, "p_holm": min(4 * p, 1.0), "n": 10,
                         "se": se, "df": 9, "significant": s, "significant_holm": s})
    return pd.DataFrame(rows)


GV_LAB = pd.DataFrame([
    {"method": "uniform", "measured var ×unif": "1.00 (1.00, 1.00)", "measured noise/signal ×unif": "1.00 (1.00, 1.00)",
     "lab variance_rloo ×unif": "1.00 [1.00, 1.00]"},
    {"method": "vip-oracle", "measured var ×unif": "1.07 (1.15, 0.86)", "measured noise/signal ×unif": "0.67 (0.83, 0.52)",
     "lab variance_rloo ×unif": "0.85 [0.85, 0.86]"}])

RUNS = pd.DataFrame([{"arm": a, "seed": s, "probe_rollouts": probe, "rollouts_total": 1000, "probe_share": share,
                      "wall_seconds": wall}
                     for s in range(3) for a, probe, share, wall in (("GRPO", 0, 0.0, 100.0),
                                                                      ("GRPO+true-p", 8000, 0.7, 400.0))])


def test_every_paper_names_its_control_under_its_baseline():
    assert ORACLE_ARMS == {"vip": "RLOO+true-p", "dynamo": "GRPO+true-p", "gdro": "GRPO+true-p"}
    assert oracle_arm(_rows("RLOO+true-p", "RLOO", 0.0, False)) == "RLOO+true-p"
    assert oracle_arm(_rows("Other", "RLOO", 0.0, False)) is None
    assert true_p_conclusion(_rows("Other", "RLOO", 0.0, False)) == ""  # the control did not run: nothing said
    at_k2 = _rows("RLOO+true-p", "RLOO", 0.0, False).replace({"metric": {"mean@8": "mean@2", "pass@8": "pass@2"}})
    text = true_p_conclusion(at_k2)  # the profile's k, whatever it is
    assert "- RLOO+true-p vs RLOO, mean@2:" in text and "- RLOO+true-p vs RLOO, pass@2:" in text


@pytest.mark.parametrize("diff,sig,se,expect", [
    (0.02, True, 0.003, "Told p, allocation has a Holm-significant gain on mean@8, pass@8: allocation had room"),
    (-0.02, True, 0.003, "Holm-significant loss on mean@8, pass@8"),
    (0.001, False, 0.003, "it is equivalent to GRPO on mean@8, pass@8 (TOST)"),
    (0.001, False, 0.02, "on mean@8, pass@8 the data are inconclusive"),
])
def test_reading_by_rule_with_measured_gradient_and_cost(diff, sig, se, expect):
    text = true_p_conclusion(_rows("GRPO+true-p", "GRPO", diff, sig, se), runs=RUNS, gradient_vs_lab=GV_LAB)
    assert expect in text
    assert text.startswith("GRPO+true-p is this paper's positive control") and "64-rollout probe" in text
    assert "standard error up to 0.0625" in text and "under the paper's baseline estimator (GRPO)" in text
    assert "- GRPO+true-p vs GRPO, mean@8:" in text and "- GRPO+true-p vs GRPO, pass@8:" in text
    # the measured ratios stand beside the lab's, copied from the table, never typed
    assert "noise-to-signal ×0.67 (0.83, 0.52) of uniform's" in text and "total variance ×1.07 (1.15, 0.86)" in text
    assert "the allocation lab puts its variance at ×0.85 [0.85, 0.86]" in text
    assert "8.0 rollouts per budgeted rollout" in text and "70 % of its wall time" in text and "4.0× GRPO's" in text
    if not sig or diff < 0:
        assert "says nothing about whether its allocation works" in text


def _evals(oracle_gain: float, method_gain: float) -> pd.DataFrame:
    rows = []
    for seed in range(6):
        jitter = 0.002 * (seed % 3 - 1)
        for arm, gain in (("GRPO", 0.0), ("GRPO+true-p", oracle_gain), ("DynaMO", method_gain)):
            rows.append({"arm": arm, "seed": seed, "phase": "after", "set": "average", "metric": "mean@8",
                         "value": 0.5 + gain + (jitter if arm != "GRPO" else 0.0)})
    return pd.DataFrame(rows)


def test_shares_are_stated_only_where_the_oracle_gains():
    gained = oracle_share(_evals(0.04, 0.02), "GRPO", "GRPO+true-p", ["DynaMO"], metrics=["mean@8"])
    text = true_p_conclusion(_rows("GRPO+true-p", "GRPO", 0.04, True), shares=gained)
    assert "Each method's share of the oracle's gain" in text
    assert "- mean@8: DynaMO: 50 % of the oracle's gain [" in text
    flat = oracle_share(_evals(0.0, 0.02), "GRPO", "GRPO+true-p", ["DynaMO"], metrics=["mean@8"])
    text = true_p_conclusion(_rows("GRPO+true-p", "GRPO", 0.0, False), shares=flat)
    assert "No method's share of the oracle's gain is reported" in text and "% of the oracle's gain [" not in text


def test_the_paragraph_follows_the_reading_rules_in_the_conclusions():
    cmp = _rows("RLOO+true-p", "RLOO", 0.001, False)
    text = conclusions(comparisons=cmp, gradient_vs_lab=GV_LAB)
    control = text.index("RLOO+true-p is this paper's positive control")
    assert text.index("Holm-significant") < control  # the reading rules' definition comes first
    assert "noise-to-signal ×0.67" in text
    assert "RLOO+true-p is this paper's positive control" not in conclusions(comparisons=cmp[cmp["arm"] == "Method"])


def test_the_readme_block_reads_every_paper_from_the_committed_results():
    from pathlib import Path

    from replication.report.prose import GENERATORS

    root = Path(__file__).resolve().parents[2]
    text = GENERATORS["true-p-controls"](root)
    for label, arm in (("VIP", "RLOO+true-p"), ("DynaMO", "GRPO+true-p"), ("GDRO", "GRPO+true-p")):
        part = text.split(f"**{label}.** ", 1)[1].split("\n\n**", 1)[0]
        assert part.startswith((f"{arm} is this paper's positive control", f"{arm} is not in the committed results."))


def test_a_holm_significant_difference_on_a_single_set_is_named_and_read():
    """VIP's re-run: RLOO+true-p is equivalent on the average mean@8 but loses pass@8 on the
    hardest held-out set (Holm-significant): the paragraph must not stop at the average."""
    cmp = _rows("RLOO+true-p", "RLOO", 0.001, False)
    hard = cmp[cmp["arm"] == "RLOO+true-p"].assign(set="add2t3-heldout", diff=-0.052, lo=-0.074, hi=-0.029,
                                                   p=0.0005, p_holm=0.014, significant=True, significant_holm=True)
    text = true_p_conclusion(pd.concat([cmp, hard], ignore_index=True))
    assert "On single held-out sets, every Holm-significant difference of RLOO+true-p:" in text
    assert "- add2t3-heldout mean@8: \u22125.2 pts [" in text and "- add2t3-heldout pass@8: \u22125.2 pts [" in text
    assert "no Holm-significant change on the average set" in text
    assert "losses on add2t3-heldout mean@8, add2t3-heldout pass@8 are the allocation's own" in text
    one = pd.concat([cmp, hard[hard["metric"] == "pass@8"]], ignore_index=True)
    assert "Holm-significant loss on add2t3-heldout pass@8 is the allocation's own" in true_p_conclusion(one)
    assert "On single held-out sets" not in true_p_conclusion(cmp)
