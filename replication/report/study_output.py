"""Only DVC stages write under results/ (issue 34.6): a study script's ``--out`` is checked here.

The regime and predictor studies (scripts/gp_synthetic_check.py, gp_settings_study.py,
task_mix_study.py) write the evidence behind docs/regime.md's and docs/fidelity/vip.md's generated
blocks into results/regime/. Each is a stage of dvc.yaml; typed by hand with ``--out results/...``
it would overwrite committed evidence outside the pipeline, so it is refused (one line, exit 2)
unless DVC runs it: DVC sets ``DVC_STAGE`` for every stage command, and the stage runner
(``python -m replication stage``) sets ``cli_checks.STAGE_ENV``.

A study's folder is under a manifest like every published artifact (kind ``study``). Several
studies write into results/regime/, each its own file, so the manifest has its own writer: the
stage ``regime-manifest`` (``python -m replication.report.study_output results/regime``), which
depends on every study's file and checks that each parses before sealing them; every reader
verifies it (``read_study_file``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from replication.cli_checks import STAGE_ENV, refuse_results
from replication.config import ConfigError
from replication.store import MANIFEST, verify_manifest, write_manifest, writer_lock

from replication.report.study_read import STUDY_KIND, read_study_file  # noqa: F401 (readers import it here too)

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


def seal_study_folder(folder: str | Path) -> str:
    """Check that every file of a study folder parses, then write its manifest (kind ``study``)
    under the folder's writer lock; DamagedArtifact names a file that does not parse."""
    from replication.store.verify_all import check_study_files

    from replication.store import DamagedArtifact
    from replication.store.manifest import _files

    folder = Path(folder)
    with writer_lock(folder, "a study folder's manifest"):
        n = check_study_files(folder)
        try:  # already sealed over exactly these files: nothing to write (no churn in git)
            listed = set(verify_manifest(folder, kind=STUDY_KIND)["files"])
            if listed == {f.relative_to(folder).as_posix() for f in _files(folder)}:
                return f"{folder}: {n} study files parse; its {MANIFEST} is current"
        except DamagedArtifact:
            pass
        write_manifest(folder, kind=STUDY_KIND)
    return f"{folder}: {n} study files parse; sealed ({MANIFEST})"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from replication.store import DamagedArtifact

    ap = argparse.ArgumentParser(description="seal a study folder (the `regime-manifest` stage)")
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: {args.folder}: no such folder", file=sys.stderr)
        return 2
    try:
        print(seal_study_folder(args.folder))
    except DamagedArtifact as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
