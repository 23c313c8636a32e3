"""The pipeline: template notebooks are clean; dvc.yaml parses; a smoke version of every paper
notebook executes end to end through papermill (a few steps per run) and the report assembles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PAPERS = ["vip", "dynamo", "gdro"]


def test_three_paper_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} == set(PAPERS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_template_notebooks_have_no_outputs_and_a_parameters_cell(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), "strip outputs"
    assert "parameters" in code[0]["metadata"].get("tags", []), "first code cell must be tagged parameters"


@pytest.mark.parametrize("name", PAPERS)
def test_notebooks_are_paired_with_their_percent_scripts(name):
    """Each template notebook and its jupytext percent script hold the same cells (edit either in
    JupyterLab, which keeps both in sync; `jupytext --sync notebooks/*.py` after a text edit)."""
    import jupytext

    ipynb = ROOT / "notebooks" / f"{name}.ipynb"
    script = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    nb = jupytext.read(ipynb)
    assert nb.metadata["jupytext"]["formats"] == "ipynb,py:percent"
    as_cells = [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in nb.cells]
    assert as_cells == [(c.cell_type, c.source, c.metadata.get("tags", [])) for c in script.cells], (
        f"{ipynb.name} and {name}.py differ: run `jupytext --sync notebooks/{name}.py`")


@pytest.mark.parametrize("name", PAPERS)
def test_parameters_cell_exposes_the_user_settings(name):
    import nbformat

    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    params = next(c for c in nb.cells if c.cell_type == "code")
    names = {line.split("=")[0].strip() for line in params.source.splitlines()
             if "=" in line and not line.startswith("#")}
    assert {"section", "overrides", "seeds", "arms", "steps", "profile"} <= names
    ns: dict = {}
    exec(params.source, ns)  # plain assignments only: papermill and JupyterLab both run it
    assert ns["section"] == name and ns["overrides"] == {}


def test_dvc_yaml_stages_and_params():
    dvc = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    regime = {"regime-gp-synthetic", "regime-gp-settings", "regime-task-mix",  # tests/test_study_stages.py
              "regime-positive-control", "regime-manifest"}  # tests/report/test_study_manifest.py
    assert set(dvc["stages"]) == {"base", "encoder", *PAPERS, "report", *regime}
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for paper in PAPERS:
        stage = dvc["stages"][paper]
        assert f"notebooks/{paper}.ipynb" in stage["deps"]
        # the stage runner validates before any output is touched (issue 11), so outputs persist
        # (DVC would delete them before cmd); it swaps new products in only on success (issue 18.5)
        assert stage["cmd"] == f"python -m replication stage {paper}"
        outs = [next(iter(o.values())) for o in stage["outs"] + stage["metrics"]]
        assert all(o.get("persist") for o in outs)
        # a trial profile's outputs are DVC outputs too, in its git-ignored workspace (issue 18.4)
        # split (DVC forbids overlapping outputs): the manifest pins every product, the summary is
        # a metrics output of its own so that `dvc exp show` shows a trial's numbers (issue 34.6)
        names = [next(iter(o)) for o in stage["outs"]]
        assert f"workspace/${{profile}}/{paper}/MANIFEST.json" in names
        assert f"workspace/${{profile}}/{paper}/summary.json" in [next(iter(o)) for o in stage["metrics"]]
        for stand_in in ("README.md", "MANIFEST.json", "summary.json"):
            assert (ROOT / "workspace" / "default" / paper / stand_in).exists()
        sec = params[paper]
        assert len(sec["seeds"]) >= 3
        assert set(sec["baseline"]).issubset(sec["arms"]) and set(sec["baseline"].values()).issubset(sec["arms"])
        assert set(sec["main"]).issubset(sec["arms"])


def test_readme_results_block_matches_the_pipeline_summary():
    """README's results block is a copy of results/summary.md (the `report` stage's output)."""
    from replication.report.summary import BEGIN, END, readme_body

    readme = (ROOT / "README.md").read_text()
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    # the summary's closing list of Holm-significant rows is README's own gen:holm-significant block
    body = readme_body((ROOT / "results" / "summary.md").read_text())
    assert block == body, "README is stale: run `python -m replication report --readme README.md`"
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]
    assert "README" not in stage["cmd"] and "README.md" not in str(stage.get("outs"))


@pytest.mark.parametrize("name", PAPERS)
def test_papermill_reads_every_parameter_without_warnings(name, caplog):
    """A comment with a second `=` on a parameter line made papermill warn "Unable to parse line"
    six times per notebook (issue 18.12) and drop those parameters from its inspection."""
    import logging

    from papermill.inspection import _infer_parameters
    from papermill.iorw import load_notebook_node

    with caplog.at_level(logging.WARNING, logger="papermill"):
        found = [p.name for p in _infer_parameters(load_notebook_node(str(ROOT / "notebooks" / f"{name}.ipynb")))]
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]
    assert {"section", "out_root", "profile", "overrides", "seeds", "arms", "steps", "gradvar_draws"} <= set(found)


def test_workspace_is_ignored_but_its_default_stand_ins_are_committed():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0

    assert ignored("workspace/quick/vip/summary.json") and ignored("workspace/quick-1a2b3c4d/vip")
    assert ignored("results/.vip.lock") and ignored("results/.vip.stage-123")
    assert not ignored("workspace/default/vip/README.md") and not ignored("results/vip/summary.json")


def test_dvc_sees_a_valid_pipeline():
    out = subprocess.run([sys.executable, "-m", "dvc", "dag", "--md"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for stage in ("base", "encoder", "vip", "dynamo", "gdro", "report"):
        assert stage in out.stdout


@pytest.mark.slow
def test_pipeline_smoke(tmp_path, base_model_dir):
    """Every paper notebook, executed by papermill on the smoke profile (3 steps, 2 seeds)."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # the VIP arms' encoder (the `encoder` stage's results/encoder), exported here instead
    encoder = tmp_path / "encoder"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "export_encoder.py"), str(encoder)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    smoke = {"profile": "smoke", "workers": 2}
    for paper in PAPERS:
        sec = dict(params[paper])
        sec["seeds"] = [0, 1]
        sec["base"] = {**(sec.get("base") or {}), "model.path": base_model_dir}
        for arm in sec["arms"].values():
            emb = (arm.get("allocator.options") or {}).get("embedder_options") or {}
            if emb.get("model_path") == "results/encoder":
                emb["model_path"] = str(encoder)
        smoke[paper] = sec
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(smoke, sort_keys=False))
    out = tmp_path / "results"
    env = {"REPLICATION_RUN_CACHE": str(tmp_path / "cache")}
    import os

    for paper in PAPERS:
        (out / paper).mkdir(parents=True)
        cmd = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / f"{paper}.ipynb"),
               str(out / paper / f"{paper}.ipynb"), "-k", "python3", "--cwd", str(ROOT),
               "-p", "section", paper, "-p", "params_file", str(pfile), "-p", "out_root", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
        assert r.returncode == 0, r.stderr[-4000:]
        s = json.loads((out / paper / "summary.json").read_text())
        assert s["profile"] == "smoke" and s["comparisons"]
        assert (out / paper / "tables" / "heldout_after.md").exists()
        assert any((out / paper / "figures").glob("*.png"))
    r = subprocess.run([sys.executable, "-m", "replication", "report", "--results", str(out),
                        "--out", str(out / "summary.md")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (out / "summary.md").read_text()
    assert "VIP" in text and "DynaMO" in text and "GDRO" in text
