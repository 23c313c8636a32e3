"""Only DVC stages write under results/ (issue 34.6): a study script's ``--out`` is checked here.

The regime and predictor studies (scripts/gp_synthetic_check.py, gp_settings_study.py,
task_mix_study.py) write the evidence behind docs/regime.md's and docs/fidelity/vip.md's generated
blocks into results/regime/. Each is a stage of dvc.yaml; typed by hand with ``--out results/...``
it would overwrite committed evidence outside the pipeline, so it is refused (one line, exit 2)
unless DVC runs it: DVC sets ``DVC_STAGE`` for every stage command, and the stage runner
(``python -m replication stage``) sets ``cli_checks.STAGE_ENV``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from replication.cli_checks import STAGE_ENV, refuse_results
from replication.config import ConfigError

DVC_STAGE_ENV = "DVC_STAGE"
"""Set by DVC (dvc/stage/run.py) to the stage's address for every command it runs."""


def run_by_dvc() -> bool:
    return bool(os.environ.get(DVC_STAGE_ENV) or os.environ.get(STAGE_ENV))


def check_study_out(out: str | Path | None) -> None:
    """Exit 2 with one line when ``out`` is inside results/ and no DVC stage runs this command."""
    if out is None or run_by_dvc():
        return
    try:
        refuse_results(out)
    except ConfigError as e:
        print(f"error: {e}".replace("(`dvc repro`)", "(`dvc repro`; this study is a stage of dvc.yaml)"),
              file=sys.stderr)
        raise SystemExit(2) from None
