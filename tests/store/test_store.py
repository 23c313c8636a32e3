"""The evidence-store primitives: one writer, complete-or-absent, verified on read (issue 18)."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from replication.store import (
    MANIFEST,
    DamagedArtifact,
    DiskFull,
    LockHeld,
    is_complete,
    staged_dir,
    verify_manifest,
    write_atomic,
    write_manifest,
    writer_lock,
)


def _holder_process(target: Path, ready: Path) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import time, pathlib
        from replication.store import hold_writer_lock
        hold_writer_lock({str(target)!r})
        pathlib.Path({str(ready)!r}).write_text("held")
        time.sleep(60)
    """)
    return subprocess.Popen([sys.executable, "-c", code])


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    import time
    for _ in range(300):
        if path.exists():
            return
        assert proc.poll() is None, "holder process died"
        time.sleep(0.05)
    raise AssertionError("holder never took the lock")


def test_second_writer_is_refused_naming_folder_and_holder_then_lock_dies_with_holder(tmp_path):
    target = tmp_path / "runs" / "x"  # does not exist yet: the lock comes before the folder
    ready = tmp_path / "ready"
    proc = _holder_process(target, ready)
    try:
        _wait_for(ready, proc)
        assert not target.exists()
        with pytest.raises(LockHeld) as e:
            with writer_lock(target):
                pass
        msg = str(e.value)
        assert str(target) in msg and f"pid {proc.pid}" in msg and "\n" not in msg
    finally:
        proc.kill()
        proc.wait()
    with writer_lock(target):  # the kernel released it with the process
        pass


def test_the_lock_is_the_folders_whatever_path_reaches_it(tmp_path):
    """Two writers on one folder through a symlink meet at one lock; the record names the host."""
    import socket

    real = tmp_path / "real" / "run"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    ready = tmp_path / "ready"
    proc = _holder_process(real, ready)
    try:
        _wait_for(ready, proc)
        with pytest.raises(LockHeld, match=f"pid {proc.pid}"):
            with writer_lock(tmp_path / "link" / "run"):
                pass
        with pytest.raises(LockHeld):
            with writer_lock(tmp_path / "link" / ".." / "real" / "run"):
                pass
        info = json.loads((tmp_path / "real" / ".run.lock").read_text())
        assert info["host"] == socket.gethostname() and info["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_lock_is_reentrant_within_a_process(tmp_path):
    with writer_lock(tmp_path / "a"):
        with writer_lock(tmp_path / "a"):
            pass
        with writer_lock(tmp_path / "a"):
            pass


def test_manifest_roundtrip_and_each_kind_of_damage(tmp_path):
    d = tmp_path / "art"
    d.mkdir()
    (d / "metrics.json").write_text('{"steps": 3}')
    (d / "steps.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    with gzip.open(d / "prompts.jsonl.gz", "wt") as f:
        f.write('{"p": 1}\n{"p": 2}\n')
    (d / ".lock").write_text("x")  # dot files are not part of the artifact
    m = write_manifest(d, kind="run-export", extra={"steps": 3})
    assert m["files"]["steps.jsonl"]["rows"] == 3 and m["files"]["prompts.jsonl.gz"]["rows"] == 2
    assert ".lock" not in m["files"]
    assert verify_manifest(d, kind="run-export")["extra"] == {"steps": 3}
    with pytest.raises(DamagedArtifact, match="expected 'measurement'"):
        verify_manifest(d, kind="measurement")

    # a log cut short: size differs
    good = (d / "steps.jsonl").read_bytes()
    (d / "steps.jsonl").write_bytes(good[:10])
    with pytest.raises(DamagedArtifact, match="steps.jsonl: 10 bytes"):
        verify_manifest(d)
    # same size, other bytes: checksum
    (d / "steps.jsonl").write_bytes(good.replace(b"2", b"9"))
    with pytest.raises(DamagedArtifact, match="checksum"):
        verify_manifest(d)
    (d / "steps.jsonl").write_bytes(good)
    (d / "metrics.json").unlink()
    with pytest.raises(DamagedArtifact, match="metrics.json: missing"):
        verify_manifest(d)
    (d / MANIFEST).write_text("{not json")
    with pytest.raises(DamagedArtifact, match="unreadable manifest"):
        verify_manifest(d)
    (d / MANIFEST).unlink()
    assert not is_complete(d)
    with pytest.raises(DamagedArtifact, match="no MANIFEST.json"):
        verify_manifest(d)


def test_staged_dir_swaps_in_on_success_and_leaves_dest_on_failure(tmp_path):
    dest = tmp_path / "tables"
    with staged_dir(dest, kind="stage") as tmp:
        (tmp / "a.md").write_text("v1")
    assert (dest / "a.md").read_text() == "v1" and is_complete(dest, kind="stage")
    with pytest.raises(KeyboardInterrupt):
        with staged_dir(dest, kind="stage") as tmp:
            (tmp / "a.md").write_text("half")
            raise KeyboardInterrupt
    assert (dest / "a.md").read_text() == "v1" and is_complete(dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]  # no temporary left
    with staged_dir(dest, kind="stage") as tmp:
        (tmp / "b.md").write_text("v2")
    assert sorted(p.name for p in dest.iterdir()) == [MANIFEST, "b.md"]


def test_interrupted_swap_is_restored(tmp_path):
    dest = tmp_path / "out"
    with staged_dir(dest, kind="stage") as tmp:
        (tmp / "a").write_text("1")
    os.rename(dest, tmp_path / f".out.old-{os.getpid() + 1}")  # killed between the two renames
    with staged_dir(dest, kind="stage") as tmp:
        assert (dest / "a").read_text() == "1"  # the old, complete copy is back before the new one
        (tmp / "a").write_text("2")
    assert (dest / "a").read_text() == "2"


def test_disk_full_is_one_line_naming_file_and_free_space_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFull) as e:
        write_atomic(target, json.dumps({"x": 1}))
    msg = str(e.value)
    assert str(target) in msg and "MiB free" in msg and "\n" not in msg
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    write_atomic(target, "ok")
    assert target.read_text() == "ok" and list(tmp_path.iterdir()) == [target]


def test_disk_full_inside_staged_dir_removes_the_temporary_folder(tmp_path):
    dest = tmp_path / "export"
    with pytest.raises(DiskFull, match="export"):
        with staged_dir(dest, kind="x") as tmp:
            (tmp / "big").write_text("partial")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []
