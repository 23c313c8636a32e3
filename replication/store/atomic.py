"""Complete or absent, for one file: written beside its place, fsynced and renamed in.

A reader never sees half a file (``write_atomic``); a full disk or an I/O error is one line naming
the file and the free space (``DiskFull``), and the temporary file it was writing is removed
rather than left to fill the disk. Folders: ``staged.staged_dir``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Iterator

_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS)


class DiskFull(OSError):
    """Writing ``path`` failed for lack of space or an I/O error; the message is one line."""


def _free(path: Path) -> str:
    probe = Path(path).absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "free space unknown"
    return f"{free / 2**20:.1f} MiB free on {probe}"


@contextlib.contextmanager
def io_errors(path: str | Path, *cleanup: str | Path) -> Iterator[None]:
    """Turn a disk-full / I/O ``OSError`` inside the block into ``DiskFull`` naming ``path`` and the
    free space, after removing the ``cleanup`` paths (files or folders)."""
    try:
        yield
    except OSError as e:
        if isinstance(e, DiskFull) or e.errno not in _DISK_ERRNOS:
            raise
        for p in cleanup:
            p = Path(p)
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()
        raise DiskFull(e.errno, f"cannot write {path}: {os.strerror(e.errno)} ({_free(Path(path))})") from None


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it and rename it over ``path``."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    raw = data.encode() if isinstance(data, str) else data
    with io_errors(path, tmp):
        try:
            with open(tmp, "wb") as f:
                f.write(raw)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
