"""The evidence store: every artifact on disk (a run folder, a cache entry, an export, a
measurement, a stage's outputs) has one writer, is written beside its place and renamed in, and
carries a manifest that readers verify (docs/faults.md, *Evidence on disk*; issue 18).

    with writer_lock(dest):                       # a second writer gets LockHeld naming the holder
        with staged_dir(dest, kind="run-export", extra={"steps": 300}) as tmp:
            ...write files into tmp...            # the manifest is written last, then tmp -> dest
    verify_manifest(dest, kind="run-export")      # DamagedArtifact names the folder and the problem
"""

from replication.store.atomic import DiskFull, ignore_file_size_signal, io_errors, write_atomic
from replication.store.lock import LockHeld, hold_writer_lock, release_writer_lock, writer_lock
from replication.store.manifest import MANIFEST, DamagedArtifact, is_complete, verify_manifest, write_manifest
from replication.store.staged import staged_dir, staged_files

__all__ = [
    "MANIFEST", "DamagedArtifact", "DiskFull", "LockHeld", "hold_writer_lock", "ignore_file_size_signal",
    "io_errors", "is_complete", "release_writer_lock", "staged_dir", "staged_files", "verify_manifest",
    "write_atomic", "write_manifest", "writer_lock",
]
