"""The regime studies' folder is under a manifest (issue 34.4): one writer (the regime-manifest
stage) seals it after checking each file parses; readers verify it; damage is one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replication.report import study_output
from replication.store import DamagedArtifact

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_study_folder_verifies():
    study_output.read_study_file(ROOT / "results" / "regime" / "gp_synthetic_check.json")


def test_seal_then_damage_is_named_on_read(tmp_path):
    folder = tmp_path / "regime"
    shutil.copytree(ROOT / "results" / "regime", folder)
    (folder / "MANIFEST.json").unlink()
    assert study_output.main([str(folder)]) == 0
    target = folder / "task_mix_seeds_100-103.csv"
    study_output.read_study_file(target)
    target.write_text(target.read_text().replace("0", "1", 1))
    with pytest.raises(DamagedArtifact, match="task_mix_seeds_100-103.csv"):
        study_output.read_study_file(target)


def test_a_file_that_does_not_parse_is_not_sealed(tmp_path, capsys):
    folder = tmp_path / "regime"
    folder.mkdir()
    (folder / "gp_synthetic_check.json").write_text('{"rows": [1, 2')
    assert study_output.main([str(folder)]) == 1
    assert "gp_synthetic_check.json" in capsys.readouterr().err
    assert not (folder / "MANIFEST.json").exists()
    assert study_output.main([str(tmp_path / "missing")]) == 2


def test_the_manifest_is_a_stage_output_downstream_of_every_study():
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    seal = stages["regime-manifest"]
    outs = {next(iter(o)) if isinstance(o, dict) else o for o in seal["outs"]}
    assert outs == {"results/regime/MANIFEST.json"}
    study_outs = {next(iter(o)) if isinstance(o, dict) else o
                  for name, st in stages.items() if name.startswith("regime-") and name != "regime-manifest"
                  for o in st["outs"]}
    assert study_outs <= set(seal["deps"])
