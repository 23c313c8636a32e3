"""The registry of generated prose blocks (report/prose.py): ``block(NAME)`` registers a generator
``root -> Markdown`` under NAME in ``GENERATORS``, plus the number formats and readers the block
modules share. Block modules (prose.py's own blocks, prose_regime, prose_gdro) import this, never
prose.py, so the package has no import cycle.

Every reader of a paper's published products goes through ``paper_folder``: the paper's products
manifest (store/products.py) is verified once per paper and render before any summary.json,
table or executed notebook is read, so a hand-edited or cut product is one ``DamagedArtifact``
line naming the file, never a generated block quoting it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

PAPERS = {"vip": "VIP", "dynamo": "DynaMO", "gdro": "GDRO"}
GENERATORS: dict[str, Callable[[Path], str]] = {}


def block(name: str):
    def register(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        GENERATORS[name] = fn
        return fn
    return register


def _pts(x: float) -> str:
    v = 100 * float(x)
    return f"{v:+.1f}".replace("-", "\u2212")


def _p(p: float) -> str:
    return "1" if p >= 0.995 else f"{p:.2g}"


_VERIFIED: dict[Path, tuple] = {}
"""Paper folder -> the manifest's (mtime, size) when it was verified: once per paper, not per read."""


def paper_folder(root: Path, paper: str) -> Path:
    """``root/results/<paper>``, its products verified against its manifest (once per paper while the
    manifest is unchanged): the nested exports' manifests are ``verify``'s business, not a reader's."""
    from replication.store.manifest import MANIFEST
    from replication.store.products import verify_products

    folder = (Path(root) / "results" / paper).resolve()
    try:
        st = (folder / MANIFEST).stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None  # verify_products names the missing manifest
    if stamp is None or _VERIFIED.get(folder) != stamp:
        verify_products(folder, nested=False)
        _VERIFIED[folder] = stamp
    return folder


def paper_table(root: Path, paper: str, name: str) -> Path:
    """A verified paper's ``tables/<name>``."""
    return paper_folder(root, paper) / "tables" / name


def _summary(root: Path, paper: str) -> dict:
    return json.loads((paper_folder(root, paper) / "summary.json").read_text())
