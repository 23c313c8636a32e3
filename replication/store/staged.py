"""Complete or absent, for a folder: built beside its place, sealed with a manifest, swapped in.

A reader never sees half a folder: ``staged_dir`` yields a temporary folder, writes its manifest
last and renames it over the destination only when the block succeeded; a failure (a full disk,
Ctrl-C, an exception) removes the temporary folder and leaves the destination as it was.
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
def staged_dir(dest: str | Path, *, kind: str, extra: dict | None = None) -> Iterator[Path]:
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
            write_manifest(tmp, kind=kind, extra=extra)
            if dest.exists():
                os.rename(dest, old)
            os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
