"""Real DVC on a throwaway project (fake notebooks, tests/stages/project.py), issue 34.6:

- a profile of the user's is a file, written split in params.yaml (``profile: <stem>``,
  ``profile_dir: <folder>``): the trial lands in ``workspace/<stem>/``, the folder is a DVC
  dependency (editing the file makes the stages stale), and ``profile: <path>`` is one line
  saying how to split it;
- a trial's summary is a metrics output of its own, so ``dvc exp show`` shows the trial's numbers
  (the published default's metrics stay declared as they were)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.stages.project import env, make_project, tree_digest


def _dvc(proj, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=proj, env=env(), capture_output=True,
                          text=True, timeout=timeout)


def _git(proj, *args) -> str:
    return subprocess.run(["git", *args], cwd=proj, capture_output=True, text=True, check=True).stdout


def _metric_files(show: list) -> dict[str, dict]:
    """{metrics file: its data} of the workspace row of ``dvc exp show --json``."""
    row = next(r for r in show if r.get("rev") == "workspace")
    files = row["data"]["metrics"]
    return {path: entry.get("data", {}) for path, entry in files.items()}


@pytest.mark.slow
def test_profile_file_trial_and_its_metrics(tmp_path):
    proj = make_project(tmp_path)
    (proj / "configs").mkdir()
    (proj / "configs" / "mytrial.yaml").write_text("extends: quick\nseed: 3\n")
    _git(proj, "add", "configs")
    _git(proj, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a profile file")
    before = tree_digest(proj / "results")

    r = _dvc(proj, "exp", "run", "-S", "profile=mytrial", "-S", "profile_dir=configs")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "writing workspace/mytrial/vip (profile configs/mytrial.yaml: a trial" in r.stdout
    assert _git(proj, "status", "--porcelain", "--", "results") == ""
    assert {k: v for k, v in tree_digest(proj / "results").items() if not k.startswith("encoder/")} == before
    for rel in ("vip/summary.json", "vip/MANIFEST.json", "gdro/tables/heldout.csv", "summary.md", "base-model/README.md"):
        assert (proj / "workspace" / "mytrial" / rel).exists(), rel
    assert not (proj / "workspace" / "configs").exists()  # the stem names the folder, never the path
    summary = json.loads((proj / "workspace/mytrial/vip/summary.json").read_text())
    assert summary["profile"] == "configs/mytrial.yaml"  # the notebook was given the file itself

    lock = (proj / "dvc.lock").read_text()
    assert "path: configs\n" in lock and "workspace/mytrial/vip/summary.json" in lock

    # the trial's own summary is a metrics output: `dvc exp show` shows it beside the published one
    show = _dvc(proj, "exp", "show", "--json")
    assert show.returncode == 0, show.stderr[-2000:]
    metrics = _metric_files(json.loads(show.stdout))
    assert metrics["workspace/mytrial/vip/summary.json"]["profile"] == "configs/mytrial.yaml"
    assert metrics["results/vip/summary.json"]["profile"] == "default"

    # the profile file is a dependency: an edit makes the stages that load it stale
    assert _dvc(proj, "status", "vip").stdout.strip().endswith("up to date.")
    (proj / "configs" / "mytrial.yaml").write_text("extends: quick\nseed: 4\n")
    status = _dvc(proj, "status", "vip").stdout
    assert "configs" in status and "modified" in status

    # a path in `profile`: one line with the split to write, nothing run
    r = _dvc(proj, "exp", "run", "-S", "profile=configs/mytrial.yaml", "-S", "profile_dir=replication/profiles")
    assert r.returncode != 0
    assert "write it split: `profile: mytrial` and `profile_dir: configs`" in r.stdout + r.stderr
    assert not (proj / "workspace" / "configs").exists()


@pytest.mark.slow
def test_smoke_trial_metrics_show_in_exp_show(tmp_path):
    proj = make_project(tmp_path)
    r = _dvc(proj, "exp", "run", "-S", "profile=smoke")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    metrics = _metric_files(json.loads(_dvc(proj, "exp", "show", "--json").stdout))
    for paper in ("vip", "dynamo", "gdro"):
        assert metrics[f"workspace/smoke/{paper}/summary.json"]["profile"] == "smoke"
        assert metrics[f"results/{paper}/summary.json"]["profile"] == "default"  # published: as it was
    shown = _dvc(proj, "metrics", "show", "--json")
    assert "workspace/smoke/vip/summary.json" in shown.stdout
