"""The repository root, found one way for every default path.

A notebook opened in JupyterLab, or run by ``jupyter nbconvert --execute notebooks/vip.ipynb``,
starts its kernel in ``notebooks/``; a command may be typed in any subfolder. Defaults such as
``params.yaml``, ``results/`` or ``results/summary.md`` therefore name files of the repository,
not of the current folder: ``repo_root()`` finds the folder holding both ``dvc.yaml`` and
``params.yaml`` — ``$REPLICATION_ROOT`` when set, else the first such folder at or above the
current folder, else at or above this package (an editable install) — and every default path is
built on it (``repo_path``). A path the user types stays relative to where it is typed.

Run configurations name files relative to the root (``model.path: results/base-model``, the
encoder at ``results/encoder``), and those strings are part of each run's key, so they cannot be
made absolute. A notebook therefore calls ``enter_repo_root()`` once: a change to the absolute
root, which is a no-op when the cell runs again (never a relative ``chdir("..")``).
"""

from __future__ import annotations

import os
from pathlib import Path

from replication.config.errors import ConfigError

ROOT_ENV = "REPLICATION_ROOT"
MARKERS = ("dvc.yaml", "params.yaml")


def is_repo_root(folder: str | Path) -> bool:
    return all((Path(folder) / m).is_file() for m in MARKERS)


def repo_root(start: str | Path | None = None) -> Path:
    """The repository root (absolute). ``start``: where to begin the walk up (default: cwd)."""
    env = os.environ.get(ROOT_ENV)
    if env:
        root = Path(env).expanduser().resolve()
        if not is_repo_root(root):
            raise ConfigError(f"{ROOT_ENV}={env}: not a repository root (no {' and '.join(MARKERS)} there)")
        return root
    starts = (Path(start or Path.cwd()).resolve(), Path(__file__).resolve().parent)
    for base in starts:
        for folder in (base, *base.parents):
            if is_repo_root(folder):
                return folder
    raise ConfigError(f"no repository root (a folder with {' and '.join(MARKERS)}) at or above "
                      f"{starts[0]} or {starts[1]}; run from the checkout or set {ROOT_ENV}")


def repo_path(*parts: str | Path) -> Path:
    """``parts`` joined onto the repository root: the place of a default path."""
    return repo_root().joinpath(*parts)


def params_path(params_file: str | Path | None = None) -> Path:
    """``params_file`` as given, or the repository's ``params.yaml`` when None."""
    return repo_path("params.yaml") if params_file is None else Path(params_file)


def enter_repo_root() -> Path:
    """Make the repository root the current folder and return it; running it again changes
    nothing (the target is absolute), so a notebook cell that calls it can be re-run."""
    root = repo_root()
    if Path.cwd().resolve() != root:
        os.chdir(root)
    return root
