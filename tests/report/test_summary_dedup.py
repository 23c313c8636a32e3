"""results/summary.md lists each test once: a "pooled" row that is the same test as the "average"
row (equal-size held-out sets) merges into it; a pooled row that differs stays its own row."""

from __future__ import annotations

import json

from replication.report.summary import write_summary


def _row(metric: str, diff: float, p: float) -> dict:
    return {"arm": "B", "baseline": "A", "metric": metric, "method_mean": 0.5, "baseline_mean": 0.4,
            "diff": diff, "ci_low": diff - 0.1, "ci_high": diff + 0.1, "p_value": p, "n": 5, "mde": 0.1}


def test_identical_pooled_rows_merge_into_the_average_row(tmp_path):
    comps = [_row("average mean@8", 0.1, 0.04), _row("average pass@8", 0.2, 0.01),
             _row("pooled mean@8", 0.1, 0.04), _row("pooled pass@8", 0.3, 0.02)]
    (tmp_path / "vip").mkdir()
    (tmp_path / "vip" / "summary.json").write_text(json.dumps({"profile": "default", "seeds": [0, 1],
                                                               "comparisons": comps}))
    text = write_summary(tmp_path, tmp_path / "summary.md")
    rows = [r.split(" | ")[4] for r in text.splitlines() if r.startswith("| VIP")]
    assert rows == ["average = pooled mean@8", "average pass@8", "pooled pass@8"]
    table = [r for r in text.splitlines() if r.startswith("| VIP")]
    assert len(set(table)) == len(table)
