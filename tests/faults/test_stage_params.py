"""Fault injection (issue 11), stage parameters: hostile params.yaml edits, a YAML syntax error and
a real `dvc repro` on bad parameters each end in one line (exit 2) before any output is touched."""

from __future__ import annotations

import re
import shutil
import subprocess
import os
import sys
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.config import ConfigError

from faults.cli_helpers import ROOT, one_line_error, run_cli, tree_digest


HOSTILE_PARAMS = [
    ("vip.seeds", lambda p: p["vip"].update(seeds=[])),
    ("profile", lambda p: p.update(profile="defualt")),
    ("vip.arms.RLOO", lambda p: p["vip"]["arms"]["RLOO"].update({"rl.estimatr": "rloo"})),
    ("vip.arms.RLOO+VIP", lambda p: p["vip"]["arms"]["RLOO+VIP"].update({"allocator.name": "vipp"})),
    ("vip.main", lambda p: p["vip"].update(main=["RLOO", "nope"])),
    ("vip.baseline", lambda p: p["vip"].update(baseline={"RLOO+VIP": "missing"})),
    ("vip.steps", lambda p: p["vip"].update(steps=0)),
    ("vip.sedes", lambda p: p["vip"].update(sedes=[0])),
    ("workers", lambda p: p.update(workers=0)),
    ("optim.lr", lambda p: p["vip"]["base"].update({"optim.lr": float("inf")})),
    ("seed", lambda p: p["vip"].update(seeds=[-1])),
]


def _edit_first_seeds(text: str, new_line_rest: str) -> str:
    """params.yaml text with its first ``seeds:`` entry (the vip section's: the key's line and its
    block-style items) replaced by one line."""
    out, n = re.subn(r"(?m)^(\s+seeds:)[^\n]*\n(?:\s+- [^\n]*\n)*",
                     lambda m: m.group(1) + " " + new_line_rest + "\n", text, count=1)
    assert n == 1
    return out


def _params() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.mark.parametrize("needle, damage", HOSTILE_PARAMS, ids=[h[0] for h in HOSTILE_PARAMS])
def test_validate_rejects_hostile_params(tmp_path, capsys, needle, damage):
    import yaml

    params = _params()
    damage(params)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", str(f), "--stage", "vip"]) == 2
    err = capsys.readouterr().err
    one_line_error(err, needle, str(f))


def test_validate_accepts_the_committed_params(capsys):
    for stage in ("base", "vip", "dynamo", "gdro", "report"):
        assert main(["validate", "--params", str(ROOT / "params.yaml"), "--stage", stage]) == 0


def test_params_yaml_syntax_error_names_the_file(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(_edit_first_seeds((ROOT / "params.yaml").read_text(), "[0, 1, 2"))
    r = run_cli("validate", "--params", str(f), "--stage", "vip")
    assert r.returncode == 2
    one_line_error(r.stderr, str(f), "YAML syntax error", "line")


def test_notebook_glue_validates_before_touching_outputs(tmp_path):
    """run_paper (what the notebooks call) stops on bad params before its first write."""
    import yaml

    from replication.orchestration.grid import run_paper

    params = _params()
    params["gdro"]["arms"]["GRPO"]["rl.bogus"] = 1
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    out_root = tmp_path / "results"
    (out_root / "gdro" / "runs").mkdir(parents=True)
    (out_root / "gdro" / "runs" / "keep.json").write_text("{}")
    before = tree_digest(out_root)
    with pytest.raises(ConfigError, match="rl.bogus"):
        run_paper("gdro", f, out_root)
    assert tree_digest(out_root) == before


def _dvc_project(tmp_path: Path, persist: bool = True) -> Path:
    """A throwaway DVC project: this repo's dvc.yaml and params.yaml, a small fake results tree."""
    proj = tmp_path / "proj"
    proj.mkdir(parents=True)
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, proj / name)
    if not persist:  # the control: DVC's default behaviour that deleted results in issue 11
        (proj / "dvc.yaml").write_text((proj / "dvc.yaml").read_text().replace("persist: true", "persist: false"))
    shutil.copytree(ROOT / "notebooks", proj / "notebooks")
    for stand_ins in ("default", "small"):  # dvc.yaml's workspace/${profile} and workspace/${scale} deps
        shutil.copytree(ROOT / "workspace" / stand_ins, proj / "workspace" / stand_ins)
    (proj / "replication").symlink_to(ROOT / "replication")
    for rel, text in [("results/base-model/model.safetensors", "weights"),
                      ("results/encoder/config.json", "{}"),  # the paper stages' dep on VIP's encoder
                      # and on the positive control's verdict (results/regime)
                      ("results/regime/positive_control.csv", "cell"),
                      ("results/regime/positive_control/study.json", "{}"),
                      ("results/vip/runs/RLOO/s0/metrics.json", "{}"),
                      ("results/vip/tables/heldout.csv", "a,b"),
                      ("results/vip/figures/heldout.png", "png"),
                      ("results/vip/vip.ipynb", "{executed notebook}"),
                      ("results/vip/summary.json", "{}")]:
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=proj, check=True)
    return proj


def _dvc_repro(proj: Path, stage: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", stage], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("stage, old, new", [
    ("vip", "seeds", "[]"),
    ("base", "\nprofile: default", "\nprofile: defualt"),
])
def test_dvc_repro_with_bad_params_leaves_results_identical(tmp_path, stage, old, new):
    """Real `dvc repro -s <stage>` on a copy: the stage fails (validate, exit 2) and results/ is
    byte-identical. The control run without `persist` shows DVC would have deleted it."""
    proj = _dvc_project(tmp_path)
    params = proj / "params.yaml"
    text = params.read_text()
    if old == "seeds":
        params.write_text(_edit_first_seeds(text, new))
    else:
        assert old in text
        params.write_text(text.replace(old, new, 1))
    before = tree_digest(proj / "results")
    r = _dvc_repro(proj, stage)
    assert r.returncode != 0
    assert "exited with 2" in r.stderr + r.stdout
    assert tree_digest(proj / "results") == before
    if stage == "vip":  # control: the same, with DVC's default (non-persistent) outputs
        ctl = _dvc_project(tmp_path / "control", persist=False)
        (ctl / "params.yaml").write_text(params.read_text())
        assert _dvc_repro(ctl, stage).returncode != 0
        assert not (ctl / "results/vip/tables/heldout.csv").exists()  # what issue 11 saw


def test_validate_clear_removes_only_after_success(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    old = tmp_path / "results" / "vip" / "runs"
    old.mkdir(parents=True)
    (old / "x.json").write_text("{}")
    bad = tmp_path / "bad.yaml"
    bad.write_text(_edit_first_seeds((tmp_path / "params.yaml").read_text(), "[]"))
    assert main(["validate", "--params", str(bad), "--stage", "vip", "--clear", "results/vip/runs"]) == 2
    assert (old / "x.json").exists()
    assert main(["validate", "--params", "params.yaml", "--stage", "vip", "--clear", "results/vip/runs"]) == 0
    assert not old.exists()
    assert main(["validate", "--params", "params.yaml", "--stage", "vip", "--clear", "/etc"]) == 2
