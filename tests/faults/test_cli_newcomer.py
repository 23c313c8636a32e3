"""A newcomer's command lines (issue 34.6): every error one line with exit 2 — a missing results
folder, a dataset that is not there, an --out inside the committed results/; a profile may be a
YAML file named by its stem; a run that differs from the pipeline's arm says so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults.cli_helpers import ROOT, one_line_error, run_cli
from replication.cli_checks import STAGE_ENV


def test_report_on_a_missing_or_empty_folder_is_bad_input(tmp_path):
    r = run_cli("report", "--results", str(tmp_path / "missing"), "--out", str(tmp_path / "s.md"))
    assert r.returncode == 2
    one_line_error(r.stderr, "--results", "no such folder")
    r = run_cli("report", "--results", str(tmp_path), "--out", str(tmp_path / "s.md"))
    assert r.returncode == 2
    one_line_error(r.stderr, "summary.json")
    assert not (tmp_path / "s.md").exists()


@pytest.mark.parametrize("args", [
    ["sft", "--profile", "smoke", "--out", "results/base-model"],
    ["train", "--profile", "smoke", "--seed", "0", "--out", "results/vip/runs/x"],
    ["eval", "--profile", "smoke", "--checkpoint", "results/base-model", "--out", "results/x-eval"],
])
def test_out_inside_results_is_refused(args):
    before = sorted(p.name for p in (ROOT / "results").iterdir())
    r = run_cli(*args, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, "--out", "only DVC stages write")
    assert sorted(p.name for p in (ROOT / "results").iterdir()) == before


def test_out_inside_results_from_a_subfolder_and_for_a_stage(monkeypatch, tmp_path):
    from replication.cli_checks import refuse_results
    from replication.config import ConfigError

    monkeypatch.delenv(STAGE_ENV, raising=False)
    monkeypatch.chdir(ROOT / "notebooks")
    with pytest.raises(ConfigError, match="only DVC stages"):
        refuse_results(Path("../results/base-model"))
    refuse_results(tmp_path / "run")  # anywhere else is fine
    monkeypatch.setenv(STAGE_ENV, "base")  # set by `python -m replication stage` for its commands
    refuse_results(Path("../results/base-model"))


def test_profile_may_be_a_yaml_file_named_by_its_stem(tmp_path):
    mine = tmp_path / "my-trial.yaml"
    mine.write_text("extends: smoke\nsteps: 2\n")
    r = run_cli("dry-run", "--profile", str(mine))
    assert r.returncode == 0, r.stderr
    assert '"profile": "my-trial"' in r.stdout
    (tmp_path / "default.yaml").write_text("extends: smoke\n")
    r = run_cli("dry-run", "--profile", str(tmp_path / "default.yaml"))
    assert r.returncode == 2
    one_line_error(r.stderr, "built-in")
    r = run_cli("dry-run", "--profile", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2
    one_line_error(r.stderr, "nope.yaml", "no such file")


def test_a_run_unlike_the_pipeline_arm_says_so_and_the_arm_itself_does_not():
    import yaml

    from replication.cli_defaults import note
    from replication.config import load_profile

    r = run_cli("dry-run", "--profile", "default", "--set", "allocator.name=vip", "--set", "rl.estimator=rloo")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("note:")]  # dry-run: stdout is JSON
    assert len(lines) == 1 and "vip/RLOO+VIP" in lines[0] and "embedder" in lines[0], r.stderr
    sec = yaml.safe_load((ROOT / "params.yaml").read_text())["vip"]
    arm = {**sec["base"], **sec["arms"]["RLOO+VIP"], "seed": 0}
    assert note(load_profile("default", arm)) is None


def test_a_missing_dataset_is_one_line(tmp_path, monkeypatch):
    for k, v in {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}.items():
        monkeypatch.setenv(k, v)  # an empty hub cache, no network
    opts = json.dumps({"train": "math500"})
    r = run_cli("train", "--profile", "smoke", "--seed", "0", "--out", str(tmp_path / "o"),
                "--set", "task.kind=math", "--set", f"task.options={opts}")
    assert r.returncode == 2, r.stderr[-2000:]
    one_line_error(r.stderr, "math500", "not available")
