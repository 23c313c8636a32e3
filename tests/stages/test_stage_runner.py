"""`python -m replication stage <paper>` with real subprocesses (papermill, a kernel, a "trainer")
on a throwaway project whose notebooks are fakes that write like the real ones (tests/stages/
project.py). Issue 18.5: the products are swapped in only on success, Ctrl-C or a failed cell leave
the committed ones as they were, a second writer is refused naming the holder, and `kill -9` of the
launcher (dvc) leaves nothing running. Issue 18.4: a trial profile never touches results/."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.stages.project import alive, env, make_project, tree_digest, wait_for


def _published(results: Path) -> dict[str, str]:
    """Everything but the exported runs: a run exported before the stage stopped stays (it is
    complete on its own and the next stage reuses it), but not one committed file changes."""
    digest = tree_digest(results)
    return {k: v for k, v in digest.items() if "/runs/" not in k or "new-run" not in k}


def _stage(proj: Path, paper: str = "vip", extra_env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replication", "stage", paper], cwd=proj,
                          env={**env(), **(extra_env or {})}, capture_output=True, text=True, timeout=300, **kw)


def _cwd(pid: str) -> str | None:
    """The working folder of ``pid``, or None once it has exited (it may between pgrep and here)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


@pytest.mark.slow
def test_published_stage_swaps_in_its_products_and_keeps_the_runs(tmp_path):
    proj = make_project(tmp_path)
    r = _stage(proj)
    assert r.returncode == 0, r.stderr[-3000:]
    vip = proj / "results" / "vip"
    assert (vip / "tables" / "heldout.csv").read_text() == "new table"
    assert (vip / "runs" / "RLOO" / "s0" / "metrics.json").exists() and (vip / "runs" / "new-run.json").exists()
    assert (vip / "vip.ipynb").read_text().startswith("{")  # the executed notebook came along
    from replication.store.products import verify_products  # sealed as it was swapped in (issue 34.4)

    assert "tables/heldout.csv" in verify_products(vip)["files"]
    assert f"sealed by {vip.relative_to(proj) / 'MANIFEST.json'}" in r.stdout
    assert not list((proj / "results").glob(".vip.stage-*")) and not list(vip.glob(".*.old-*"))
    status = subprocess.run(["git", "status", "--porcelain", "--", "workspace"], cwd=proj,
                            capture_output=True, text=True).stdout
    assert status == ""  # workspace/default/vip is the committed stand-in, unchanged


@pytest.mark.slow
def test_trial_profile_and_failed_cell_leave_results_untouched(tmp_path):
    proj = make_project(tmp_path)
    before = tree_digest(proj / "results")
    params = proj / "params.yaml"
    params.write_text(params.read_text().replace("\nprofile: default", "\nprofile: quick", 1))
    r = _stage(proj)
    assert r.returncode == 0, r.stderr[-3000:]
    assert tree_digest(proj / "results") == before
    assert (proj / "workspace" / "quick" / "vip" / "tables" / "heldout.csv").read_text() == "new table"
    subprocess.run(["git", "checkout", "params.yaml"], cwd=proj, check=True)
    r = _stage(proj, extra_env={"FAKE_FAIL": "1"})  # products written, then a cell fails
    assert r.returncode != 0 and "results/vip left as it was" in r.stderr
    assert _published(proj / "results") == before
    assert (proj / "workspace" / "failed" / "vip.ipynb").exists()
    edited = params.read_text().replace("  steps:  ", "  steps: 7  ", 1)  # default profile, uncommitted edit
    params.write_text(edited)
    r = _stage(proj)
    assert r.returncode == 2 and "edited since the last commit" in r.stderr
    assert _published(proj / "results") == before


def _kill_9_of_the_launcher(tmp_path: Path, stubborn: bool = False) -> tuple[Path, dict, str]:
    """Start the stage under a launcher that stands in for dvc (it runs the stage through `sh -c`,
    as dvc does), check a second writer is refused, kill -9 the launcher once the notebook hangs,
    and wait for the stage's tree to be gone. Returns the project, its results before, and what
    the stage printed."""
    proj = make_project(tmp_path)
    before = tree_digest(proj / "results")
    hang, log = tmp_path / "pids", tmp_path / "stage.log"
    extra = {"FAKE_STUBBORN": "1"} if stubborn else {}
    with open(log, "w") as out:
        launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call("
                                     "['sh', '-c', 'python -m replication stage vip; echo done']))"],
                                    cwd=proj, env={**env(), "FAKE_HANG": str(hang), **extra},
                                    stdout=out, stderr=subprocess.STDOUT)
    try:
        kernel, trainer = map(int, wait_for(hang).split())
        second = _stage(proj)
        assert second.returncode == 2
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and "results/vip is being written by pid" in err[0] and "stage vip" in err[0]
        launcher.kill()  # kill -9 of dvc
        launcher.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (alive(kernel) or alive(trainer)):
            time.sleep(0.2)
        assert not alive(kernel) and not alive(trainer)
    finally:
        if launcher.poll() is None:
            launcher.kill()

    def leftovers() -> list[str]:
        found = subprocess.run(["pgrep", "-f", f"papermill.*{tmp_path}|stage vip"], capture_output=True, text=True)
        return [p for p in found.stdout.split() if _cwd(p) == str(proj.resolve())]

    # the stage's watchdog kills its tree and exits; on a loaded machine that takes a moment
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and leftovers():
        time.sleep(0.2)
    assert leftovers() == []
    return proj, before, log.read_text()


@pytest.mark.slow
def test_second_writer_refused_and_kill_9_of_the_launcher_leaves_nothing(tmp_path):
    proj, before, printed = _kill_9_of_the_launcher(tmp_path)
    assert _published(proj / "results") == before
    assert not list((proj / "results").glob(".vip.stage-*")), printed[-2000:]


@pytest.mark.slow
def test_kill_9_of_the_launcher_is_finished_by_the_watchdog_alone(tmp_path):
    """A trainer that ignores SIGTERM keeps the watchdog in kill_tree's grace period while papermill
    (SIGTERMed, it shuts its kernel down and exits) is already gone. The stage's main thread, woken
    by papermill's exit, must leave the finishing to the watchdog: before it did, it cleaned up
    beside the watchdog (the two removing the staging folder, one moving the notebook the other
    deleted) and exited first, so the trainer was never SIGKILLed and the staging folder could be
    left half removed (seen once in CI)."""
    proj, before, printed = _kill_9_of_the_launcher(tmp_path, stubborn=True)
    assert "launcher gone" in printed and "papermill exited" not in printed, printed[-2000:]
    assert not (proj / "workspace" / "failed" / "vip.ipynb").exists()
    assert _published(proj / "results") == before
    assert not list((proj / "results").glob(".vip.stage-*")), printed[-2000:]


@pytest.mark.slow
def test_ctrl_c_during_a_stage_leaves_the_committed_products(tmp_path):
    proj = make_project(tmp_path)
    before = tree_digest(proj / "results")
    hang = tmp_path / "pids"
    stage = subprocess.Popen([sys.executable, "-m", "replication", "stage", "vip"], cwd=proj,
                             env={**env(), "FAKE_HANG": str(hang)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        kernel, trainer = map(int, wait_for(hang).split())
        stage.send_signal(signal.SIGINT)  # what Ctrl-C in the terminal delivers
        out, err = stage.communicate(timeout=60)
    finally:
        if stage.poll() is None:
            stage.kill()
    assert stage.returncode == 130 and "stopped by SIGINT" in err
    time.sleep(1)
    assert not alive(kernel) and not alive(trainer)
    assert _published(proj / "results") == before  # summary, tables, figures all still there
    assert not list((proj / "results").glob(".vip.stage-*"))
