"""Which folder a policy loads from when its path is a hub id.

    load_from = model_location("Qwen/Qwen2.5-Math-1.5B")   # .../snapshots/<locked commit>

A local folder loads as it is. A hub id pinned by ``revision`` (a caller's pin) or by the hub lock
file (store/hub_lock.py, written by ``python -m replication prefetch``) loads from its snapshot
folder in the hub cache at that commit, with no network call (store/hub_snapshot.py); an unpinned
hub id loads by id, as ``from_pretrained`` resolves it. ``load_policy`` (transformers) and the vLLM
engine load through this one function, so both read the same commit.
"""

from __future__ import annotations

from replication.store.run_key import looks_like_hub_id


def model_location(path: str, revision: str | None = None) -> str:
    """What ``from_pretrained`` (or vLLM) is given for ``path`` (module doc)."""
    path = str(path)
    if not looks_like_hub_id(path):
        return path
    from replication.store.hub_snapshot import pinned_snapshot

    folder = pinned_snapshot("models", path, revision)
    return path if folder is None else str(folder)
