"""The manifest: the last file an artifact's writer writes, and what makes the artifact exist.

``MANIFEST.json`` lists every file of the folder (relative path, size, SHA-256 and, for JSONL
logs, the number of rows), the artifact's ``kind`` and what its writer adds (``extra``: the
run's steps, its cache key...). A folder without a manifest, or whose files no longer match it,
is damaged: ``verify_manifest`` raises ``DamagedArtifact`` with one line naming the folder and the
first problem. Names starting with a dot (locks, temporary files, a checkpoint's previous copy)
are not part of an artifact.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
from pathlib import Path

from replication.store.atomic import write_atomic

MANIFEST = "MANIFEST.json"
FORMAT = 1


class DamagedArtifact(RuntimeError):
    """An artifact whose manifest is missing or does not match its files."""


def _files(folder: Path) -> list[Path]:
    out = []
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder)
        if rel.as_posix() == MANIFEST or any(p.startswith(".") for p in rel.parts):
            continue
        if f.is_file():
            out.append(f)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def jsonl_rows(path: Path) -> int:
    """Number of non-empty lines of a ``.jsonl`` or ``.jsonl.gz`` file."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _describe(path: Path) -> dict:
    entry = {"size": path.stat().st_size, "sha256": _sha256(path)}
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        entry["rows"] = jsonl_rows(path)
    return entry


def write_manifest(folder: str | Path, *, kind: str, extra: dict | None = None, files=None) -> dict:
    """Describe every file of ``folder`` (or only ``files``, paths inside it) and write
    ``folder/MANIFEST.json`` atomically, last."""
    folder = Path(folder)
    manifest = {
        "format": FORMAT,
        "kind": kind,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": {f.relative_to(folder).as_posix(): _describe(f) for f in (_files(folder) if files is None else files)},
        **({"extra": extra} if extra else {}),
    }
    write_atomic(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_manifest(folder: str | Path) -> dict:
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise DamagedArtifact(f"{folder}: no {MANIFEST} (incomplete: its writer did not finish)")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DamagedArtifact(f"{path}: unreadable manifest ({type(e).__name__})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise DamagedArtifact(f"{path}: not a manifest")
    return manifest


def verify_manifest(folder: str | Path, *, kind: str | None = None, checksums: bool = True) -> dict:
    """The manifest of ``folder`` once every file it lists matches (size, SHA-256, rows); else
    ``DamagedArtifact`` naming the folder and the first problem. Files the manifest does not list
    are not checked (a grid's ``train.log`` beside a run, say)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    if kind is not None and manifest.get("kind") != kind:
        raise DamagedArtifact(f"{folder}: manifest of a {manifest.get('kind')!r}, expected {kind!r}")
    for rel, want in sorted(manifest["files"].items()):
        f = folder / rel
        if not f.is_file():
            raise DamagedArtifact(f"{f}: missing (listed in {folder / MANIFEST})")
        size = f.stat().st_size
        if size != want.get("size"):
            raise DamagedArtifact(f"{f}: {size} bytes, manifest says {want.get('size')} (damaged or changed)")
        if checksums and _sha256(f) != want.get("sha256"):
            raise DamagedArtifact(f"{f}: checksum differs from {folder / MANIFEST} (damaged or changed)")
    return manifest


def is_complete(folder: str | Path, *, kind: str | None = None) -> bool:
    try:
        verify_manifest(folder, kind=kind)
    except DamagedArtifact:
        return False
    return True
