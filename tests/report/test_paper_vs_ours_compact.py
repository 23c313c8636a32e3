"""Issue 37.6: paper vs ours at a glance. The compact table (≤ 8 columns) and the figure of the
paper's Δ against ours, both built from the committed wide results/<paper>/tables/paper_vs_ours.csv
(read only) into tmp_path."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replication.report import plots
from replication.report.paper_tables import (
    COMPACT_COLUMNS,
    compact_paper_vs_ours,
    short_reason,
    write_paper_vs_ours,
)

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("vip", "dynamo", "gdro")
NUMBER = r"[+\-−]?\d+(?:\.\d+)?"


def _wide(paper: str) -> pd.DataFrame:
    path = ROOT / "results" / paper / "tables" / "paper_vs_ours.csv"
    if not path.exists():
        pytest.skip(f"{path} not committed")
    return pd.read_csv(path)


def _numbers(text: str) -> list[float]:
    return [float(x.replace("−", "-")) for x in re.findall(NUMBER, text)]


def _md_table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    return cells[0], [c for c in cells[2:]]


@pytest.mark.parametrize("paper", PAPERS)
def test_compact_table_from_the_committed_wide_csv(paper, tmp_path):
    wide = _wide(paper)
    assert len(wide.columns) > 8  # the wide frame stays wide (CSV)
    paths = write_paper_vs_ours(wide, tmp_path)
    csv, md = tmp_path / "paper_vs_ours.csv", tmp_path / "paper_vs_ours.md"
    assert set(paths) == {csv, md}
    back = pd.read_csv(csv)
    assert list(back.columns) == list(wide.columns) and len(back) == len(wide)

    header, body = _md_table(md.read_text())
    assert len(header) <= 8 and tuple(header) == COMPACT_COLUMNS
    assert len(body) == len(wide)  # every paper row, in order
    compact = compact_paper_vs_ours(wide)
    assert len(compact.columns) <= 8
    for w, c, cells in zip(wide.to_dict("records"), compact.to_dict("records"), body):
        assert cells == [str(c[k]) for k in COMPACT_COLUMNS]
        assert c["paper row"] == f"{w['benchmark']} {w['metric']}"
        assert w["baseline"] in c["paper: baseline → method"] and w["method"] in c["paper: baseline → method"]
        b, m = _numbers(c["paper: baseline → method"].replace(w["baseline"], "").replace(w["method"], ""))
        assert b == pytest.approx(w["paper_baseline"], abs=0.006)
        assert m == pytest.approx(w["paper_method"], abs=0.006)
        assert _numbers(c["paper Δ (pts)"])[0] == pytest.approx(w["paper_abs"], abs=0.006)
        if w["analogue"] == "paired":
            d, lo, hi = _numbers(c["our Δ (pts) [95 % CI]"])
            assert d == pytest.approx(w["our_abs"], abs=0.006)
            assert lo == pytest.approx(w["our_abs_lo"], abs=0.006)
            assert hi == pytest.approx(w["our_abs_hi"], abs=0.006)
            assert lo <= d <= hi
            assert c["our analogue"].startswith(f"{w['our_set']} {w['our_metric']}")
            assert c["like for like?"].startswith("yes: same metric")
            assert f"n={int(w['n'])}" in c["our test"]
            assert ("Holm p=" in c["our test"]) == bool(np.isfinite(w["p_holm"]))
        else:
            assert c["our Δ (pts) [95 % CI]"] == "–" and c["our analogue"] == "–"
            assert c["like for like?"].startswith("no: ") and len(c["like for like?"]) <= 100
            assert c["like for like?"][4:] == short_reason(w["analogue"])


@pytest.mark.parametrize("paper", PAPERS)
def test_figure_from_the_committed_wide_csv(paper, tmp_path):
    wide = _wide(paper)
    out = tmp_path / "figures" / "paper_vs_ours.png"
    fig = plots.paper_vs_ours_scatter(wide, out, title=paper)
    assert out.exists() and out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = fig.axes[0]
    paired = wide[wide["analogue"] == "paired"]
    # one point per comparable row, at (paper Δ, our Δ); rows with no analogue are not plotted
    pts = np.vstack([ln.get_xydata() for ln in ax.lines if ln.get_marker() == "o"])
    assert len(pts) == len(paired)
    assert sorted(map(tuple, np.round(pts, 6))) == sorted(zip(np.round(paired["paper_abs"], 6),
                                                             np.round(paired["our_abs"], 6)))
    assert len(ax.texts) == len(paired)  # each point labelled
    refs = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(refs) == 2  # x = 0 and y = 0
    lo, hi = ax.get_xlim()
    assert lo < 0 < hi and ax.get_ylim()[0] < 0 < ax.get_ylim()[1]


def test_short_reasons():
    assert short_reason("no analogue: the paper's P@32 needs k = 32; our evaluator uses k = 8") == (
        "the paper's P@32 needs k = 32, ours k = 8")
    assert short_reason("no analogue: our single measurement is set beside the Qwen3-1.7B-Base row only "
                        "(a Qwen3-8B-Base analogue would reuse it)") == (
        "our one measurement is set beside the 1.7B row only")
    long = "no analogue: " + "x" * 300
    assert len(short_reason(long)) == 90 and short_reason(long).endswith("…")


def test_no_paired_row_still_gives_a_table_and_a_figure(tmp_path):
    wide = _wide("dynamo")
    none = wide[wide["analogue"] != "paired"]
    assert (compact_paper_vs_ours(none)["our Δ (pts) [95 % CI]"] == "–").all()
    out = tmp_path / "empty.png"
    plots.paper_vs_ours_scatter(none, out)
    assert out.stat().st_size > 0
