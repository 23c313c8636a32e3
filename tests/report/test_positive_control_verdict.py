"""The positive control's verdict as the prose states it (report.positive_control.verdict_text):
the first lines of each paper's conclusions, of results/summary.md and of the README's
gen:positive-control block, generated from the study's outputs for every way the study can end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replication.report.conclusions import conclusions
from replication.report.positive_control import COLUMNS, STUDY, TABLE, verdict_text
from replication.report.summary import write_summary

ROOT = Path(__file__).resolve().parents[2]


def _outputs(root: Path, status: str, *, pilot=True, pick=False, confirm=False) -> Path:
    rows = []
    for j, cell in enumerate(["a-cell", "b-cell", "c-cell"]):
        r = dict.fromkeys(COLUMNS, np.nan)
        r.update(cell=cell, screen_noise_to_signal_ratio=0.1 * (j + 1), piloted=pilot and j < 2, pick=pick and j == 0,
                 eligible=True)
        if pilot and j < 2:
            r.update(pilot_n=4, pilot_diff=-0.014 + 0.02 * j, pilot_diff_lo=-0.03, pilot_diff_hi=0.01 + 0.02 * j,
                     pilot_p=0.9 - 0.5 * j, pilot_p_holm=0.9, pilot_uniform_gain=0.047, pilot_uniform_gain_lo=0.02,
                     pilot_uniform_gain_hi=0.07)
        if confirm and j == 0:
            r.update(confirm_n=12, confirm_diff=0.015, confirm_diff_lo=0.004, confirm_diff_hi=0.026, confirm_p=0.01)
        rows.append(r)
    (root / TABLE).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(root / TABLE, index=False)
    (root / STUDY).parent.mkdir(parents=True, exist_ok=True)
    (root / STUDY).write_text(json.dumps({"status": status, "pick": "a-cell" if pick else None}))
    return root


def test_no_setting_passed_says_no_room_with_every_piloted_cell(tmp_path):
    text = verdict_text(_outputs(tmp_path, "no setting passed the pilot"))
    assert text.startswith("**Positive control: at this scale reallocation had no room to help.**")
    assert "a-cell: oracle − uniform −1.4 [−3.0, +1.0] pts (n = 4" in text and "b-cell: oracle − uniform +0.6" in text
    assert "c-cell" not in text  # not piloted
    assert "did worse" not in text  # no interval below 0
    t = pd.read_csv(tmp_path / TABLE)
    t.loc[0, "pilot_diff_hi"] = -0.002
    t.to_csv(tmp_path / TABLE, index=False)
    assert "In 1 of the 2 it did worse, its 95 % interval below 0." in verdict_text(tmp_path)
    assert "0.10–0.30 × uniform's in the 3 cells screened" in text
    assert "results/regime/positive_control.png" in text


def test_confirmed_names_the_pick_and_its_confirmation(tmp_path):
    text = verdict_text(_outputs(tmp_path, "confirmed", pick=True, confirm=True))
    assert text.startswith("**Positive control: confirmed in a-cell.**")
    assert "12 fresh seeds: +1.5 [+0.4, +2.6] pts" in text


def test_not_confirmed_is_no_room_with_the_confirmation(tmp_path):
    text = verdict_text(_outputs(tmp_path, "not confirmed", pick=True, confirm=True))
    assert "no room to help" in text and "pick a-cell was not confirmed on 12 fresh seeds" in text


def test_an_unfinished_study_says_so(tmp_path):
    text = verdict_text(_outputs(tmp_path, "pilot incomplete"))
    assert text.startswith("**Positive control: under way (pilot incomplete).**")
    assert verdict_text(tmp_path / "nowhere").startswith("**Positive control: not run.**")


@pytest.mark.parametrize("profile", ["paper-vip", "rehearsal-gdro"])
def test_other_scales_get_nothing(tmp_path, profile):
    assert verdict_text(_outputs(tmp_path, "no setting passed the pilot"), profile) == ""
    assert verdict_text(_outputs(tmp_path, "no setting passed the pilot"), "quick") != ""


def test_it_opens_the_conclusions_and_the_summary(tmp_path):
    root = _outputs(tmp_path, "no setting passed the pilot")
    text = verdict_text(root)
    assert conclusions(positive_control=text, comparisons=None).startswith(text)
    page = write_summary(tmp_path / "results", tmp_path / "summary.md", positive_control_root=root)
    assert page.splitlines()[2] == text
    assert text not in write_summary(tmp_path / "results", tmp_path / "summary2.md", positive_control_root=None)
    # by default the study beside the results folder (results/regime) opens the page, as the
    # `report` stage writes it: `python -m replication report --results results` gives the same page
    assert write_summary(root / "results", tmp_path / "summary3.md").splitlines()[2] == verdict_text(root)


def test_the_committed_outputs_verify_and_read():
    """The committed study's outputs are read through their manifest (results/regime)."""
    text = verdict_text(ROOT)
    assert text.startswith("**Positive control:") and "results/regime/positive_control.csv" in text


def test_a_damaged_output_is_refused(tmp_path):
    """study.json sits below results/regime, whose manifest covers it: an edited verdict is caught."""
    import shutil

    from replication.store import DamagedArtifact

    shutil.copytree(ROOT / "results" / "regime", tmp_path / "results" / "regime")
    study = tmp_path / STUDY
    study.write_text(study.read_text().replace("no setting passed the pilot", "confirmed"))
    with pytest.raises(DamagedArtifact):
        verdict_text(tmp_path)
