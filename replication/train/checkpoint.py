"""Checkpoints that survive kill -9 and cannot run code when loaded.

A checkpoint holds everything a run needs to continue to the same final numbers: model and
optimizer state, the allocator's and Prompt-GDRO's state, the prompt sampler, every RNG, the
step, and the metric history so far.

Writing: ``state.pt`` goes to a temporary folder (fsynced), the old checkpoint is renamed aside,
the new one renamed into place, the old one removed; a kill at any moment leaves either the new
or the previous checkpoint (``.checkpoint.old`` is read when ``checkpoint`` is missing). A write
that fails (disk full, I/O error) removes ``.checkpoint.tmp``, leaves the previous checkpoint and
raises ``store.DiskFull``: one line naming the file and the free space.

Integrity: ``state.sha256`` beside ``state.pt`` holds its digest (torch's zip reader does not check
CRCs, so a flipped byte inside a tensor would otherwise load as silently wrong weights).

Reading: ``torch.load(weights_only=True)``, so a crafted file cannot execute anything. The
payload therefore holds only tensors and builtin types: ``encode`` turns numpy arrays into
tensors (or lists for non-numeric dtypes), numpy scalars into Python numbers, sets into tagged
lists and dataclasses into tagged dicts; ``decode`` reverses it (dataclasses are rebuilt only
from this package's own modules). A file that is truncated, corrupt or not one of ours raises
``CheckpointError`` — a one-line message naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from replication.config import ConfigError
from replication.store import io_errors

LATEST = "checkpoint"
FORMAT = "replication-checkpoint/1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file."""


class CheckpointShapeError(CheckpointError, ConfigError):
    """A checkpoint of another model (a parameter of another shape, or another set of parameters):
    bad input, so also a ConfigError (CLI: one line, exit 2)."""


# ----------------------------------------------------------------------------- encoding

_ND, _NDL, _SET, _DC = "__ndarray__", "__ndarray_list__", "__set__", "__dataclass__"


def encode(x: Any) -> Any:
    """Plain tensors and builtins only (what ``torch.load(weights_only=True)`` accepts)."""
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "biuf" and x.dtype != np.uint16 and x.dtype != np.uint32 and x.dtype != np.uint64:
            return {_ND: torch.from_numpy(np.ascontiguousarray(x).copy()), "dtype": str(x.dtype)}
        return {_NDL: encode(x.tolist()), "dtype": str(x.dtype), "shape": list(x.shape)}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (bool, int, float, str, bytes, type(None), torch.dtype, torch.Size)):
        return x
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        cls = type(x)
        return {_DC: f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode(getattr(x, f.name)) for f in dataclasses.fields(x)}}
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(encode(v) for v in x)
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, (set, frozenset)):
        return {_SET: [encode(v) for v in sorted(x, key=repr)]}
    raise TypeError(f"cannot store a {type(x).__name__} in a checkpoint (plain types only)")


def decode(x: Any) -> Any:
    if isinstance(x, dict):
        if _ND in x and set(x) == {_ND, "dtype"}:
            return x[_ND].numpy().astype(x["dtype"], copy=False)
        if _NDL in x and set(x) == {_NDL, "dtype", "shape"}:
            arr = np.array(decode(x[_NDL]), dtype=x["dtype"])
            return arr.reshape(x["shape"])
        if _SET in x and set(x) == {_SET}:
            return {decode(v) for v in x[_SET]}
        if _DC in x and set(x) == {_DC, "fields"}:
            module, _, qual = x[_DC].partition(":")
            if not module.startswith("replication."):
                raise CheckpointError(f"refusing to rebuild {x[_DC]!r} (not a replication class)")
            obj: Any = importlib.import_module(module)
            for part in qual.split("."):
                obj = getattr(obj, part)
            if not dataclasses.is_dataclass(obj):
                raise CheckpointError(f"{x[_DC]!r} is not a dataclass")
            return obj(**{k: decode(v) for k, v in x["fields"].items()})
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, tuple):
        return tuple(decode(v) for v in x)
    return x


# ----------------------------------------------------------------------------- files


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


DIGEST = "state.sha256"


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class _WriteRecorder:
    """A file torch.save writes through, keeping the OSError of a failed write: torch replaces
    it with an opaque RuntimeError ("unexpected pos ..."), and a full disk must be named."""

    def __init__(self, f) -> None:
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save_checkpoint(run_dir: Path, payload: dict[str, Any]) -> Path:
    run_dir = Path(run_dir)
    tmp = run_dir / f".{LATEST}.tmp"
    # a failed write removes the temporary (it must not fill the disk further): DiskFull
    with io_errors(tmp / "state.pt", tmp):
        return _save(run_dir, tmp, payload)


def _save(run_dir: Path, tmp: Path, payload: dict[str, Any]) -> Path:
    final = run_dir / LATEST
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    with open(tmp / "state.pt", "wb") as f:
        out = _WriteRecorder(f)
        try:
            torch.save({"format": FORMAT, "payload": encode(payload)}, out)
        except RuntimeError:
            if out.error is not None:
                raise out.error from None
            raise
        f.flush()
        os.fsync(f.fileno())
    with open(tmp / DIGEST, "w") as f:
        f.write(_digest(tmp / "state.pt") + "\n")
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    old = run_dir / f".{LATEST}.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    _fsync_dir(run_dir)
    if old.exists():
        shutil.rmtree(old)
    return final


def checkpoint_path(run_dir: Path) -> Path | None:
    """``state.pt`` of the newest complete checkpoint in ``run_dir`` (None if there is none)."""
    run_dir = Path(run_dir)
    for name in (LATEST, f".{LATEST}.old"):  # .old survives a kill between the two renames
        path = run_dir / name / "state.pt"
        if path.exists():
            return path
    return None


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """Load one ``state.pt`` safely; every failure is a ``CheckpointError`` naming the file."""
    path = Path(path)
    digest_file = path.with_name(DIGEST)
    if not digest_file.exists():
        raise CheckpointError(f"checkpoint {path} has no {DIGEST} beside it (foreign, or from an "
                              f"older version); start again with --overwrite")
    try:
        ok = digest_file.read_text().strip() == _digest(path)
    except OSError as e:
        raise CheckpointError(f"checkpoint {path} cannot be read: {e.strerror or e}") from None
    if not ok:
        raise CheckpointError(f"checkpoint {path} is corrupt (its sha256 does not match {DIGEST})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's pickle-protocol notes are not the user's
            raw = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - pickle/zip/torch errors of every kind
        text = str(e)
        if "Unsupported global" in text:
            msg = ("it contains objects other than tensors and plain types (refused: loading it "
                   "could run code)")
        elif "WeightsUnpickler error:" in text:
            detail = text.split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0]
            msg = f"corrupt or not a torch file ({detail})"
        else:
            detail = (text.strip().splitlines() or [type(e).__name__])[0]
            msg = f"corrupt or not a torch file ({type(e).__name__}: {detail})"
        raise CheckpointError(f"checkpoint {path} cannot be read: {msg[:200]}") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or "payload" not in raw:
        raise CheckpointError(f"checkpoint {path} is not a {FORMAT} file (foreign or from an "
                              f"older version); start again with --overwrite")
    try:
        payload = decode(raw["payload"])
    except CheckpointError as e:
        raise CheckpointError(f"checkpoint {path}: {e}") from None
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path} is malformed: {type(e).__name__}: {e}") from None
    missing = [k for k in ("step", "config", "components") if k not in payload]
    if missing:
        raise CheckpointError(f"checkpoint {path} is malformed: missing {missing}")
    if isinstance(payload["components"], dict):  # named by errors found while restoring it
        payload["components"][SOURCE_KEY] = str(path)
    return payload


SOURCE_KEY = "source_file"
"""Key ``read_checkpoint_file`` adds to the components state: the file it was read from."""


def check_model_shapes(saved: dict[str, Any], current: dict[str, Any], source: str) -> None:
    """The checkpoint's model tensors against the model's own state dict, before loading them:
    another model is one line naming the checkpoint, the parameter and both shapes (torch's
    ``load_state_dict`` says it in a 41-line traceback)."""
    for name, tensor in current.items():
        if name not in saved:
            raise CheckpointShapeError(f"checkpoint {source} is of another model: it has no parameter "
                                       f"{name} (shape {list(tensor.shape)} in this model)")
        if tuple(saved[name].shape) != tuple(tensor.shape):
            raise CheckpointShapeError(f"checkpoint {source} is of another model shape: parameter {name} "
                                       f"is {list(saved[name].shape)} there, {list(tensor.shape)} in this model")
    extra = sorted(set(saved) - set(current))
    if extra:
        raise CheckpointShapeError(f"checkpoint {source} is of another model: parameter {extra[0]} "
                                   f"(shape {list(saved[extra[0]].shape)}) is not in this model")


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    path = checkpoint_path(run_dir)
    return None if path is None else read_checkpoint_file(path)
