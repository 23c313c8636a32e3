"""Complete or absent, for one file: written beside its place, fsynced and renamed in.

A reader never sees half a file (``write_atomic``). A write that fails for a reason outside the
program — a full disk, a quota, a file-size limit, a read-only disk, a permission, an I/O error —
is one line naming the file and the free space (``DiskFull``, whatever the cause: the name is
older than the list), and the temporary file it was writing is removed rather than left to fill
the disk. Libraries that write through Rust or SQLite (safetensors, tokenizers, dvclive's DVC
repo) hide the errno in their own exception types; ``io_errors`` finds it there too.
A process over its ``RLIMIT_FSIZE`` is killed by SIGXFSZ unless it ignores the signal; the CLI
calls ``ignore_file_size_signal`` so that such a write fails with EFBIG and is reported.
Folders: ``staged.staged_dir`` and ``staged.staged_files``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import shutil
import signal
from pathlib import Path
from typing import Iterator

_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM)
_RUST_OS_ERROR = re.compile(r"os error (\d+)")
# SQLite's primary result codes for a write the disk refused (sqlite3.h), as errnos
_SQLITE = {13: errno.ENOSPC, 10: errno.EIO, 8: errno.EROFS, 3: errno.EACCES, 23: errno.EACCES}


class DiskFull(OSError):
    """Writing ``path`` failed for a reason outside the program (space, quota, file-size limit,
    read-only disk, permission, I/O error); the message is one line."""


def ignore_file_size_signal() -> None:
    """Make a write past ``RLIMIT_FSIZE`` fail with EFBIG (reported as one line) instead of the
    kernel's SIGXFSZ killing the process with a core dump and a half-written file."""
    with contextlib.suppress(ValueError, AttributeError):  # not the main thread / no SIGXFSZ
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def write_errno(e: BaseException) -> int | None:
    """The errno of a failed write, from an OSError or from a library's wrapper of one (the
    message of a Rust ``io::Error``: "... (os error 28)"; SQLite's result code); None if none."""
    if isinstance(e, OSError):
        return e.errno
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return _SQLITE.get(code & 0xFF)
    m = _RUST_OS_ERROR.search(str(e))
    return int(m.group(1)) if m else None


def _free(path: Path) -> str:
    probe = Path(path).absolute()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "free space unknown"
    return f"{free / 2**20:.1f} MiB free on {probe}"


def _limit(code: int) -> str:
    """The file-size limit, when it is what a write ran into."""
    if code != errno.EFBIG:
        return ""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return "" if soft == resource.RLIM_INFINITY else f"; file-size limit {soft} bytes"


def _culprit(path: Path, e: BaseException, code: int | None, cleanup: tuple[Path, ...],
             unnamed: str | None) -> Path:
    """The file that failed, named where it was going: the OSError's own file name; for a
    library's error (which names none) ``path / unnamed``; else the file in a temporary folder
    being written (mapped from the temporary folder to ``path``) or in the folder ``path``;
    else ``path`` itself."""
    folders = [p for p in cleanup if p.is_dir() and not p.is_symlink()]
    if unnamed is not None and not isinstance(e, OSError):
        return path / unnamed
    name = getattr(e, "filename", None)
    if name is not None:
        name = Path(os.fsdecode(name)).absolute()
        if any(name == p.absolute() for p in cleanup):  # the temporary file of write_atomic
            return path
        if name == path.absolute() or name.is_relative_to(path.absolute()):
            return name
        for tmp in folders:
            if name.is_relative_to(tmp.absolute()):
                return _where(path, tmp) / name.relative_to(tmp.absolute())
        return name
    for tmp in folders:
        files = [f for f in tmp.rglob("*") if f.is_file()]
        if files:
            return _where(path, tmp) / _failed_file(files, code).relative_to(tmp)
    if path.is_dir():  # a folder written in place (dvclive's): the file in it that failed
        files = [f for f in path.rglob("*") if f.is_file()]
        if files:
            return _failed_file(files, code)
    return path


def _where(path: Path, tmp: Path) -> Path:
    """Where the files of the temporary folder ``tmp`` are going: ``path``, unless ``path`` names
    a file inside ``tmp`` (the checkpoint's message names its temporary folder)."""
    return tmp if path.absolute().is_relative_to(tmp.absolute()) else path


def _failed_file(files: list[Path], code: int | None) -> Path:
    """Under a file-size limit, the file that stopped exactly at it (the kernel writes up to the
    limit, then refuses); else the newest (file times are coarse: a tie goes to the later inode,
    i.e. the later created file on tmpfs and in a fresh ext4 folder)."""
    if code == errno.EFBIG:
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        full = [f for f in files if f.stat().st_size == soft]
        if full:
            return full[0]
    return max(files, key=lambda f: (f.stat().st_mtime_ns, f.stat().st_ino))


@contextlib.contextmanager
def io_errors(path: str | Path, *cleanup: str | Path, unnamed: str | None = None) -> Iterator[None]:
    """Turn a failed write inside the block (see ``write_errno``) into ``DiskFull`` naming the file
    (``path`` or the file under it that failed) and the free space, after removing the
    ``cleanup`` paths (files or folders); any other exception passes unchanged. ``unnamed``: the
    file under ``path`` that a library writes when its error names none (safetensors also
    deletes its partial file, so nothing on disk says which one failed)."""
    try:
        yield
    except Exception as e:
        code = write_errno(e)
        if isinstance(e, DiskFull) or code not in _DISK_ERRNOS:
            raise
        paths = tuple(Path(p) for p in cleanup)
        where = _culprit(Path(path), e, code, paths, unnamed)
        for p in paths:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()
        # SQLite names no file (dvclive's DVC repository keeps its index under /var/tmp/dvc)
        also = " or a database it opens" if hasattr(e, "sqlite_errorcode") else ""
        raise DiskFull(code, f"cannot write {where}{also}: {os.strerror(code)}{_limit(code)} "
                             f"({_free(Path(path))})") from None


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
