"""The rehearsal data (data/rehearsal/, issue 36): every file is what scripts/make_rehearsal_data.py
writes (regenerated and compared row by row), each rehearsal profile's every dataset loads through
the real loaders from it, and each pool holds easy problems and hard ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from replication.config import load_profile
from replication.tasks.math_datasets import load_math_dataset

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "rehearsal"


def _rows(path: Path):
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_json(orient="records")
    return path.read_text()


def test_the_committed_files_are_the_scripts_output(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_rehearsal_data.py"), "--out", str(tmp_path)],
                   check=True)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(DATA) for p in DATA.rglob("*") if p.is_file())
    assert made == committed and len(made) >= 12
    for rel in made:
        assert _rows(tmp_path / rel) == _rows(DATA / rel), rel


@pytest.mark.parametrize("paper", ["vip", "dynamo", "gdro"])
def test_every_rehearsal_dataset_loads_with_the_papers_template(paper, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_profile(f"rehearsal-{paper}")
    opts = cfg.task.options
    train = load_math_dataset(opts["train"], path=opts["train_path"], template=opts.get("template"))
    sys.path.insert(0, str(ROOT / "scripts"))
    from rehearsal_problems import HARD

    hard = [r for r in train if r.answer in {a for _, a in HARD}]  # 616, 97, 615, ...
    assert len(train) >= 30 and 0 < len(hard) < len(train) / 4
    assert len({r.id for r in train}) == len(train)  # the DAPO file's repeats are deduplicated
    for name in opts["eval"]:
        recs = load_math_dataset(name, path=opts["eval_paths"][name], template=opts.get("eval_template"))
        assert len(recs) >= 2 and all(r.answer for r in recs), name
