"""Issue 18.1, 18.4, 18.5, 18.7 for training runs, with the real trainer (seconds each):

- one writer: ``--resume`` on a folder another trainer has just created is refused, naming the
  folder and the holder, and the first run ends complete;
- complete or absent: a finished run carries a manifest that verifies; a failed metrics write
  (disk full) leaves no manifest and no finished run;
- resume safety: a checkpoint copied alone is refused; a partial last log line is trimmed;
- disk full while logging or checkpointing: one line naming the file and the free space, the
  temporary checkpoint removed, and ``--resume`` continues to the numbers of an uninterrupted run.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.evidence_helpers import ROOT, one_line_error, train_args
from proc_helpers import run_metrics, wait_until
from replication.__main__ import main
from replication.store.run_evidence import verify_run
from replication.store import MANIFEST, DamagedArtifact
from replication.train import checkpoint as ck
from replication.train import run_folder, run_log


@pytest.fixture(scope="module")
def full_run(small_overrides, tmp_path_factory) -> Path:
    """An uninterrupted 4-step run (checkpoints at 2 and 4): the reference."""
    out = tmp_path_factory.mktemp("full") / "run"
    assert main(train_args(small_overrides, out)) == 0
    return out


@pytest.fixture(scope="module")
def half_run(small_overrides, tmp_path_factory) -> Path:
    """The same run stopped after 2 steps (its checkpoint is at step 2)."""
    out = tmp_path_factory.mktemp("half") / "run"
    assert main(train_args(small_overrides, out, "--max-steps", "2")) == 0
    return out


def _same_as(full: Path, out: Path) -> None:
    assert run_metrics(full)["eval_after"] == run_metrics(out)["eval_after"]
    for name in ("steps.jsonl", "prompts.jsonl"):
        a = [json.loads(x) for x in (full / name).read_text().splitlines()]
        b = [json.loads(x) for x in (out / name).read_text().splitlines()]
        drop = ("seconds",)  # timings differ between runs
        strip = lambda rows: [{k: v for k, v in r.items() if not any(d in k for d in drop)} for r in rows]  # noqa: E731
        assert strip(a) == strip(b), name


def test_finished_run_has_a_manifest_that_verifies(full_run):
    manifest = verify_run(full_run, kind="run")
    names = set(manifest["files"])
    assert {"metrics.json", "steps.jsonl", "prompts.jsonl", "config.json", "checkpoint/state.pt"} <= names
    assert manifest["files"]["steps.jsonl"]["rows"] == 4
    # the manifest is the last file written
    newest = max((p for p in full_run.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == MANIFEST


def test_resume_on_a_folder_another_trainer_just_created_is_refused(small_overrides, tmp_path, capsys):
    """Issue 18.3: trainer A creates the folder; trainer B (--resume) started meanwhile is refused
    with one line naming the folder and A's pid; A ends with every row (no lost steps)."""
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    a = subprocess.Popen([sys.executable, "-m", "replication", *train_args(small_overrides, out)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # A holds the lock before the folder exists; B arrives once A has created it
        assert wait_until(lambda: (out / "config.json").exists() or a.poll() is not None, 120)
        assert a.poll() is None, a.stderr.read()
        assert main(train_args(small_overrides, out, "--resume")) == 2
        one_line_error(capsys.readouterr().err, str(out), f"pid {a.pid}")
    finally:
        a.wait(timeout=300)
    assert a.returncode == 0
    assert len((out / "steps.jsonl").read_text().splitlines()) == 4
    verify_run(out, kind="run")


def test_lock_is_taken_before_the_folder_exists(tmp_path):
    out = tmp_path / "new" / "run"
    run_folder.lock_run(out)
    try:
        assert not out.exists() and out.parent.is_dir()
        probe = subprocess.run([sys.executable, "-c", (
            "import sys; sys.path.insert(0, sys.argv[2]);"
            "from replication.train.run_folder import lock_run, RunFolderError\n"
            "try:\n lock_run(sys.argv[1])\nexcept RunFolderError as e:\n print(e)"), str(out), str(ROOT)],
            capture_output=True, text=True, timeout=120)
        assert str(out) in probe.stdout and f"pid {os.getpid()}" in probe.stdout, probe
    finally:
        run_folder.unlock_run(out)


def test_checkpoint_copied_alone_is_not_resumable(small_overrides, half_run, tmp_path, capsys):
    out = tmp_path / "fresh"
    out.mkdir()
    shutil.copytree(half_run / "checkpoint", out / "checkpoint")
    assert main(train_args(small_overrides, out, "--resume")) == 2
    one_line_error(capsys.readouterr().err, "--resume", "step 2", str(out / "steps.jsonl"))
    assert not (out / "metrics.json").exists() and not (out / "steps.jsonl").exists()
    # logs that stop short of the checkpoint are refused the same way
    shutil.copytree(half_run, tmp_path / "short")
    steps = tmp_path / "short" / "steps.jsonl"
    steps.write_text(steps.read_text().splitlines()[0] + "\n")
    assert main(train_args(small_overrides, tmp_path / "short", "--resume")) == 2
    one_line_error(capsys.readouterr().err, "1 of the checkpoint's 2 steps")


def test_resume_trims_a_partial_last_line(small_overrides, full_run, half_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(half_run, out)
    (out / "metrics.json").unlink()
    (out / MANIFEST).unlink()
    with open(out / "steps.jsonl", "a") as f:
        f.write('{"step": 2, "rew')  # a write cut by a kill or a full disk
    with open(out / "prompts.jsonl", "a") as f:
        f.write('{"step": 2, "prompt_id": "ad')
    with pytest.warns(UserWarning, match="partial last line"):
        assert main(train_args(small_overrides, out, "--resume")) == 0
    _same_as(full_run, out)
    verify_run(out, kind="run")


def _enospc_after(monkeypatch, n_calls: int, target, name: str, partial: bool = True) -> None:
    """Make ``target.name`` write part of its data and then fail with ENOSPC from call n on."""
    real = getattr(target, name)
    calls = {"n": 0}

    def failing(fd, data):
        calls["n"] += 1
        if calls["n"] >= n_calls:
            if partial:
                os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(target, name, failing)


def test_disk_full_while_logging_then_resume(small_overrides, full_run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    _enospc_after(monkeypatch, 5, run_log, "_write")  # step 2's steps.jsonl row (2 writes a step)
    assert main(train_args(small_overrides, out)) == 1
    line = one_line_error(capsys.readouterr().err, str(out / "steps.jsonl"), "No space left on device", "free")
    assert "Traceback" not in line
    assert not (out / "metrics.json").exists() and not (out / MANIFEST).exists()
    assert (out / "steps.jsonl").read_text().endswith("\n")  # cut back to the last whole line
    monkeypatch.undo()
    assert main(train_args(small_overrides, out, "--resume")) == 0
    _same_as(full_run, out)


def test_disk_full_while_checkpointing_removes_the_temporary(small_overrides, tmp_path, capsys, monkeypatch):
    """The real torch.save writing into a file whose disk fills after 4 KiB (torch turns the
    OSError into an opaque RuntimeError; the checkpoint code recovers and names it)."""
    out = tmp_path / "run"

    class FillingFile:
        def __init__(self, path, mode):
            self.f, self.written = open(path, mode), 0

        def write(self, data):
            if self.written + len(data) > 4096:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(ck, "open", FillingFile, raising=False)
    assert main(train_args(small_overrides, out)) == 1
    one_line_error(capsys.readouterr().err, str(out / ".checkpoint.tmp" / "state.pt"),
                   "No space left on device", "free")
    assert not (out / ".checkpoint.tmp").exists()
    assert not (out / "metrics.json").exists()


def test_disk_full_writing_metrics_leaves_no_finished_run(small_overrides, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    real_fsync = os.fsync

    def finish(path, metrics):  # the disk fills while metrics.json is flushed
        def fsync(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", fsync)
        try:
            real_finish(path, metrics)
        finally:
            monkeypatch.setattr(os, "fsync", real_fsync)

    real_finish = run_folder.finish_run
    import replication.train.loop as loop

    monkeypatch.setattr(loop, "finish_run", finish)
    assert main(train_args(small_overrides, out)) == 1
    one_line_error(capsys.readouterr().err, "metrics.json", "free")
    assert not (out / MANIFEST).exists()
    assert not [p for p in out.iterdir() if ".tmp" in p.name], list(out.iterdir())
    with pytest.raises(DamagedArtifact):
        verify_run(out)
    # what an old trainer left on a full disk: a 0-byte metrics.json is no finished run
    (out / "metrics.json").write_text("")
    with pytest.raises(DamagedArtifact, match="MANIFEST|manifest"):
        verify_run(out)
