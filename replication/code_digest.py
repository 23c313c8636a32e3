"""One digest of source code, for every cache key that must change when the code that produced
a result changes: the run cache (orchestration/run_cache.py: all training code), the base model
(orchestration/base_model.py: the code that builds it) and the gradient-variance measurement
(analysis/measurement_cache.py: training code plus the measurement's own).

The digest is SHA-256 over, for each file in order, its path relative to ``root``, a NUL byte
and its bytes; 16 hex characters are kept. Keys committed beside results (results/base-model's
BASE_KEY) depend on this exact byte sequence, so it must not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""The ``replication`` package folder."""


def _python_files(root: Path, include: Sequence[str] | None, exclude: Iterable[str]) -> list[Path]:
    exclude = set(exclude)
    if include is None:
        found = sorted(root.rglob("*.py"))
    else:
        found = []
        for entry in include:  # in the given order: each entry's files sorted
            path = root / entry
            found += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in found
            if "__pycache__" not in f.relative_to(root).parts and f.relative_to(root).parts[0] not in exclude]


def code_digest(root: str | Path | None = None, *, include: Sequence[str] | None = None,
                exclude: Iterable[str] = ()) -> str:
    """Digest (16 hex) of the ``*.py`` files under ``root`` (default: the package).

    ``include``: files or folders relative to ``root``, hashed in the given order (a folder's
    files sorted); None = every file under ``root`` in sorted order. ``exclude``: top-level
    names under ``root`` left out (e.g. sub-packages that never run inside training)."""
    root = Path(root) if root is not None else PACKAGE
    h = hashlib.sha256()
    for f in _python_files(root, include, exclude):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


NOT_TRAINING = ("report", "orchestration", "analysis")
"""Sub-packages that never run inside ``train``: they read finished runs, schedule them, or
measure gradients outside training, so editing them does not invalidate a trained run."""


def training_code_digest(root: str | Path | None = None) -> str:
    """The digest of the code a training run executes: every ``*.py`` of the package except
    ``NOT_TRAINING`` (the run cache's key, and every run's provenance)."""
    return code_digest(root if root is not None else PACKAGE, exclude=NOT_TRAINING)
