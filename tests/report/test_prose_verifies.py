"""Generated prose reads a paper's products only after verifying its manifest (issue 34.4): a
hand-edited summary.json or table is one DamagedArtifact naming the file, never a block quoting it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replication.report import prose
from replication.report.prose_registry import _summary, paper_table
from replication.store.manifest import DamagedArtifact
from replication.store.products import write_products_manifest

ROOT = Path(__file__).resolve().parents[2]


def _paper(tmp_path: Path) -> Path:
    vip = tmp_path / "results" / "vip"
    (vip / "tables").mkdir(parents=True)
    shutil.copy(ROOT / "results/vip/tables/comparisons.csv", vip / "tables" / "comparisons.csv")
    shutil.copy(ROOT / "results/vip/summary.json", vip / "summary.json")
    write_products_manifest(vip, extra={"paper": "vip"})
    return vip


def test_sealed_products_are_read(tmp_path):
    _paper(tmp_path)
    assert _summary(tmp_path, "vip")["comparisons"]
    assert prose.vip_upper_bound(tmp_path) == prose.vip_upper_bound(ROOT)


def test_edited_summary_is_refused(tmp_path):
    vip = _paper(tmp_path)
    (vip / "summary.json").write_text((vip / "summary.json").read_text().replace('"diff"', '"diff" ', 1))
    with pytest.raises(DamagedArtifact, match="summary.json"):
        _summary(tmp_path, "vip")


def test_edited_table_is_refused(tmp_path):
    vip = _paper(tmp_path)
    with open(vip / "tables" / "comparisons.csv", "a") as f:
        f.write("\n")
    with pytest.raises(DamagedArtifact, match="comparisons.csv"):
        prose.vip_upper_bound(tmp_path)
    with pytest.raises(DamagedArtifact):
        paper_table(tmp_path, "vip", "comparisons.csv")


def test_unsealed_paper_is_refused(tmp_path):
    vip = _paper(tmp_path)
    (vip / "MANIFEST.json").unlink()
    with pytest.raises(DamagedArtifact):
        _summary(tmp_path, "vip")
