"""Fault injection (issue 11), run folders: --resume without a checkpoint, a run never overwritten
without --overwrite, one trainer per folder."""

from __future__ import annotations

import json
import subprocess
import sys

from replication.__main__ import main

from faults.cli_helpers import ROOT, one_line_error, train_args, tree_digest


def test_resume_without_checkpoint_is_an_error(small_overrides, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(small_overrides, out, "--resume")) == 2
    one_line_error(capsys.readouterr().err, "--resume", "no checkpoint", str(out))
    assert not out.exists()


def test_existing_run_is_never_overwritten_without_flag(small_overrides, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_args(small_overrides, out, "--max-steps", "2")) == 0
    before = tree_digest(out)
    capsys.readouterr()
    assert main(train_args(small_overrides, out, "--max-steps", "2")) == 2
    one_line_error(capsys.readouterr().err, str(out), "--overwrite", "--resume")
    assert tree_digest(out) == before
    # resuming with fewer steps than the checkpoint holds would understate what ran
    assert main(train_args(small_overrides, out, "--max-steps", "1", "--resume")) == 2
    one_line_error(capsys.readouterr().err, "step 2", "--max-steps 1")
    assert tree_digest(out) == before
    # a different configuration cannot continue this checkpoint
    assert main(train_args(small_overrides, out, "--resume", overrides={"optim.lr": 1e-4})) == 2
    one_line_error(capsys.readouterr().err, "optim.lr")
    assert main(train_args(small_overrides, out, "--max-steps", "3", "--overwrite")) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 3
    assert len((out / "steps.jsonl").read_text().splitlines()) == 3


def test_second_trainer_on_the_same_folder_is_refused(small_overrides, tmp_path, capsys):
    from replication.train.run_folder import lock_run, unlock_run

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]);"
        "from replication.train.run_folder import lock_run; lock_run(sys.argv[1]);"
        "print('locked', flush=True); time.sleep(60)"), str(out), str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(train_args(small_overrides, out)) == 2
        one_line_error(capsys.readouterr().err, "in use", str(out))
    finally:
        holder.kill()
        holder.wait()
    lock_run(out)  # released with its process
    unlock_run(out)
