"""benchmarks/records/: every recorded bench_processes round agrees with its own ratios, and
docs/paper_scale.md quotes the records' ratios and smollm2 per-phase split as the script prints
them (a typed figure that drifts from its record fails here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RECORDS = sorted((REPO / "benchmarks" / "records").glob("*.json"))
DOC = REPO / "docs" / "paper_scale.md"


def _load(path: Path) -> dict:
    rec = json.loads(path.read_text())
    missing = {"args", "rounds", "ratios", "splits"} - set(rec)
    assert not missing, f"{path.name}: no {sorted(missing)}"
    return rec


def test_there_are_records():
    assert RECORDS, "benchmarks/records/ holds no bench_processes --json output"


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_record_ratios_follow_from_its_rounds(bench, path):
    rec = _load(path)
    assert len(rec["rounds"]) == rec["args"]["repeats"]
    assert {w for r in rec["rounds"] for w in r} == set(rec["args"]["ways"].split(","))
    recomputed = dict(bench.summarize(rec["rounds"]))
    assert recomputed.keys() == rec["ratios"].keys()
    for name, vals in recomputed.items():
        assert vals == pytest.approx(rec["ratios"][name], rel=1e-12), name


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_doc_quotes_every_ratio_of_the_record(bench, path):
    rec, doc = _load(path), DOC.read_text()
    assert f"--json benchmarks/records/{path.name}" in doc, f"the doc does not give {path.name}'s command"
    for name, vals in rec["ratios"].items():
        quoted = bench.format_ratio(vals)
        assert quoted in doc, f"{path.name}: {name} = {quoted} is not quoted in docs/paper_scale.md"


def test_doc_smollm2_phase_table_matches_its_record(bench):
    rec = _load(REPO / "benchmarks" / "records" / "2026-12-02-smollm2.json")
    lines = DOC.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| phase, median s per step (rank 0), smollm2 |"))
    ways = ["1x1", "2x1", "2x1free", "2x1fsdp"]
    rows = {"generate": "generate", "update": "update", "sync": "sync (FSDP", "cpu": "CPU seconds"}
    table = lines[head + 2: head + 2 + len(rows)]
    for phase, label in rows.items():
        line = next((t for t in table if t.startswith(f"| {label}")), None)
        assert line is not None, f"no '{label}' row in the smollm2 phase table"
        cells = [c.strip() for c in line.strip("|").split("|")][1:]
        want = [f"{bench.phase_medians(rec['splits'][w], 0)[phase]:.2f}" for w in ways]
        assert cells == want, f"{phase}: the doc has {cells}, the record gives {want}"
