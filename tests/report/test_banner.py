"""A rehearsal's notebook says above its numbers that they are not results (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.report.banner import banner

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("paper", ["vip", "dynamo", "gdro"])
def test_a_rehearsal_notebook_shows_the_banner_and_a_published_one_does_not(paper):
    text = banner(f"rehearsal-{paper}")
    assert "not results" in text and f"paper-{paper}" in text
    assert banner("default") is banner(f"paper-{paper}") is banner("quick") is None
    source = (ROOT / "notebooks" / f"{paper}.py").read_text()
    assert "show_banner(pr.profile)" in source  # right after the grid, above every table
    assert source.index("show_banner(pr.profile)") < source.index("tables.write_tables")
