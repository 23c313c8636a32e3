"""benchmarks/bench_fsdp_pass.py (docs/rehearsal.md, "Micro-batches"): its committed records hold
the medians of their timings and the doc quotes each as printed; a tiny run on 2 gloo ranks writes
a record of the same form."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_fsdp_pass.py"
RECORDS = sorted((REPO / "benchmarks" / "records" / "fsdp-pass").glob("*.json"))


def _bench():
    return load_benchmark("bench_fsdp_pass")


def _check(record: dict) -> None:
    a = record["args"]
    assert set(record["timings"]) == {"replicated", "fsdp"} and a["processes"] == 2
    for layout, by_rows in record["timings"].items():
        assert sorted(by_rows, key=int) == sorted(map(str, a["rows"]), key=int), layout
        for rows, entry in by_rows.items():
            assert len(entry["seconds"]) == a["repeats"] and all(t > 0 for t in entry["seconds"])
            assert entry["median"] == pytest.approx(statistics.median(entry["seconds"])), (layout, rows)
    assert record["cpu"]["model"]


def test_there_is_a_record():
    assert RECORDS, "benchmarks/records/fsdp-pass/ holds no bench_fsdp_pass.py --json output"


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_record_and_its_copy_in_the_doc(path):
    record = json.loads(path.read_text())
    _check(record)
    doc = (REPO / "docs" / "rehearsal.md").read_text()
    for line in _bench().table_lines(record):
        assert line in doc, line
    assert path.relative_to(REPO).as_posix() in doc


def test_a_tiny_run_writes_a_record(tmp_path, base_model_dir):
    out = tmp_path / "record.json"
    done = subprocess.run([sys.executable, str(BENCH), "--model", base_model_dir, "--dtype", "float32",
                           "--tokens", "8", "--rows", "1", "2", "--repeats", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    _check(record)
    assert record["args"]["rows"] == [1, 2] and record["args"]["dtype"] == "float32"
    assert "\n".join(_bench().table_lines(record)) in done.stdout


def test_bad_sizes_are_refused_before_any_launch(capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--rows", "0"])
    assert "must be >= 1" in capsys.readouterr().err
