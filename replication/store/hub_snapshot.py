"""Where a pinned hub repository lives on this machine: its snapshot folder in the hub cache.

    folder = pinned_snapshot("models", "Qwen/Qwen2.5-Math-1.5B")   # None: neither pin nor lock
    model = AutoModelForCausalLM.from_pretrained(folder)               # no network call

A repo is pinned by the caller's revision (a config's pin), else by the hub lock file
(store/hub_lock.py). A pinned repo found complete in the hub cache (``HF_HUB_CACHE``, the cache
``prefetch`` filled) is read from there without any network call, whether or not
``HF_HUB_OFFLINE`` is set; one missing is fetched when the hub may be used, and is a
``HubSnapshotMissing`` naming ``prefetch`` when it may not (``HF_HUB_OFFLINE``). huggingface_hub
does the fetching and the cache layout (``snapshot_download``).
"""

from __future__ import annotations

import os
from pathlib import Path

from replication.store.hub_lock import REPO_TYPE, locked_revision

PREFETCH_HINT = ("run `python -m replication prefetch --scale paper` on a machine that reaches the hub, "
                 "with the same HF_HUB_CACHE (docs/paper_scale.md)")


class HubSnapshotMissing(RuntimeError):
    """A pinned repo that is not in the hub cache while the hub may not be used."""


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``, ``TRANSFORMERS_OFFLINE``) set, read now."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def pinned_revision(kind: str, repo_id: str, revision: str | None = None) -> str | None:
    """``revision`` (the config's pin), else the lock file's commit for ``repo_id``, else None."""
    return revision or locked_revision(kind, repo_id)


def cached_snapshot(kind: str, repo_id: str, revision: str, cache_dir: str | Path | None = None) -> Path | None:
    """The complete snapshot folder of ``repo_id`` at ``revision`` in the hub cache, or None;
    never a network call."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, repo_type=REPO_TYPE[kind], revision=revision,
                                      cache_dir=cache_dir, local_files_only=True))
    except LocalEntryNotFoundError:  # not cached, or incomplete (IncompleteSnapshotError)
        return None


def fetch_snapshot(kind: str, repo_id: str, revision: str, cache_dir: str | Path | None = None,
                   endpoint: str | None = None) -> Path:
    """``repo_id`` at ``revision`` downloaded into the hub cache (what is there already is kept);
    its snapshot folder."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id, repo_type=REPO_TYPE[kind], revision=revision, cache_dir=cache_dir,
                                  endpoint=endpoint))


def pinned_snapshot(kind: str, repo_id: str, revision: str | None = None) -> Path | None:
    """The local snapshot folder of ``repo_id`` at its pinned revision (module doc), or None when
    nothing pins it (the caller loads it by id, as before)."""
    revision = pinned_revision(kind, repo_id, revision)
    if revision is None:
        return None
    folder = cached_snapshot(kind, repo_id, revision)
    if folder is not None:
        return folder
    from huggingface_hub import constants

    missing = f"{REPO_TYPE[kind]} {repo_id} at {revision} is not in the hub cache {constants.HF_HUB_CACHE}"
    if hub_offline():
        raise HubSnapshotMissing(f"{missing} and HF_HUB_OFFLINE is set: {PREFETCH_HINT}")
    try:
        return fetch_snapshot(kind, repo_id, revision)
    except Exception as err:  # noqa: BLE001 - no network, refused, gated: one line naming the repo
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise HubSnapshotMissing(f"{missing} and fetching it failed ({type(err).__name__}: {first}); "
                                 f"{PREFETCH_HINT}") from err


def snapshot_bytes(folder: str | Path) -> int:
    """Bytes of the files in a snapshot folder (its links followed to the cached blobs)."""
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())
