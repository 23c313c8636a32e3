"""README.md's generated blocks on how results are read (issue 37.4): ``holm-significant``, the
reading rules (replication/specs/reading.yaml) and every Holm-significant row of every paper's
tables/comparisons.csv — the same block results/summary.md (summary.significant_section) and each
paper's conclusions (conclusions.significant_after_holm) render."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from replication.report import reading
from replication.report.prose_registry import PAPERS, block, paper_table


def comparison_frames(root: Path) -> dict[str, pd.DataFrame]:
    """{paper label: its verified tables/comparisons.csv}."""
    return {label: pd.read_csv(paper_table(root, paper, "comparisons.csv")) for paper, label in PAPERS.items()}


@block("holm-significant")
def holm_significant(root: Path) -> str:
    return reading.definition() + "\n\n" + reading.significant_block(comparison_frames(root))
