"""Issue 18.2 and 18.4 for the readers (report/runs.py, report/pipeline.py, tables) and the
``seal`` / ``verify`` commands:

- every run a reader uses is verified: a cut steps.jsonl, metrics.json or prompts.jsonl.gz, an
  unsealed export or rows that disagree with metrics are one line naming the file or folder;
- a seed is never dropped silently (a missing eval_after, a missing seed folder), and a table
  that compares unpaired seeds says so;
- the committed exports verify (a clean clone's readers check every one), and ``seal`` refuses
  to bless a damaged export.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evidence.evidence_helpers import ROOT, cli, one_line_error, synthetic_run
from replication.report import pipeline, runs, tables
from replication.store.run_evidence import claimed_key, read_json, read_jsonl, run_folders, seal, verify_run
from replication.store import MANIFEST, DamagedArtifact, write_manifest

SEEDS = (0, 1, 2)


def _results(root: Path) -> Path:
    for arm, shift in (("base", 0.0), ("method", 0.05)):
        for s in SEEDS:
            synthetic_run(root / arm / f"s{s}", seed=s, kind="export", key=f"{arm}{s}", shift=shift)
    return root


def test_readers_load_verified_runs(tmp_path):
    root = _results(tmp_path / "runs")
    ev = runs.load_eval(root)
    assert sorted(ev["seed"].unique()) == list(SEEDS)
    assert len(runs.load_steps(root)) == 2 * 3 * 3
    assert len(runs.load_prompts(root)) == 2 * 3 * 3 * 4


@pytest.mark.parametrize("name, cut, needle", [
    ("steps.jsonl", lambda b: b[: len(b) // 2], "steps.jsonl"),
    ("metrics.json", lambda b: b[: len(b) // 2], "metrics.json"),
    ("prompts.jsonl.gz", lambda b: b[: len(b) // 2], "prompts.jsonl.gz"),
    ("metrics.json", lambda b: b"", "metrics.json"),
])
def test_a_cut_file_is_one_line_naming_it(tmp_path, name, cut, needle):
    root = _results(tmp_path / "runs")
    f = root / "method" / "s1" / name
    f.write_bytes(cut(f.read_bytes()))
    for load in (runs.load_eval, runs.load_steps, runs.load_prompts, runs.list_runs):
        with pytest.raises(DamagedArtifact) as err:
            load(root)
        assert str(f) in str(err.value) and "\n" not in str(err.value)
    if name != "prompts.jsonl.gz":
        return
    # and through the CLI: one line, no traceback, exit 1
    r = cli("verify", str(root))
    assert r.returncode == 1
    one_line_error(r.stderr, str(f))


@pytest.mark.parametrize("name", ["metrics.json", "prompts.jsonl.gz"])
def test_cut_json_or_gzip_without_a_manifest_names_the_file(tmp_path, name):
    """Where no manifest vouches for a file (sealing), a cut one is still one line naming it —
    not a raw JSONDecodeError or EOFError."""
    d = synthetic_run(tmp_path / "s0", kind="export", key="k", seal=False)
    f = d / name
    f.write_bytes(f.read_bytes()[:-7])
    with pytest.raises(DamagedArtifact, match=str(f)):
        read_json(f) if name.endswith(".json") else read_jsonl(f)
    with pytest.raises(DamagedArtifact, match=str(f)):
        seal(d)
    assert not (d / MANIFEST).exists()


def test_unsealed_export_is_not_read(tmp_path):
    root = _results(tmp_path / "runs")
    (root / "base" / "s0" / MANIFEST).unlink()
    with pytest.raises(DamagedArtifact, match=f"{root / 'base' / 's0'}: no MANIFEST.json"):
        runs.load_eval(root)


def test_rows_must_agree_with_metrics(tmp_path):
    """A run whose files are internally inconsistent is refused even with a matching manifest
    (resealed by hand after an edit): steps rows vs metrics steps, prompts rows vs steps."""
    d = synthetic_run(tmp_path / "A" / "s0", kind="export", key="k", steps=3)
    (d / "steps.jsonl").write_text("".join(json.dumps({"step": t}) + "\n" for t in range(2)))
    write_manifest(d, kind="export", extra={"steps": 3, "key": "k"})
    with pytest.raises(DamagedArtifact, match="steps.jsonl has 2 rows, metrics.json says 3 steps"):
        verify_run(d)
    d = synthetic_run(tmp_path / "A" / "s1", seed=1, kind="export", key="k", steps=3)
    with gzip.open(d / "prompts.jsonl.gz", "wt") as f:
        f.write(json.dumps({"step": 0, "prompt_id": "p"}) + "\n")
    write_manifest(d, kind="export", extra={"steps": 3, "key": "k"})
    with pytest.raises(DamagedArtifact, match=r"prompts.jsonl.gz has 1 rows, expected 12"):
        verify_run(d)


def test_missing_eval_after_is_an_error_naming_the_seed_not_a_welch_test(tmp_path):
    """Issue 18.4: removing eval_after from one metrics.json (even resealed) must not drop that
    seed and turn the paired test into Welch: it is an error naming the file."""
    root = _results(tmp_path / "runs")
    d = root / "method" / "s2"
    m = json.loads((d / "metrics.json").read_text())
    del m["eval_after"]
    (d / "metrics.json").write_text(json.dumps(m))
    write_manifest(d, kind="export", extra={"steps": 3, "key": "method2"})
    with pytest.raises(DamagedArtifact, match=f"{d / 'metrics.json'}: 'eval_after' missing.*seed 2"):
        runs.load_eval(root)


def test_a_non_finite_eval_value_is_named(tmp_path):
    """A NaN would be dropped by the seed statistics (mean_ci, compare): refused instead."""
    root = _results(tmp_path / "runs")
    d = root / "base" / "s0"
    m = json.loads((d / "metrics.json").read_text())
    m["eval_after"]["pooled"]["pass@2"] = float("nan")
    (d / "metrics.json").write_text(json.dumps(m))
    write_manifest(d, kind="export", extra={"steps": 3, "key": "base0"})
    with pytest.raises(DamagedArtifact, match="eval_after pooled pass@2 is not a finite number"):
        runs.load_eval(root)


def test_a_seed_missing_from_the_grid_is_an_error(tmp_path):
    root = _results(tmp_path / "runs")
    frame = pd.DataFrame([{"arm": a, "seed": s, "dir": str(root / a / f"s{s}")}
                          for a in ("base", "method") for s in SEEDS if (a, s) != ("method", 1)])
    with pytest.raises(DamagedArtifact, match=r"arm 'method': no run for seed\(s\) \[1\]"):
        pipeline.load_paper_run("p", "smoke", list(SEEDS), ["base", "method"], {"method": "base"}, root, frame)
    # a seed folder without metrics.json is a damaged run, not a seed fewer
    (root / "method" / "s1" / "metrics.json").unlink()
    with pytest.raises(DamagedArtifact, match="metrics.json"):
        runs.load_eval(root)


def test_a_seed_lacking_values_its_arm_has_is_named(tmp_path):
    root = _results(tmp_path / "runs")
    d = root / "method" / "s1"
    m = json.loads((d / "metrics.json").read_text())
    del m["eval_after"]["pooled"]
    (d / "metrics.json").write_text(json.dumps(m))
    write_manifest(d, kind="export", extra={"steps": 3, "key": "method1"})
    frame = pd.DataFrame([{"arm": a, "seed": s, "dir": str(root / a / f"s{s}")}
                          for a in ("base", "method") for s in SEEDS])
    with pytest.raises(DamagedArtifact, match=f"{d}: metrics.json lacks after pooled"):
        pipeline.load_paper_run("p", "smoke", list(SEEDS), ["base", "method"], {"method": "base"}, root, frame)


def test_an_unpaired_comparison_says_so(tmp_path):
    ev = runs.load_eval(_results(tmp_path / "runs"))
    paired = tables.compare_to_baseline(ev, "base")
    assert set(paired["test"]) == {"paired"} and "unpaired" not in paired
    assert not paired["text"].str.contains("UNPAIRED").any()
    lost = ev[~((ev["arm"] == "method") & (ev["seed"] == 2))]  # what a dropped seed used to do
    cmp = tables.compare_to_baseline(lost, "base")
    assert set(cmp["test"]) == {"welch"}
    assert cmp["unpaired"].eq("seed(s) [2] only in base").all()
    assert cmp["text"].str.contains(r"Welch.*UNPAIRED: seed\(s\) \[2\] only in base").all()


def test_seal_checks_then_writes_the_manifest_and_never_reseals(tmp_path):
    src = ROOT / "results" / "vip" / "runs" / "RLOO" / "s0"
    d = tmp_path / "runs" / "RLOO" / "s0"
    shutil.copytree(src, d)
    (d / MANIFEST).unlink(missing_ok=True)
    assert "sealed (300 steps)" in seal(d)
    manifest = verify_run(d, kind="export")
    assert manifest["extra"]["key"] == claimed_key(d)  # its key record (key.json; run.json before issue 34)
    assert "already sealed" in seal(d)
    # a damaged export is never blessed: cut its log, drop the manifest, seal again
    (d / "steps.jsonl").write_text("".join((d / "steps.jsonl").read_text().splitlines(True)[:100]))
    (d / MANIFEST).unlink()
    r = cli("seal", str(tmp_path / "runs"))
    assert r.returncode == 1
    one_line_error(r.stderr, str(d / "steps.jsonl"), "100 rows", "300 steps")
    assert not (d / MANIFEST).exists()


def test_committed_exports_all_verify():
    """A clean clone's readers verify every committed export (sealed once with
    ``python -m replication seal results/<paper>/runs``)."""
    folders = [d for paper in ("vip", "dynamo", "gdro") for d in run_folders(ROOT / "results" / paper / "runs")]
    assert len(folders) >= 60
    for d in folders:
        verify_run(d, kind="export")
