"""Fault injection (issue 11), the command line: bad arguments, a bad --out and a broken profile
file are one line (exit 2) before any data or model is loaded."""

from __future__ import annotations

import os

import pytest

from replication.__main__ import main
from replication.config import ConfigError

from faults.cli_helpers import one_line_error, run_cli


@pytest.mark.parametrize("args, needles", [
    (["--set", "optim.lr=[1, 2"], ["--set optim.lr", "cannot parse"]),
    (["--set", 'allocator.options={"a": 1'], ["--set allocator.options"]),
    (["--set", "=3"], ["empty key"]),
    (["--set", "novalue"], ["KEY=VALUE"]),
    (["--max-steps", "0"], ["--max-steps"]),
    (["--profile", "defualt"], ["defualt"]),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, needles):
    # model.path does not exist: an error caught later than the argument checks would say so
    r = run_cli("train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "o"),
             "--set", "model.path=/nonexistent", *args)
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, *needles)
    assert not (tmp_path / "o").exists()


def test_negative_seed_names_seed(tmp_path):
    r = run_cli("train", "--profile", "default", "--seed", "-1", "--out", str(tmp_path / "o"),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    one_line_error(r.stderr, "--seed", "-1")
    r = run_cli("dry-run", "--profile", "default", "--set", "seed=-1")
    assert r.returncode == 2
    one_line_error(r.stderr, "seed", "-1")


def test_out_on_a_file_fails_before_loading(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    # model.path does not exist: the --out check must come first (it would fail later otherwise)
    r = run_cli("train", "--profile", "default", "--seed", "0", "--out", str(f),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    one_line_error(r.stderr, str(f), "is a file")
    r = run_cli("train", "--profile", "default", "--seed", "0", "--out", str(f / "sub"))
    assert r.returncode == 2
    one_line_error(r.stderr, str(f), "not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_out_in_unwritable_folder_fails_before_loading(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    r = run_cli("train", "--profile", "default", "--seed", "0", "--out", str(ro / "run"),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    one_line_error(r.stderr, str(ro), "not writable")


def test_unwritable_folder_check_unit(tmp_path, monkeypatch):
    """The same check as above, with os.access faked (root passes any permission test)."""
    from replication.train import run_folder

    monkeypatch.setattr(run_folder.os, "access", lambda p, mode: False)
    with pytest.raises(run_folder.RunFolderError, match="not writable"):
        run_folder.check_out_dir(tmp_path / "run")


def test_profile_yaml_syntax_error_names_the_file(tmp_path, monkeypatch):
    from replication import config
    from replication.config import profiles

    (tmp_path / "broken.yaml").write_text("steps: [1, 2\nseed: 0\n")
    monkeypatch.setattr(profiles, "PROFILE_DIR", tmp_path)
    with pytest.raises(ConfigError) as e:
        config.load_profile("broken")
    assert str(tmp_path / "broken.yaml") in str(e.value) and "line" in str(e.value)
    assert main(["dry-run", "--profile", "broken"]) == 2
