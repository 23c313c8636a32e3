"""Reading rules generated, not typed (issue 37.4): every Holm-significant row of every committed
results/*/tables/comparisons.csv is named in README.md, in results/summary.md's generator and in
each paper's conclusions generator; a "no effect" is an equivalence test or an interval, never power."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from replication.report import reading
from replication.report.conclusions import conclusions
from replication.report.summary import PAPERS, write_summary

ROOT = Path(__file__).resolve().parents[2]


def _significant(paper: str) -> pd.DataFrame:
    cmp = pd.read_csv(ROOT / "results" / paper / "tables" / "comparisons.csv")
    return cmp[cmp["p_holm"] < 0.05]


def _named(text: str, label: str, r) -> bool:
    """The row's arm, baseline, set, metric and Δ with its CI appear on one line."""
    d = f"{100 * r.diff:+.1f}".replace("-", "\u2212")
    for line in text.splitlines():
        if (f"{label}: {r.arm} vs {r.baseline}, " in line and re.search(rf"\b{re.escape(r.set)}\b", line)
                and f" {r.metric}: " in line and f"{d} pts [" in line):
            return True
    return False


def test_committed_tables_have_the_losses_the_issue_names():
    """The losses issue 37 named (Holm-significant then, in families without the true-p arms) are
    in the committed tables with the same differences; whether each is Holm-significant now is the
    table's to say, and the tests below check every one that is gets named."""
    rows = {}
    for p in PAPERS:
        cmp = pd.read_csv(ROOT / "results" / p / "tables" / "comparisons.csv")
        rows.update({(p, r.arm, r.set, r.metric): round(100 * r.diff, 1) for r in cmp.itertuples()})
    named = {("vip", "RLOO+VIP", "add2t3-heldout", "pass@8"): -3.8, ("vip", "RLOO+phat16", "add2t3-heldout", "pass@8"): -3.2,
             ("dynamo", "DynaMO", "add2t3-heldout", "pass@8"): -5.5}
    assert {k: rows.get(k) for k in named} == named


def test_readme_names_every_holm_significant_row():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- gen:holm-significant -->", 1)[1].split("<!-- /gen:holm-significant -->", 1)[0]
    for paper, label in PAPERS.items():
        for r in _significant(paper).itertuples():
            assert _named(block, label, r), f"README misses {label} {r.arm} {r.set} {r.metric}"


def test_summary_generator_names_every_holm_significant_row(tmp_path):
    text = write_summary(ROOT / "results", tmp_path / "summary.md")
    assert "## Every Holm-significant comparison" in text and "**Reading**" in text
    for paper, label in PAPERS.items():
        for r in _significant(paper).itertuples():
            assert _named(text, label, r), f"summary misses {label} {r.arm} {r.set} {r.metric}"
    for paper, label in PAPERS.items():  # a paper without one says so, with the size of its family
        cmp = pd.read_csv(ROOT / "results" / paper / "tables" / "comparisons.csv")
        if _significant(paper).empty:
            assert f"- {label}: none of its {int(reading._family(cmp).sum())} tests is Holm-significant." in text


@pytest.mark.parametrize("paper", list(PAPERS))
def test_conclusions_generator_names_every_holm_significant_row(paper):
    cmp = pd.read_csv(ROOT / "results" / paper / "tables" / "comparisons.csv")
    cmp.attrs["paper"] = paper
    text = conclusions(comparisons=cmp)
    assert text.startswith("**Reading**")
    for r in _significant(paper).itertuples():
        assert _named(text, PAPERS[paper], r), f"{paper} conclusions miss {r.arm} {r.set} {r.metric}"
    # both metrics, every arm, on the headline set
    for arm in set(cmp["arm"]):
        for metric in ("mean@8", "pass@8"):
            assert f"- {arm} (vs " in text and f"), {metric}: " in text


@pytest.mark.parametrize("paper", list(PAPERS))
def test_no_effect_only_from_an_equivalence_test_or_an_interval(paper):
    """Issue 37.3: no "less than about <MDE>" reading of a null, no upper-bound claim for the probe arm,
    and every "equivalent" says it is a TOST; one significance wording."""
    cmp = pd.read_csv(ROOT / "results" / paper / "tables" / "comparisons.csv")
    cmp.attrs["paper"] = paper
    text = conclusions(comparisons=cmp)
    for banned in ("less than about", "would have been detected", "The upper bound (", "significantly better",
                   "significant after Holm", "not significant (p=", "within noise"):
        assert banned not in text, banned
    for line in text.splitlines():
        if "equivalent within" in line or "equivalent to the baseline" in line:
            assert "TOST" in line, line


def test_reading_of_the_committed_headline_rows():
    """The rules applied to the committed VIP table: RLOO+VIP's mean@8 is shown equivalent within
    the margin by TOST, its pass@8 is inconclusive, and the MDE at Holm's level exceeds the raw one."""
    ann = reading.annotate(pd.read_csv(ROOT / "results/vip/tables/comparisons.csv")).set_index(["arm", "set", "metric"])
    assert ann.loc[("RLOO+VIP", "average", "mean@8"), "reading"] == "equivalent"
    assert ann.loc[("RLOO+VIP", "average", "pass@8"), "reading"] == "inconclusive"
    assert ann.loc[("RLOO+VIP", "add2t3-heldout", "pass@8"), "reading"] == "loss"
    assert (ann["mde_holm"] >= ann["mde_raw"] - 1e-12).all()
    assert ann.loc[("RLOO+VIP", "pooled", "mean@8"), "tost_p_holm"] == ann.loc[("RLOO+VIP", "average", "mean@8"), "tost_p_holm"]


def test_margin_is_the_design_mde_from_the_spec():
    rules = reading.load_rules()
    assert rules["margin"]["mean@k"] == rules["design_mde"] == 0.015
    assert reading.margin_for("average pass@8") == rules["margin"]["pass@k"]
    with pytest.raises(KeyError):
        reading.margin_for("greedy")
