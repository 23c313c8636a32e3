"""One writer per artifact: an exclusive, non-blocking ``flock`` on a lock file beside it.

The lock file is ``<parent>/.<name>.lock``, so the artifact itself need not exist yet: a trainer
takes it *before* it creates its run folder, and a second trainer started a moment later (or a
``--resume`` relaunch while the old ranks still live) is refused. The kernel releases a flock when
its process dies, however it dies, so a crash never leaves a stale lock; the file stays (removing
it would race with a process that has just opened it) and carries the last holder's pid, command
line and start time, which the refusal names. Within one process the lock is re-entrant.

The lock belongs to the artifact, not to the spelling of its path: the target is resolved
(symlinks followed, ``..`` removed) before the lock file is named, so two writers that reach one
folder through a symlink and its real path meet at the same lock. The holder's record names its
host as well as its pid: a lock file on a shared file system may be held from another machine,
where the pid means nothing here.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from replication.config import ConfigError
from replication.store.atomic import io_errors


class LockHeld(ConfigError):
    """Another process is writing this artifact (exit 2; one line naming it and the holder)."""


_HELD: dict[str, list] = {}  # lock path -> [fd, depth]


def lock_path(target: str | Path) -> Path:
    """``.<name>.lock`` beside the resolved target (the same file whichever path reaches it)."""
    target = Path(target).expanduser().resolve()
    return target.parent / f".{target.name}.lock"


def is_lock_file(name: str) -> bool:
    """Whether a file name is a writer lock's (``lock_path``: ``.<artifact>.lock``)."""
    return name.startswith(".") and name.endswith(".lock")


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another process"
    cmd = info.get("cmd", "")
    cmd = cmd if len(cmd) <= 80 else cmd[:77] + "..."
    host = info.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    return f"pid {info.get('pid', '?')}{where} ({cmd}) since {info.get('started', '?')}"


def _acquire(target: Path, what: str) -> str:
    path = lock_path(target)
    key = str(path)
    if key in _HELD:
        _HELD[key][1] += 1
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: one writer is not enforced
        _HELD[key] = [None, 1]
        return key
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise LockHeld(f"{target} is being written by {_holder(path)}"
                       + (f"; {what}" if what else "")) from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "cmd": " ".join(sys.argv) or sys.executable,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        with io_errors(path):  # a full disk: one line naming the lock file (lock released)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = [fd, 1]
    return key


def _release(key: str) -> None:
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        _HELD.pop(key)
        if held[0] is not None:
            os.close(held[0])  # closing the descriptor drops the flock


@contextlib.contextmanager
def writer_lock(target: str | Path, what: str = "") -> Iterator[Path]:
    """Hold the writer lock of ``target`` for the block; ``LockHeld`` if another process has it."""
    key = _acquire(Path(target), what)
    try:
        yield Path(target)
    finally:
        _release(key)


def hold_writer_lock(target: str | Path, what: str = "") -> None:
    """Take the writer lock of ``target`` for the rest of this process's life (or until
    ``release_writer_lock``); ``LockHeld`` if another process has it."""
    _acquire(Path(target), what)


def release_writer_lock(target: str | Path) -> None:
    _release(str(lock_path(target)))
