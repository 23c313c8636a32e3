"""Real DVC on a throwaway project (fake notebooks, tests/stages/project.py): the README's
`dvc exp run -S profile=quick` writes workspace/quick/ and leaves `git status results/` clean
(issue 18.4: it once modified 141 committed files); `dvc repro --quiet` prints no `dvc push` hint
(there is no remote; DVC 3 prints it unconditionally, and has no setting for it, only --quiet)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.stages.project import env, make_project, tree_digest


def _git_status(proj, *paths) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=proj,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_dvc_exp_run_quick_leaves_results_clean(tmp_path):
    proj = make_project(tmp_path)
    before = tree_digest(proj / "results")
    r = subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "-S", "profile=quick"], cwd=proj, env=env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert _git_status(proj, "results") == ""
    after = {k: v for k, v in tree_digest(proj / "results").items() if not k.startswith("encoder/")}
    assert after == before  # (results/encoder: VIP's encoder, DVC-cached and git-ignored, same for every profile)
    for rel in ("vip/tables/heldout.csv", "dynamo/summary.json", "gdro/gdro.ipynb", "summary.md", "base-model/README.md"):
        assert (proj / "workspace" / "quick" / rel).exists(), rel
    lock = (proj / "dvc.lock").read_text()
    assert "workspace/quick/vip" in lock  # DVC records where the trial's outputs are
    # the way back (README, "Trying things"): the committed params and lock; results/ needs nothing
    subprocess.run(["git", "checkout", "params.yaml"], cwd=proj, check=True)
    r = subprocess.run([sys.executable, "-m", "dvc", "repro", "--quiet", "-s", "report"], cwd=proj, env=env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "dvc push" not in r.stdout + r.stderr
    assert "stage report: writing results/summary.md (published default)" in r.stdout
