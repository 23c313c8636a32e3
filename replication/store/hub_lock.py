"""The hub lock file: the commit every hub model and dataset was fetched at.

    {"models": {"Qwen/Qwen2.5-Math-1.5B": "<40 hex>"}, "datasets": {"HuggingFaceH4/MATH-500": "<40 hex>"}}

``python -m replication prefetch`` writes it (replication/prefetch.py) on a machine that reaches
the hub; a run reads it to load each hub repo at that commit from the local cache
(store/hub_snapshot.py: models in replication/models/hub.py, datasets in tasks/math_hub.py), and a
run's key records it (store/run_key.py ``hub_revisions``). ``read_hub_lock`` is the one reader.
The file is ``$REPLICATION_HUB_LOCK``, else ``hub.lock.json`` in the working folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from replication.config.errors import ConfigError

HUB_LOCK_ENV = "REPLICATION_HUB_LOCK"
HUB_LOCK = "hub.lock.json"
"""The hub lock file: {"models": {id: commit}, "datasets": {id: commit}} as resolved when they
were fetched; read from ``$REPLICATION_HUB_LOCK`` or ``hub.lock.json`` in the working folder."""
KINDS = ("models", "datasets")
"""The lock's sections, one per kind of hub repository."""
REPO_TYPE = {"models": "model", "datasets": "dataset"}
"""huggingface_hub's ``repo_type`` of each section."""


class HubLockError(ConfigError):
    """A lock file that cannot be read, or a fetch that would change a locked commit."""


def lock_path(path: str | Path | None = None) -> Path:
    """The lock file: ``path``, else ``$REPLICATION_HUB_LOCK``, else ``hub.lock.json`` here."""
    return Path(path or os.environ.get(HUB_LOCK_ENV) or HUB_LOCK)


def empty_lock() -> dict[str, dict[str, str]]:
    return {kind: {} for kind in KINDS}


def read_hub_lock(path: str | Path | None = None) -> dict[str, dict[str, str]]:
    """The lock file's {"models": {...}, "datasets": {...}}, or empty maps when there is none.
    A file that is not such a mapping of ids to commits is a ``HubLockError`` naming it."""
    path = lock_path(path)
    if not path.exists():
        return empty_lock()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise HubLockError(f"{path}: unreadable hub lock file ({err})") from None
    if not isinstance(data, Mapping) or set(data) - set(KINDS):
        raise HubLockError(f"{path}: not a hub lock file; expected {{\"models\": {{id: commit}}, "
                           f"\"datasets\": {{id: commit}}}}")
    lock = empty_lock()
    for kind in KINDS:
        entries = data.get(kind) or {}
        if not isinstance(entries, Mapping) or not all(isinstance(v, str) and v for v in entries.values()):
            raise HubLockError(f"{path}: {kind}: expected a mapping of hub id to commit, got {entries!r}")
        lock[kind] = dict(entries)
    return lock


def locked_revision(kind: str, repo_id: str, lock: Mapping | None = None) -> str | None:
    """The commit the lock (``lock``, else the lock file) pins ``repo_id`` to, or None."""
    if kind not in KINDS:
        raise ValueError(f"hub lock kind {kind!r}: one of {list(KINDS)}")
    lock = read_hub_lock() if lock is None else lock
    return (lock.get(kind) or {}).get(repo_id)


def merge_lock(old: Mapping, found: Mapping, update: bool = False) -> dict[str, dict[str, str]]:
    """``old`` with the commits in ``found`` added. A commit in ``found`` that differs from the
    one ``old`` holds for the same id is a ``HubLockError`` listing them all, unless ``update``."""
    changed = [f"{kind[:-1]} {repo_id} {old[kind][repo_id][:12]} -> {commit[:12]}"
               for kind in KINDS for repo_id, commit in (found.get(kind) or {}).items()
               if old.get(kind, {}).get(repo_id, commit) != commit]
    if changed and not update:
        raise HubLockError(f"{len(changed)} locked item(s) now resolve to another commit: {'; '.join(changed)}; "
                           f"the lock is left as it is (pass --update to take the new commits: runs keyed on the old "
                           f"ones will no longer match)")
    return {kind: dict(sorted({**(old.get(kind) or {}), **(found.get(kind) or {})}.items())) for kind in KINDS}


def dump_lock(lock: Mapping) -> str:
    """The lock file's text: sorted, one entry a line (diffs stay readable)."""
    return json.dumps({kind: dict(sorted((lock.get(kind) or {}).items())) for kind in KINDS},
                      indent=1, sort_keys=True) + "\n"


def write_hub_lock(lock: Mapping, path: str | Path | None = None) -> bool:
    """Write ``lock`` atomically to the lock file; False (nothing written) when it already holds
    exactly that text."""
    from replication.store.atomic import write_atomic

    path = lock_path(path)
    text = dump_lock(lock)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)
    return True
