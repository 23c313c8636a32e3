"""Conclusion paragraphs follow the numbers they are given."""

from __future__ import annotations

import pandas as pd

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
    cmp = compare_to_baseline(load_eval(results_dir), "uniform")
    text = arm_conclusions(cmp)
    assert "**uniform**" in text
    assert "significantly better on at least one metric: vip" in text
    vip_line = next(line for line in text.splitlines() if line.startswith("- vip, mean@4"))
    assert "significant" in vip_line


def test_no_winner_sentence():
    cmp = pd.DataFrame([{"arm": "x", "baseline": "b", "set": "average", "metric": "mean@4", "diff": 0.01,
                         "significant": False, "text": "+1.0 pts [−2.0, 4.0], not significant (p=0.4, n=3)"}])
    assert "no arm is significantly better" in arm_conclusions(cmp)


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
    assert "dynamo: variance ×0.900" in text and "without the true p: dynamo" in text and "×0.700" in text
    ev = load_eval(results_dir)
    pvo = paper_vs_ours("vip", ev, {"RLOO": "uniform", "RLOO+VIP": "vip"})
    ptext = paper_conclusion(pvo)
    assert "same direction" in ptext and "small-scale analogue" in ptext
    wse = pd.DataFrame({"arm": ["g", "g"], "seed": [0, 1], "reduction_pct": [20.0, 30.0]})
    assert "g 25.0 %" in wse_conclusion(wse) and "37.1" in wse_conclusion(wse)
    full = conclusions(runs=runs, lab=lab, paper=pvo, wse=wse)
    assert full.index("Paper vs ours") < full.index("WSE") < full.index("Allocator time") < full.index("Allocation lab")
