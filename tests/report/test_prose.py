"""Every figure in prose comes from a generated block, and no block is stale (issue 20.3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replication.store.products import write_products_manifest

from replication.report import prose

ROOT = Path(__file__).resolve().parents[2]


def test_no_generated_block_is_stale():
    bad = prose.stale(ROOT)
    assert not bad, f"stale generated blocks {bad}: run python -m replication.report.prose"


def test_readme_and_docs_carry_the_blocks():
    readme = (ROOT / "README.md").read_text()
    assert {"headline", "baseline-gains", "predictor", "gradient-variance", "holm-significant"} <= set(prose.blocks_in(readme))
    assert "gradient-variance" in prose.blocks_in((ROOT / "docs/gradient_variance.md").read_text())


def test_a_changed_result_makes_its_block_stale_and_refresh_mends_it(tmp_path):
    for rel in ("README.md", "params.yaml"):
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / "results", tmp_path / "results",
                    ignore=shutil.ignore_patterns("*.ipynb", "base-model", "encoder", "gradient_variance"))
    summary = tmp_path / "results/vip/summary.json"
    import json

    import pandas as pd

    data = json.loads(summary.read_text())
    row = next(c for c in data["comparisons"] if c["arm"] == "RLOO+VIP" and c["metric"] == "average mean@8")
    row["diff"] = -0.0615  # whatever the committed value, the block must follow it
    summary.write_text(json.dumps(data))
    table = tmp_path / "results/vip/tables/comparisons.csv"
    cmp = pd.read_csv(table)
    at = (cmp["arm"] == "RLOO+VIP") & (cmp["set"].isin(["average", "pooled"])) & (cmp["metric"] == "mean@8")
    cmp.loc[at, "diff"] = -0.0615
    cmp.to_csv(table, index=False)
    for paper in ("vip", "dynamo", "gdro"):  # as a stage seals what it swapped in (prose verifies it)
        write_products_manifest(tmp_path / "results" / paper)
    assert set(prose.stale(tmp_path, files=("README.md",))) >= {"README.md: headline"}
    assert prose.refresh(tmp_path, files=("README.md",)) == ["README.md"]
    assert "RLOO+VIP vs RLOO held-out mean@8 \u22126.2 pts" in (tmp_path / "README.md").read_text()
    assert prose.stale(tmp_path, files=("README.md",)) == []


def test_unknown_block_is_an_error(tmp_path):
    (tmp_path / "README.md").write_text("<!-- gen:nope -->\nx\n<!-- /gen:nope -->\n")
    with pytest.raises(KeyError, match="unknown generated block 'nope'"):
        prose.stale(tmp_path, files=("README.md",))


def test_predictor_block_gives_the_paired_difference_over_seeds(tmp_path):
    tables = tmp_path / "results/vip/tables"
    tables.mkdir(parents=True)
    rows = [{"predictor": p, "subset": s, "mae": m, "count": c, "seeds": 10}
            for p, ms in (("gp", (0.160, 0.251)), ("moving-average", (0.161, 0.301)))
            for s, m, c in zip(("seen", "unseen"), ms, (13700, 5436))]
    import pandas as pd

    pd.DataFrame(rows).to_csv(tables / "predictor_study.csv", index=False)
    write_products_manifest(tables.parent)
    block = prose.GENERATORS["predictor"](tmp_path)
    assert "| gp | 0.160 | 0.251 |" in block and "paired" not in block  # no paired table: the MAEs alone
    pd.DataFrame([{"subset": "seen", "diff": -0.0011, "lo": -0.003, "hi": 0.0008, "n": 10},
                  {"subset": "unseen", "diff": -0.05, "lo": -0.055, "hi": -0.045, "n": 10}]).to_csv(
        tables / "predictor_vs_reference.csv", index=False)
    write_products_manifest(tables.parent)
    block = prose.GENERATORS["predictor"](tmp_path)
    assert "paired over 10 seeds (mean [95 % CI]): seen −0.0011 [−0.0030, +0.0008]; unseen −0.0500" in block


def test_vip_upper_bound_block_reads_the_comparisons(tmp_path):
    import pandas as pd

    tables = tmp_path / "results/vip/tables"
    tables.mkdir(parents=True)
    rows = [{"arm": a, "baseline": "RLOO", "set": "average", "metric": "mean@8", "diff": d, "lo": d - 0.007,
             "hi": d + 0.007, "p": 0.6, "p_holm": 1.0, "n": 10, "se": 0.003, "df": 9, "significant": False,
             "significant_holm": False} for a, d in (("RLOO+VIP", -0.002), ("RLOO+phat16", 0.001))]
    pd.DataFrame(rows).to_csv(tables / "comparisons.csv", index=False)
    write_products_manifest(tables.parent)
    text = prose.GENERATORS["vip-upper-bound"](tmp_path)
    assert "not an upper bound" in text and "equivalent to the baseline on mean@8 (TOST)" in text
    pd.DataFrame(rows[:1]).to_csv(tables / "comparisons.csv", index=False)
    write_products_manifest(tables.parent)
    assert prose.GENERATORS["vip-upper-bound"](tmp_path) == "The arm told p̂ by a probe did not run."


def test_the_command_knows_every_block():
    """`python -m replication.report.prose --check` runs as __main__: the blocks registered by
    prose_regime / prose_gdro must reach it too (they register into the imported module)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "replication.report.prose", "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
