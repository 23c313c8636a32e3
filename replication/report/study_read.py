"""Reading a regime study's committed outputs only once their manifest verifies (kind ``study``):
the reader's half of report/study_output.py, kept apart so that report modules the CLI imports
can read evidence without importing the CLI's checks."""

from __future__ import annotations

from pathlib import Path

from replication.store import MANIFEST, verify_manifest

STUDY_KIND = "study"
"""The manifest kind of a regime study's output folder (results/regime)."""


def read_study_file(path: str | Path) -> Path:
    """``path`` once its folder's manifest verifies (size and SHA-256 of every file); a folder
    without one (a study's output outside results/) is read as it is."""
    path = Path(path)
    if (path.parent / MANIFEST).exists():
        verify_manifest(path.parent, kind=STUDY_KIND)
    return path


def verify_study_folder(folder: str | Path) -> Path:
    """``folder`` once its manifest verifies, every file below it included (a study whose outputs
    sit in sub-folders, as the positive control's study.json); as it is when it has none."""
    folder = Path(folder)
    if (folder / MANIFEST).exists():
        verify_manifest(folder, kind=STUDY_KIND)
    return folder
