"""Local dataset files and folders (the offline override ``path=``): .parquet, .jsonl, .json,
.csv, .arrow files, a ``save_to_disk`` folder or a hub snapshot folder. Every row carries its
origin (file, row number) for error messages; a malformed or empty file is a ``DataError``
naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from replication.tasks.data_errors import DataError, DataNotFoundError

_DATA_SUFFIXES = (".parquet", ".jsonl", ".json", ".csv", ".arrow")


def _read_local(path: str, config: str | None, split: str) -> list[dict[str, Any]]:
    p = Path(path).expanduser()
    if not p.exists():
        raise DataNotFoundError(f"local dataset path {p} does not exist")
    if p.is_file():
        return _read_file(p)
    if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists():
        datasets = _require_datasets(str(p))
        ds = datasets.load_from_disk(str(p))
        if hasattr(ds, "keys"):  # DatasetDict
            ds = ds[split] if split in ds else ds[next(iter(ds.keys()))]
        return [dict(r) for r in ds]
    root = p / config if config and (p / config).is_dir() else p
    files = sorted(f for f in _files_under(root) if f.endswith(_DATA_SUFFIXES))
    if not files:
        raise DataNotFoundError(f"no data files ({', '.join(_DATA_SUFFIXES)}) under {root}")
    if config and root == p:  # configs as file names (Idavidrein/gpqa: gpqa_diamond.csv, ...)
        named = [f for f in files if config in Path(f).name]
        files = named or files
    # hub snapshots name files after the split (data/test-00000-of-00001.parquet, test.jsonl)
    for_split = [f for f in files if Path(f).name.startswith(split)]
    rows: list[dict[str, Any]] = []
    for f in for_split or files:
        rows.extend(_read_file(Path(f)))
    return rows


def _files_under(root: Path) -> list[str]:
    """Every file under ``root`` whose path has no hidden (dot) part, following symlinked folders
    (what glob's ``**`` gave). A folder that leads back to one above it on its own path — a
    symlink loop, which glob followed about 40 levels deep, reading every file 40 times — is a
    ``DataError`` naming the link and where it points."""
    files: list[str] = []
    chain = {str(root): {os.path.realpath(root)}}  # real folders on the way down to each folder
    for folder, subfolders, names in os.walk(root, followlinks=True):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for d in subfolders:
            full = os.path.join(folder, d)
            real = os.path.realpath(full)
            if real in chain[folder]:
                raise DataError(f"{full}: symlink loop (it leads back to {real}, a folder above it); "
                                f"remove the link or point the dataset path below it")
            chain[full] = chain[folder] | {real}
        files += [os.path.join(folder, n) for n in names if not n.startswith(".")]
    return files


_ORIGIN = "__origin__"
"""Row key set by ``_read_file``: (file, row number), for error messages; removed before use."""


def _read_file(p: Path) -> list[dict[str, Any]]:
    """Rows of one data file, each tagged with its origin; a malformed or empty file is a
    ``DataError`` naming it."""
    import pandas as pd

    suffix = p.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".json", ".csv", ".arrow"):
        raise DataError(f"{p}: unsupported dataset file type {p.suffix!r}")
    if p.stat().st_size == 0:
        raise DataError(f"{p}: empty file")
    try:
        if suffix == ".parquet":
            df = pd.read_parquet(p)
        elif suffix == ".jsonl":
            df = pd.read_json(p, lines=True, dtype=False)
        elif suffix == ".json":
            df = pd.read_json(p, dtype=False)
        elif suffix == ".csv":
            df = pd.read_csv(p, dtype=str, keep_default_na=False)
        else:
            datasets = _require_datasets(str(p))
            records = [dict(r) for r in datasets.Dataset.from_file(str(p))]
            df = None
    except ImportError:
        raise
    except Exception as e:  # noqa: BLE001 - every reader's parse error, one line naming the file
        msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DataError(f"{p}: malformed {suffix[1:]} file ({msg[:200]})") from None
    if df is not None:
        records = df.to_dict("records")
    if not records:
        raise DataError(f"{p}: no rows")
    return [{**r, _ORIGIN: (str(p), i)} for i, r in enumerate(records)]


def _require_datasets(what: str) -> Any:
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            f"loading {what} needs the `datasets` package: pip install -e '.[math]' "
            "(or datasets>=3.0); local .parquet/.jsonl/.json/.csv files load without it"
        ) from err
    return datasets
