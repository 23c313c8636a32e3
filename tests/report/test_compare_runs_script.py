"""scripts/compare_runs.py: a re-run is neutral when its exported runs match a revision's,
timings and provenance aside."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "compare_runs.py"


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=root, check=True,
                   capture_output=True)


def _write(run: Path, loss: float, seconds: float, commit: str) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.json").write_text(json.dumps({"final": {"loss": loss}, "wall_seconds": seconds,
                                                  "provenance": {"commit": commit}}))
    (run / "steps.jsonl").write_text(json.dumps({"step": 0, "loss": loss, "update_seconds": seconds}) + "\n")
    (run / "prompts.jsonl.gz").write_bytes(gzip.compress(b'{"prompt": 1, "n": 8}\n'))
    (run / "config.json").write_text(json.dumps({"seed": 0}))


def _compare(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "HEAD", "--root", str(root)], capture_output=True, text=True)


def test_timings_and_provenance_do_not_count_but_a_number_does(tmp_path):
    run = tmp_path / "results/vip/runs/RLOO/s0"
    _write(run, 0.5, 10.0, "aaaa")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "runs")
    _write(run, 0.5, 99.0, "bbbb")  # retrained: other timings, other commit, same numbers
    p = _compare(tmp_path)
    assert p.returncode == 0 and "compared 4 run files" in p.stdout and "0 differ" in p.stdout
    _write(run, 0.5000001, 99.0, "bbbb")  # a logged number moved
    p = _compare(tmp_path)
    assert p.returncode == 1 and "2 differ" in p.stdout
    assert "results/vip/runs/RLOO/s0/metrics.json: .final.loss: 0.5 != 0.5000001" in p.stdout
    assert "steps.jsonl: [0].loss" in p.stdout
    (run / "config.json").unlink()
    assert "config.json: missing from the working tree" in _compare(tmp_path).stdout


def test_an_arm_renamed_since_the_revision_is_compared_under_its_new_name(tmp_path):
    _write(tmp_path / "results/vip/runs/RLOO_VIP-oracle/s0", 0.5, 10.0, "aaaa")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "runs")
    _git(tmp_path, "mv", "results/vip/runs/RLOO_VIP-oracle", "results/vip/runs/RLOO_phat16")
    assert "missing from the working tree" in _compare(tmp_path).stdout
    cmd = [sys.executable, str(SCRIPT), "HEAD", "--root", str(tmp_path), "--renamed", "RLOO_VIP-oracle=RLOO_phat16"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    assert p.returncode == 0 and "compared 4 run files" in p.stdout and "0 differ" in p.stdout
    p = subprocess.run([*cmd[:-1], "RLOO_VIP-oracle"], capture_output=True, text=True)
    assert p.returncode == 2 and "--renamed takes OLD=NEW" in p.stderr
