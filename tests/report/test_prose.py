"""Every figure in prose comes from a generated block, and no block is stale (issue 20.3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replication.report import prose

ROOT = Path(__file__).resolve().parents[2]


def test_no_generated_block_is_stale():
    bad = prose.stale(ROOT)
    assert not bad, f"stale generated blocks {bad}: run python -m replication.report.prose"


def test_readme_and_docs_carry_the_blocks():
    readme = (ROOT / "README.md").read_text()
    assert {"headline", "baseline-gains", "predictor", "gradient-variance"} <= set(prose.blocks_in(readme))
    assert "gradient-variance" in prose.blocks_in((ROOT / "docs/gradient_variance.md").read_text())


def test_a_changed_result_makes_its_block_stale_and_refresh_mends_it(tmp_path):
    for rel in ("README.md", "params.yaml"):
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / "results", tmp_path / "results",
                    ignore=shutil.ignore_patterns("*.ipynb", "base-model", "encoder", "gradient_variance"))
    summary = tmp_path / "results/vip/summary.json"
    summary.write_text(summary.read_text().replace('"diff": -0.0015', '"diff": -0.0615', 1))
    assert prose.stale(tmp_path, files=("README.md",)) == ["README.md: headline"]
    assert prose.refresh(tmp_path, files=("README.md",)) == ["README.md"]
    assert "RLOO+VIP vs RLOO \u22126.2 pts" in (tmp_path / "README.md").read_text()
    assert prose.stale(tmp_path, files=("README.md",)) == []


def test_unknown_block_is_an_error(tmp_path):
    (tmp_path / "README.md").write_text("<!-- gen:nope -->\nx\n<!-- /gen:nope -->\n")
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        prose.stale(tmp_path, files=("README.md",))
