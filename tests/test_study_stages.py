"""Only DVC stages write under results/ (issue 34.6, "a study that writes there becomes a stage"):
every file under results/regime/ is the output of a dvc.yaml stage, and each script that writes
under results/ refuses to when DVC does not run it (one line, exit 2, nothing written)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDIES = {  # script and arguments -> the results/ file its stage declares
    "regime-gp-synthetic": (["scripts/gp_synthetic_check.py", "--out"], "results/regime/gp_synthetic_check.json"),
    "regime-gp-settings": (["scripts/regime_runs.py", "gp-settings"], "results/regime/gp_settings_seed100.json"),
    "regime-task-mix": (["scripts/regime_runs.py", "task-mix"], "results/regime/task_mix_seeds_100-103.csv"),
}


def _stages() -> dict:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def _outs(stage: dict) -> set[str]:
    return {next(iter(o)) if isinstance(o, dict) else o for key in ("outs", "metrics") for o in stage.get(key, [])}


def test_every_file_under_results_regime_is_a_stage_output():
    declared = set().union(*(_outs(s) for s in _stages().values()))
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "results" / "regime").iterdir() if not p.name.startswith(".")}
    assert files and files <= declared, files - declared


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_study_stage_runs_its_script_frozen_and_uncached(name):
    stage = _stages()[name]
    args, out = STUDIES[name]
    assert stage["cmd"].startswith(f"python {' '.join(args)}")
    assert stage["frozen"] is True  # hours of training, a choice made once: never in a plain `dvc repro`
    assert args[0] in stage["deps"]
    (entry,) = [o for o in stage["outs"] if next(iter(o)) == out]
    assert entry[out] == {"cache": False, "persist": True}


def test_the_positive_control_is_a_frozen_restartable_stage():
    """issue 37: "the study is a restartable DVC stage writing results/regime/"; hours of training, so
    frozen like the studies above; its records are kept (persist), its rule is a dependency."""
    stage = _stages()["regime-positive-control"]
    assert stage["cmd"] == "python scripts/positive_control.py" and stage["frozen"] is True
    assert {"scripts/positive_control.py", "replication/specs/positive_control.yaml"} <= set(stage["deps"])
    outs = {next(iter(o)): o[next(iter(o))] for o in stage["outs"]}
    assert set(outs) == {"results/regime/positive_control.csv", "results/regime/positive_control.png",
                         "results/regime/positive_control"}
    assert all(v == {"cache": False, "persist": True} for v in outs.values())


def _without_dvc() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "REPLICATION_DVC_STAGE")}


@pytest.mark.parametrize("cmd", [
    ["scripts/gp_synthetic_check.py", "--out", "results/regime/x.json"],
    ["scripts/gp_settings_study.py", "nothing.jsonl", "{}", "--out", "results/regime/x.json"],
    ["scripts/task_mix_study.py", "--mix", "m=/nonexistent", "--out", "results/regime/x.csv"],
    ["scripts/regime_runs.py", "gp-settings"],
    ["scripts/export_encoder.py", "results/encoder-x"],
    ["scripts/positive_control.py", "--out", "results/regime"],
])
def test_a_study_typed_by_hand_is_refused_results(cmd):
    r = subprocess.run([sys.executable, *cmd], cwd=ROOT, env=_without_dvc(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("\n") == 1 and "only DVC stages write" in r.stderr
    assert not (ROOT / "results/regime/x.json").exists() and not (ROOT / "results/encoder-x").exists()
    assert not (ROOT / "workspace/regime/rloo").exists() or cmd[0] != "scripts/regime_runs.py"  # its run folder


def test_run_by_dvc_may_write_results(monkeypatch):
    from replication.report.study_output import check_study_out

    monkeypatch.delenv("REPLICATION_DVC_STAGE", raising=False)
    monkeypatch.setenv("DVC_STAGE", "regime-gp-synthetic")  # what DVC sets for every stage command
    check_study_out(ROOT / "results/regime/x.json")
    monkeypatch.delenv("DVC_STAGE")
    with pytest.raises(SystemExit):
        check_study_out(ROOT / "results/regime/x.json")
    check_study_out(ROOT / "runs/x.json")  # outside results/: anyone


def test_regime_runs_trains_what_docs_regime_says():
    r = subprocess.run([sys.executable, "scripts/regime_runs.py", "task-mix", "--dry-run"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 9  # 2 mixes x seeds 100-103, then the study
    assert "--profile default --allocator uniform --no-progress --seed 100 --out workspace/regime/mix/frontier/s100" in lines[0]
    assert lines[-1].endswith("--out results/regime/task_mix_seeds_100-103.csv")
    r = subprocess.run([sys.executable, "scripts/regime_runs.py", "gp-settings", "--dry-run"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert "--estimator rloo --seed 100" in r.stdout and "bw=0.1,noise=4.0" in r.stdout
