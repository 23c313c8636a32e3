"""Hub datasets, never waiting on the network when offline.

A pinned dataset (``MathDatasetConfig.revision``, else the hub lock file's commit for its id:
store/hub_lock.py, written by ``python -m replication prefetch``) is read from its snapshot folder
in the hub cache exactly as ``path=<that folder>`` would be, with no network call; missing there,
it is fetched at that commit when the hub may be used, and is a ``DatasetUnavailableError`` naming
``prefetch`` when it may not. An unpinned dataset goes through ``datasets.load_dataset`` by id.

Offline (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set, or the hub endpoint unreachable within a
few seconds) an unpinned hub load reads the local ``datasets`` cache only, and failing that raises
``DatasetUnavailableError`` naming the dataset and the ``path=`` override."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlparse

from replication.tasks.math_dataset_config import MathDatasetConfig, MathDatasetSpec
from replication.tasks.math_files import _read_local, _require_datasets


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded without the network (or at all); the message says how."""


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline_by_env() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")


def hub_reachable(timeout_s: float) -> bool:
    """One TCP connect to the hub endpoint (HF_ENDPOINT or huggingface.co:443), bounded in time."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _unavailable(spec: MathDatasetSpec, cfg: MathDatasetConfig, why: str) -> DatasetUnavailableError:
    hub_id = cfg.hub_id or spec.hub_id
    return DatasetUnavailableError(
        f"dataset {spec.name!r} ({hub_id}) is not available: {why}. Download it on a connected "
        f"machine (e.g. `huggingface-cli download --repo-type dataset {hub_id} --local-dir DIR`) "
        f"and pass path=DIR (MathDatasetConfig.path / the profile's dataset path override), or "
        "point it at a .parquet/.jsonl file with the same columns."
    )


def _read_hub(spec: MathDatasetSpec, cfg: MathDatasetConfig) -> list[dict[str, Any]]:
    from replication.store.hub_snapshot import pinned_revision

    offline = hub_offline_by_env()
    revision = pinned_revision("datasets", cfg.hub_id or spec.hub_id, cfg.revision)
    if revision:
        return _read_pinned(spec, cfg, revision, offline)
    if not offline and not hub_reachable(cfg.probe_timeout_s):
        raise _unavailable(spec, cfg, f"the hub is unreachable (no answer within "
                                      f"{cfg.probe_timeout_s:.0f} s) and no local path was given")
    datasets = _require_datasets(f"{spec.name} from the hub")
    kwargs: dict[str, Any] = {"split": cfg.split or spec.split}
    args = [cfg.hub_id or spec.hub_id]
    if cfg.hub_config or spec.config:
        args.append(cfg.hub_config or spec.config)
    try:
        if offline:
            with _forced_offline():
                ds = datasets.load_dataset(*args, **kwargs)
        else:
            ds = datasets.load_dataset(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - every failure gets the same actionable message
        why = "offline mode is set and it is not in the local datasets cache" if offline \
            else f"{type(err).__name__}: {err}"
        raise _unavailable(spec, cfg, why) from err
    return [dict(r) for r in ds]


def _read_pinned(spec: MathDatasetSpec, cfg: MathDatasetConfig, revision: str, offline: bool) -> list[dict[str, Any]]:
    """The dataset at ``revision``: its snapshot folder in the hub cache read like ``path=`` (no
    network call), fetched at that commit first when it is missing and the hub may be used."""
    from replication.store.hub_snapshot import PREFETCH_HINT, cached_snapshot, fetch_snapshot

    hub_id = cfg.hub_id or spec.hub_id
    folder = cached_snapshot("datasets", hub_id, revision)
    if folder is None:
        if offline:
            raise _unavailable(spec, cfg, f"offline mode is set and its pinned revision {revision} is not in "
                                          f"the hub cache; {PREFETCH_HINT}")
        if not hub_reachable(cfg.probe_timeout_s):
            raise _unavailable(spec, cfg, f"its pinned revision {revision} is not in the hub cache and the hub "
                                          f"is unreachable (no answer within {cfg.probe_timeout_s:.0f} s)")
        try:
            folder = fetch_snapshot("datasets", hub_id, revision)
        except Exception as err:  # noqa: BLE001 - every failure gets the same actionable message
            raise _unavailable(spec, cfg, f"{type(err).__name__}: {err}") from err
    return _read_local(str(folder), cfg.hub_config or spec.config, cfg.split or spec.split)


class _forced_offline:
    """Make ``datasets``/``huggingface_hub`` treat this call as offline even when the env var was
    set after they were imported (both read it into module constants at import time)."""

    def __init__(self) -> None:
        self._targets: list[tuple[Any, str]] = []
        for mod_name, attr in (("datasets.config", "HF_HUB_OFFLINE"),
                               ("datasets.config", "HF_DATASETS_OFFLINE"),
                               ("huggingface_hub.constants", "HF_HUB_OFFLINE")):
            mod = _import_optional(mod_name)
            if mod is not None and hasattr(mod, attr):
                self._targets.append((mod, attr))
        self._saved: list[Any] = []

    def __enter__(self) -> None:
        self._saved = [getattr(m, a) for m, a in self._targets]
        for m, a in self._targets:
            setattr(m, a, True)

    def __exit__(self, *exc: Any) -> None:
        for (m, a), v in zip(self._targets, self._saved):
            setattr(m, a, v)


def _import_optional(name: str) -> Any:
    try:
        import importlib

        return importlib.import_module(name)
    except ImportError:
        return None
