"""A run's key: a digest of every input that changes its numbers, and of nothing else.

    record = key_record(config=resolved, steps=300, command=argv, shape={...}, code=digest,
                        inputs=input_digests(resolved, files), revisions=hub_revisions(resolved))
    record["key"]                     # 20 hex: sha256 of the canonical JSON of the inputs

What enters (``KEY_FIELDS``):

- ``config``: the resolved configuration, its profile name blanked (the same settings under
  another profile name are the same run);
- ``steps``: the run's length;
- ``command``: the training command as the launcher builds it, from the sub-command on, without
  what only says where or how it writes (``--out``, ``--no-progress``, ``--resume``,
  ``--overwrite``) or which profile file it read (the config stands for it): an edit of the code
  that builds the command changes the key through the command itself;
- ``shape``: processes, nodes and devices per process: what the run computes on, not where;
- ``code``: the normalised digest of the training code (``replication.code_digest``: comments,
  docstrings and formatting do not count);
- ``inputs``: the content digest of every local file or folder the configuration names by path
  (the base model, VIP's encoder, data files), keyed by the config entry that names it;
- ``revisions``: every hub model and dataset the configuration names by id, with the revision
  it is pinned to (the config's, else the hub lock file's, else ``unpinned``).

What does not enter: library versions, the machine, the scheduler, the launcher's code. Library
versions and the machine go to each run's provenance (``replication.provenance``): a key says
*what* was computed; whether another torch computes it bit for bit the same is a question of
reproducibility (docs/reproducibility.md), which the provenance answers for each run. Keying on
versions would make every committed run unusable after a patch release that changes no number.

The record is written beside the run (``KEY_FILE``) and travels with its export; a reader
recomputes the key from it and checks it against the folder's own config, metrics and code
digest (``store.run_evidence.check_key``), so a folder is trusted by its content, not its name.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from replication.store.hub_lock import HUB_LOCK, HUB_LOCK_ENV, read_hub_lock  # noqa: F401 (the one reader)

KEY_FILE = "key.json"
"""The key record beside a run and its export: {"key": ..., "inputs": {KEY_FIELDS...}}."""
KEY_FIELDS = ("config", "steps", "command", "shape", "code", "inputs", "revisions")
KEY_LENGTH = 20

UNPINNED = "unpinned"

# Flags of `replication train` that say where or how a run writes, not what it computes.
_DROP_WITH_VALUE = ("--out",)
_DROP_FLAGS = ("--no-progress", "--resume", "--overwrite")
_PLACEHOLDER = ("--profile",)

# Files in a model or data folder that are reports about it, not part of it.
NOT_CONTENT = frozenset({"sft_report.json", "BASE_KEY", "MANIFEST.json"})


def normalized_command(argv: Iterable[str], subcommand: str = "train") -> list[str]:
    """``argv`` from ``subcommand`` on, without the flags that only place the run (module doc).

    Whatever precedes the sub-command (the interpreter, ``-m replication``, a launcher such as
    torchrun with its rendezvous) is where the run goes, which the key leaves to ``shape``."""
    argv = [str(a) for a in argv]
    if subcommand not in argv:
        raise ValueError(f"not a `{subcommand}` command: {argv}")
    rest = argv[argv.index(subcommand):]
    out, i = [], 0
    while i < len(rest):
        arg = rest[i]
        name = arg.split("=", 1)[0]
        if name in _DROP_FLAGS:
            i += 1
        elif name in _DROP_WITH_VALUE or name in _PLACEHOLDER:
            if name in _PLACEHOLDER:
                out.append(name)
            i += 1 if "=" in arg else 2
        else:
            out.append(arg)
            i += 1
    return out


def _entries(tree: Any, prefix: str = "") -> Iterable[tuple[str, str, Any]]:
    """(dotted location, key name, value) of every mapping entry in ``tree``."""
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            loc = f"{prefix}.{k}" if prefix else str(k)
            yield loc, str(k), v
            yield from _entries(v, loc)


def named_paths(config: Mapping) -> dict[str, str]:
    """{config location: path} of every entry named ``path``, ``*_path`` or ``*_paths``."""
    found = {}
    for loc, name, value in _entries(config):
        if name == "path" or name.endswith("_path"):
            if isinstance(value, str) and value:
                found[loc] = value
        elif name.endswith("_paths"):
            items = value.items() if isinstance(value, Mapping) else enumerate(value or [])
            for k, v in items:
                if isinstance(v, str) and v:
                    found[f"{loc}.{k}"] = v
    return found


def looks_like_hub_id(value: str) -> bool:
    """``owner/name`` with no local meaning: not absolute, not relative, one slash."""
    return (value.count("/") == 1 and not value.startswith((".", "/", "~")) and not value.endswith("/")
            and not Path(value).exists())


class FileDigests:
    """Content digests of files and folders, each computed once while its files stay the same
    (size and mtime of every file), so a grid hashes a 90 MB encoder once, not once per key."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[tuple, str]] = {}

    def __call__(self, path: str | Path) -> str:
        path = Path(path)
        if not path.exists():
            return "missing"
        files = _content_files(path)
        signature = tuple((rel, st.st_size, st.st_mtime_ns) for rel, f, st in files)
        key = str(path.resolve())
        memo = self._memo.get(key)
        if memo is not None and memo[0] == signature:
            return memo[1]
        h = hashlib.sha256()
        for rel, f, _ in files:
            h.update(rel.encode())
            h.update(b"\0")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
        digest = h.hexdigest()[:16]
        self._memo[key] = (signature, digest)
        return digest


def _content_files(path: Path) -> list[tuple[str, Path, os.stat_result]]:
    if path.is_file():
        return [(path.name, path, path.stat())]
    out = []
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path)
        if (f.is_file() and f.name not in NOT_CONTENT and "__pycache__" not in rel.parts
                and not any(p.startswith(".") for p in rel.parts)):
            out.append((rel.as_posix(), f, f.stat()))
    return out


DIGESTS = FileDigests()
"""The process's memo of content digests (every grid in a notebook shares it)."""


def input_digests(config: Mapping, digests: FileDigests = DIGESTS) -> dict[str, str]:
    """{config location: content digest} of every local path the configuration names (hub ids
    are left to ``hub_revisions``)."""
    return {loc: digests(p) for loc, p in sorted(named_paths(config).items()) if not looks_like_hub_id(p)}


def hub_revisions(config: Mapping, lock: Mapping | None = None) -> dict[str, str]:
    """{"model:<id>" | "dataset:<id>": revision} of every hub model and dataset the configuration
    names: a path entry that is a hub id, and (``task.kind: math``) each dataset by registry name
    that has no local path. The revision is the config's pin, else the lock file's, else
    ``unpinned``."""
    lock = lock if lock is not None else read_hub_lock()
    found: dict[str, str] = {}
    model = config.get("model") or {}
    for loc, value in named_paths(config).items():
        if looks_like_hub_id(value):
            pinned = model.get("revision") if loc == "model.path" else None
            found[f"model:{value}"] = pinned or lock["models"].get(value) or UNPINNED
    task = config.get("task") or {}
    if task.get("kind") == "math":
        opts = task.get("options") or {}
        eval_paths = dict(opts.get("eval_paths") or {})
        names = [(opts.get("train"), opts.get("train_path"))] + [(n, eval_paths.get(n)) for n in opts.get("eval") or []]
        for name, local in names:
            if name and not local:
                hub_id = _dataset_hub_id(name)
                found[f"dataset:{hub_id}"] = lock["datasets"].get(hub_id) or UNPINNED
    return dict(sorted(found.items()))


def _dataset_hub_id(name: str) -> str:
    try:
        from replication.tasks.math_datasets import DATASETS
    except ImportError:  # the registry needs nothing heavy, but a trimmed install may lack it
        return name
    return DATASETS.get(name).hub_id if name in DATASETS else name


def key_of(inputs: Mapping) -> str:
    """The key of a record's inputs: sha256 of their canonical JSON, 20 hex."""
    missing = [f for f in KEY_FIELDS if f not in inputs]
    if missing:
        raise ValueError(f"key inputs lack {missing}")
    blob = json.dumps({f: inputs[f] for f in KEY_FIELDS}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:KEY_LENGTH]


def key_record(**inputs: Any) -> dict:
    """{"key": key_of(inputs), "inputs": inputs} with inputs in canonical (JSON) form."""
    canonical = json.loads(json.dumps({f: inputs[f] for f in KEY_FIELDS}, sort_keys=True, default=str))
    return {"key": key_of(canonical), "inputs": canonical}


def changed_fields(a: Mapping, b: Mapping) -> list[str]:
    """The key fields in which two records' inputs differ (for messages)."""
    ai, bi = a.get("inputs") or {}, b.get("inputs") or {}
    return [f for f in KEY_FIELDS if ai.get(f) != bi.get(f)]
