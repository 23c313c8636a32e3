"""Complete or absent, for a folder: built beside its place, sealed with a manifest, swapped in.

A reader never sees half a folder: ``staged_dir`` yields a temporary folder, writes its manifest
last and renames it over the destination only when the block succeeded; a failure (a full disk,
Ctrl-C, an exception) removes the temporary folder and leaves the destination as it was.
``kind=None`` swaps a folder in without a manifest (a model folder: its files are the library's).

``staged_files`` is for a folder that holds other files too (a base-model folder beside its
report and key): the new files are written into a temporary folder beside it and then renamed
in one by one, so each file is complete or absent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

from replication.store.atomic import io_errors
from replication.store.manifest import write_manifest


def _restore_interrupted_swap(dest: Path) -> None:
    """A kill between the two renames of a swap leaves ``dest`` absent and the old copy beside it:
    put the old copy back (it was complete)."""
    if dest.exists():
        return
    olds = sorted(dest.parent.glob(f".{dest.name}.old-*"))
    if olds:
        os.rename(olds[-1], dest)


@contextlib.contextmanager
def staged_dir(dest: str | Path, *, kind: str | None, extra: dict | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``dest``; on success write its manifest (last) and
    swap it into ``dest`` (a previous ``dest`` is removed only once the new one is in place); on
    any exception remove the temporary folder and leave ``dest`` as it was."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _restore_interrupted_swap(dest)
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    old = dest.parent / f".{dest.name}.old-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with io_errors(dest, tmp):
            yield tmp
            if kind is not None:
                write_manifest(tmp, kind=kind, extra=extra)
            if dest.exists():
                os.rename(dest, old)
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_files(dest: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``dest``; on success fsync every file written there
    and rename each into ``dest`` (created; other files in it stay); on any exception remove the
    temporary folder, so no half-written file ever reaches ``dest`` (a failed write: DiskFull)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.files-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with io_errors(dest, tmp):
            yield tmp
            files = sorted(p for p in tmp.rglob("*") if p.is_file())
            for f in files:
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            for f in files:
                target = dest / f.relative_to(tmp)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(f, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
