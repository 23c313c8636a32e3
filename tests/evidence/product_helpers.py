"""Small copies of a committed paper folder for the products-manifest tests (issue 34.4)."""

from __future__ import annotations

import shutil
from pathlib import Path

from faults.cli_helpers import ROOT
from replication.orchestration.stage import seal_products

RESULTS = ROOT / "results"


def paper_copy(where: Path, paper: str = "vip", runs: tuple[str, ...] = ()) -> Path:
    """results/<paper> without most of its runs (``runs``: the arms/seeds to keep, "RLOO/s0")."""
    dest = where / paper
    shutil.copytree(RESULTS / paper, dest, ignore=shutil.ignore_patterns("runs", "MANIFEST.json", ".*"))
    shutil.copytree(RESULTS / paper / "gradient_variance", dest / "gradient_variance", dirs_exist_ok=True)
    for rel in runs:
        shutil.copytree(RESULTS / paper / "runs" / rel, dest / "runs" / rel)
    return dest


def sealed_paper(where: Path) -> Path:
    """A paper folder as a stage leaves it: products, an export, a measurement, its manifest."""
    dest = paper_copy(where, runs=("RLOO/s0",))
    seal_products(dest, "vip")
    return dest
