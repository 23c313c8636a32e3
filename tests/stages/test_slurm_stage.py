"""The `slurm` backend behind DVC (issue 35, "Done when"), on throwaway projects
(tests/stages/project.py):

- `dvc exp run -S launcher.backend=slurm -S profile=smoke vip` — with the fewest seeds and arms
  VIP's notebook takes (`-S vip.seeds=[0] -S vip.run=[RLOO,RLOO+VIP]`: its comparisons need an
  arm and its baseline) — trains through the one-node SLURM of scripts/local_slurm.sh (sacct shows
  the array), and each run's metrics are those of the same grid through `local` (`run_paper`, as
  the notebook calls it, with its own run cache) under the same key; `dvc status` stays clean
  whichever backend params.yaml names (no stage lists `launcher`);
- a detached grid (`-S launcher.options.detach=true`) makes the stage print GridDetached's
  message and how to watch (`python -m replication status --paper vip`) and collect the runs, not
  "papermill exited with 1"; `status` shows them in flight, then done, in the stage's folder.

Without SLURM: the stage's detached message on a fake notebook raising GridDetached, and `status`
naming the folder the stage exports to (not the notebook's hashed trial folder).

The SLURM test is skipped when SLURM is not running, unless REPLICATION_REQUIRE_SLURM=1 makes that
a failure (tests/slurm_helpers.need_slurm). Measured: about 4 minutes on 2 cores (docs/slurm.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import need_slurm
from slurm_helpers import sacct as _sacct
from slurm_helpers import wait_for as _wait

from dist_helpers import _close, _jsonl
from tests.stages.project import ROOT, commit_project, env, make_project, tree_digest

SMOKE = ("-S", "profile=smoke", "-S", "vip.run=[RLOO,RLOO+VIP]")
ARMS = {"RLOO": "RLOO", "RLOO+VIP": "RLOO_VIP"}
"""VIP's arms the test trains, and their export folders (arms._slug)."""


def _env(proj: Path, **extra: str) -> dict:
    """The project's environment: its own copy of replication/ first on the path (every process,
    the notebook's kernel and the SLURM jobs included, imports the same code)."""
    return {**env(), "PYTHONPATH": str(proj), **extra}


def _run(proj: Path, *args: str, timeout: float = 900, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=proj, env=_env(proj, **extra), capture_output=True,
                          text=True, timeout=timeout)


def _committed_project(where: Path, **kw) -> Path:
    """A project on the committed params.yaml (a fresh clone's; not whatever a trial in this
    checkout left in the working copy), with a copy of replication/ rather than the link to this
    checkout's: an edit here while the test runs would change the stages' `replication`
    dependency and the runs' code digest under it."""
    proj = make_project(where, git=False, **kw)
    (proj / "replication").unlink()
    shutil.copytree(ROOT / "replication", proj / "replication")  # with __pycache__: nothing recompiled
    committed = subprocess.run(["git", "show", "HEAD:params.yaml"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout
    (proj / "params.yaml").write_text(committed)
    commit_project(proj)
    return proj


def _status(proj: Path) -> tuple[str, dict[int, list[str]], str]:
    """`python -m replication status --paper vip` in the project: (heading, {seed: states}, output)."""
    r = _run(proj, "replication", "status", "--paper", "vip", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    states: dict[int, list[str]] = {}
    for line in lines[2:-1]:
        arm, seed, _key, *rest = line.split()
        state = "in flight" if rest[:2] == ["in", "flight"] else rest[0]
        states.setdefault(int(seed), []).append(state)
    return lines[0], states, r.stdout


def _apply(params: Path, *overrides: str) -> None:
    from dvc.utils.hydra import apply_overrides  # what `dvc exp run -S` does to params.yaml

    apply_overrides(params, list(overrides))


@pytest.mark.slow
def test_a_detached_grid_makes_the_stage_say_how_to_watch_and_collect(tmp_path):
    """A notebook cell raising GridDetached (fake notebook): the stage's last lines are its
    message and how to watch and collect the runs; no "papermill exited with", no failed notebook
    kept, the published products left as they were."""
    from replication.launch.collect import detached_message
    from replication.launch.inflight import InFlight

    proj = _committed_project(tmp_path)
    products = {k: v for k, v in tree_digest(proj / "results" / "vip").items() if not k.startswith("runs/")}
    records = [InFlight(key=f"k{i}", name=f"RLOO seed {i}", job_id=f"812_{i}", host="login1",
                        submitted="2026-12-03T10:00:00Z", log="l", job_log="j") for i in range(2)]
    message = detached_message(records, [])
    r = _run(proj, "replication", "stage", "vip", timeout=300, FAKE_DETACH=message)
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stderr.strip().splitlines()[-2:]
    assert last[0] == f"stage vip: GridDetached: {message}", last
    assert "2 run(s) in flight on SLURM (2 submitted now; job(s) 812)" in last[0]
    assert "Watch them: `python -m replication status --paper vip`" in last[1], last
    assert "run the same `dvc exp run` / `dvc repro`" in last[1] and "results/vip left as it was" in last[1]
    assert "papermill exited with" not in r.stderr
    assert not (proj / "workspace" / "failed").exists()
    assert {k: v for k, v in tree_digest(proj / "results" / "vip").items() if not k.startswith("runs/")} == products
    # with another params file the commands it prints name it
    from replication.orchestration.stage import detached_note

    note = detached_note("vip", "other.yaml", message, Path("workspace/smoke/vip"))
    assert "`python -m replication status --paper vip --params other.yaml`" in note
    assert "`python -m replication stage vip --params other.yaml`" in note


def test_status_shows_the_exports_where_the_stage_writes_them(tmp_path, monkeypatch):
    """After `dvc exp run -S ...` edits params.yaml, `status` looks for the exports in the stage's
    folder (workspace/<profile>/ or workspace/<scale>/), where the stage writes them whatever
    the edit, not in the hashed folder a notebook run with that edit would use."""
    from replication.launch.status import paper_status
    from replication.orchestration.workspace import paper_place
    from replication.stage_params import load_params

    proj = _committed_project(tmp_path)
    monkeypatch.chdir(proj)
    _apply(proj / "params.yaml", "profile=smoke", "vip.seeds=[0]")
    assert paper_place("vip", "params.yaml", load_params("params.yaml")).root.name.startswith("smoke-")
    head, rows = paper_status("vip", "params.yaml", ".cache/runs")
    assert head.startswith("vip: profile smoke, 4 arms x 1 seeds, exports in workspace/smoke/vip/runs,"), head
    assert [r.state for r in rows] == ["missing"] * 4  # RLOO, RLOO+VIP, RLOO+phat16, RLOO+true-p
    _apply(proj / "params.yaml", "profile=default", "scale=paper", "vip.scales.paper.shape.processes=1")
    head, _ = paper_status("vip", "params.yaml", ".cache/runs")
    assert head.startswith("vip: profile paper-vip, 4 arms x 3 seeds, exports in workspace/paper/vip/runs,"), head


@pytest.mark.slow
def test_dvc_exp_run_through_slurm_gives_the_local_metrics_and_a_detached_run_says_what_next(tmp_path):
    need_slurm()
    proj = _committed_project(tmp_path, real=("vip",))

    # 1. the "Done when" command: trained through SLURM
    r = _run(proj, "dvc", "exp", "run", "-S", "launcher.backend=slurm", *SMOKE, "-S", "vip.seeds=[0]", "vip")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "2 runs: 0 already exported here, 0 copied from the published results, 0 from the run cache, " \
           "2 to train" in r.stdout + r.stderr, (r.stdout + r.stderr)[-4000:]  # the notebook's log: stderr
    runs = proj / "workspace" / "smoke" / "vip" / "runs"
    jobs = {}
    for arm, folder in ARMS.items():
        launch = json.loads((runs / folder / "s0" / "metrics.json").read_text())["provenance"]["launch"]
        assert launch["backend"] == "slurm" and launch["world_size"] == 1, launch
        jobs[arm] = launch["job"]
    arrays = {j.split("_")[0] for j in jobs.values()}
    assert len(arrays) == 1, jobs  # the grid's missing runs: one array
    (array,) = arrays
    rows = _wait(lambda: (x := _sacct("-j", array, "-o", "JobID,State")) and len(x) == 2 and
                 all(s == "COMPLETED" for _, s in x) and x, 60, f"sacct showing array {array} completed")
    assert sorted(j for j, _ in rows) == sorted(jobs.values())
    summary = (proj / "workspace" / "smoke" / "vip" / "summary.json").read_text()
    assert json.loads(summary)["profile"] == "smoke"

    # 2. the backend is no parameter of any stage: switching it leaves the pipeline current
    status = _run(proj, "dvc", "status", "vip", timeout=300)
    assert status.returncode == 0 and "Data and pipelines are up to date." in status.stdout, status.stdout
    _apply(proj / "params.yaml", "launcher.backend=local")
    assert "backend: local" in (proj / "params.yaml").read_text()
    status = _run(proj, "dvc", "status", "vip", timeout=300)
    assert status.returncode == 0 and "Data and pipelines are up to date." in status.stdout, status.stdout

    # 3. the same grid through the local backend (run_paper, as the notebook calls it; its own run
    #    cache and exports): the same keys and the same numbers
    out = tmp_path / "local-out"
    code = ("import sys; from replication.orchestration.grid import run_paper; "
            "run_paper('vip', 'params.yaml', sys.argv[1], launcher={'backend': 'local'})")
    r = subprocess.run([sys.executable, "-c", code, str(out)], cwd=proj, capture_output=True, text=True,
                       timeout=600, env=_env(proj, REPLICATION_RUN_CACHE=str(tmp_path / "local-cache")))
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "0 from the run cache, 2 to train" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]
    from replication.orchestration.run_cache import exported_key

    for arm, folder in ARMS.items():
        slurm, local = runs / folder / "s0", out / "vip" / "runs" / folder / "s0"
        assert exported_key(slurm) == exported_key(local) is not None, arm
        a, b = (json.loads((x / "metrics.json").read_text()) for x in (local, slurm))
        assert a["provenance"]["launch"]["backend"] == "local"
        _close(a, b, f"{arm}: local vs slurm")
        for section in ("eval_before", "eval_after"):
            assert a[section] == b[section], (arm, section)
        _close(_jsonl(local / "steps.jsonl"), _jsonl(slurm / "steps.jsonl"), f"{arm} steps")

    # 4. detached: the stage says what is in flight and how to watch and collect it
    r = _run(proj, "dvc", "exp", "run", "-S", "launcher.backend=slurm", "-S", "launcher.options.detach=true", *SMOKE,
             "-S", "vip.seeds=[1]", "vip")
    out_text = r.stdout + r.stderr
    assert r.returncode != 0, out_text[-4000:]
    assert "stage vip: GridDetached: 2 run(s) in flight on SLURM (2 submitted now; job(s) " in out_text, out_text[-4000:]
    assert "Watch them: `python -m replication status --paper vip`" in out_text
    assert "papermill exited with" not in out_text and not (proj / "workspace" / "failed").exists()
    assert (proj / "workspace" / "smoke" / "vip" / "summary.json").read_text() == summary  # left as it was
    head, states, shown = _status(proj)
    assert head.startswith("vip: profile smoke, 2 arms x 1 seeds, exports in workspace/smoke/vip/runs"), head
    assert set(states) == {1} and all(s in ("in flight", "done") for s in states[1]), shown
    # watched until done (the jobs ran meanwhile; nothing is left in the queue)
    _wait(lambda: _status(proj)[1] == {1: ["done", "done"]}, 300, "status showing both runs done", step=3)
