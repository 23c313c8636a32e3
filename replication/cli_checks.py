"""Checks of the command line's paths, each a one-line ``ConfigError`` (exit 2) before any work.

- ``refuse_results``: only DVC stages write under the repository's ``results/`` (the committed,
  published default). A command typed by hand with ``--out results/...`` would overwrite
  committed results outside the pipeline, so it is refused; the stage runner
  (``python -m replication stage``, what ``dvc repro`` calls) sets ``STAGE_ENV`` for the commands it
  starts, and those may write there.
- ``check_summaries``: ``report --results DIR`` on a missing folder, or one without any
  ``<paper>/summary.json``, is bad input, not an empty page with exit 0.
"""

from __future__ import annotations

import os
from pathlib import Path

from replication.config import ConfigError

STAGE_ENV = "REPLICATION_DVC_STAGE"
"""Set (to the stage's name) by ``orchestration.stage.run_stage`` for everything the stage runs."""


def _results_folder() -> Path | None:
    from replication.paths import repo_root

    try:
        return repo_root() / "results"
    except ConfigError:
        return None  # outside a checkout there are no committed results to protect


def refuse_results(out: str | Path) -> None:
    results = _results_folder()
    if results is None or os.environ.get(STAGE_ENV):
        return
    target = Path(out).expanduser().resolve()
    results = results.resolve()
    if target == results or results in target.parents:
        raise ConfigError(f"--out {out}: inside {results}, which only DVC stages write (`dvc repro`); "
                          f"write to a folder outside results/, e.g. --out runs/{target.name}")


def check_summaries(flag: str, folder: str | Path) -> None:
    from replication.report.summary import PAPERS

    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{flag} {folder}: no such folder")
    if not any((folder / p / "summary.json").is_file() for p in PAPERS):
        raise ConfigError(f"{flag} {folder}: no <paper>/summary.json in it (papers: {', '.join(PAPERS)})")
