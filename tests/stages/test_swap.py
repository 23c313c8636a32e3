"""The pieces of a stage that need no papermill: the product swap, recovery from a stage killed
between two renames, and finding the launcher above `sh -c` (issue 18.5)."""

from __future__ import annotations

import os
import subprocess
import sys

from replication.orchestration.stage import _recover, swap_products


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_swap_replaces_products_clears_stale_ones_and_keeps_runs(tmp_path):
    dest, staging = tmp_path / "vip", tmp_path / ".vip.stage-1"
    for rel, text in {"runs/RLOO/s0/metrics.json": "run", "tables/old.csv": "old", "tables/kept.csv": "old",
                      "figures/old.png": "old", "summary.json": "old", "vip.ipynb": "old"}.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    for rel, text in {"tables/kept.csv": "new", "summary.json": "new", "vip.ipynb": "new"}.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).write_text(text)
    swap_products(staging, dest)
    # figures/ was not made this time: cleared like the tables' stale file, as `--clear` did
    assert _tree(dest) == {"runs/RLOO/s0/metrics.json": "run", "tables/kept.csv": "new",
                           "summary.json": "new", "vip.ipynb": "new"}
    assert not list(dest.glob(".*"))


def test_writer_locks_taken_in_staging_are_not_swapped_in(tmp_path):
    """The notebook locks its gradient-variance folder in staging; the destination's own lock
    (maybe held by another writer) must never be renamed over or removed."""
    from replication.store.lock import lock_path

    dest, staging = tmp_path / "vip", tmp_path / ".vip.stage-1"
    (staging / "gradient_variance").mkdir(parents=True)
    (staging / "gradient_variance" / "v.csv").write_text("new")
    lock_path(staging / "gradient_variance").write_text('{"pid": 1}')
    dest.mkdir()
    lock_path(dest / "gradient_variance").write_text('{"pid": 2}')
    names = swap_products(staging, dest)
    assert ".gradient_variance.lock" not in names
    assert lock_path(dest / "gradient_variance").read_text() == '{"pid": 2}'
    assert (dest / "gradient_variance" / "v.csv").read_text() == "new"


def test_a_swap_cut_between_its_renames_is_recovered(tmp_path):
    dest = tmp_path / "vip"
    (dest / ".tables.old-77").mkdir(parents=True)  # old tables moved aside, new ones never came
    (dest / ".tables.old-77" / "t.csv").write_text("old")
    (dest / "figures").mkdir()
    (dest / ".figures.old-77").mkdir()  # new figures in place, old copy not yet removed
    _recover(dest)
    assert (dest / "tables" / "t.csv").read_text() == "old"
    assert sorted(p.name for p in dest.iterdir()) == ["figures", "tables"]


def test_the_launcher_is_found_above_sh_c(tmp_path):
    probe = ("from replication.interrupts import launcher_pid; import os; "
             "print(launcher_pid(), os.getppid())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    direct = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert direct.stdout.split() == [str(os.getpid())] * 2
    wrapped = subprocess.run(["sh", "-c", f"{sys.executable} -c '{probe}'; true"], capture_output=True,
                             text=True, env=env, check=True)
    launcher, parent = wrapped.stdout.split()
    assert launcher == str(os.getpid()) and parent != launcher  # dvc's `sh -c` is skipped
