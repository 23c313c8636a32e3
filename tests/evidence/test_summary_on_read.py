"""`report` reads a paper's summary.json only once its products manifest verifies (issue 34.4):
a hand-edited summary was published as it was, a cut one was a raw JSONDecodeError. Now each is
one line naming the file, exit 1, and no page is written; the published results/ must be sealed,
a trial a notebook wrote outside a stage is read with a note saying it is unverified."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.product_helpers import paper_copy, sealed_paper
from faults.cli_helpers import one_line_error
from replication.__main__ import main


def _report(capsys, results: Path) -> tuple[int, str]:
    rc = main(["report", "--results", str(results), "--out", str(results / "summary.md")])
    return rc, capsys.readouterr().err


def test_a_sealed_summary_is_reported(tmp_path, capsys):
    sealed_paper(tmp_path)
    rc, err = _report(capsys, tmp_path)
    assert rc == 0 and err == ""
    assert "| VIP | default |" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("edit", [
    lambda text: text.replace('"n": 10', '"n": 11', 1),  # a hand edit
    lambda text: text[: len(text) // 2],  # cut
    lambda text: "",  # emptied
])
def test_an_edited_or_cut_summary_is_one_line_exit_1(tmp_path, capsys, edit):
    summary = sealed_paper(tmp_path) / "summary.json"
    summary.write_text(edit(summary.read_text()))
    rc, err = _report(capsys, tmp_path)
    assert rc == 1
    one_line_error(err, str(summary))
    assert not (tmp_path / "summary.md").exists()


def test_published_results_without_a_manifest_are_refused(tmp_path, capsys, monkeypatch):
    root = tmp_path / "repo"
    for marker in ("dvc.yaml", "params.yaml"):
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).write_text("")
    paper_copy(root / "results")
    monkeypatch.chdir(root)
    monkeypatch.delenv("REPLICATION_ROOT", raising=False)
    rc, err = _report(capsys, Path("results"))
    assert rc == 1
    one_line_error(err, "results/vip", "no MANIFEST.json")


def test_a_trial_outside_a_stage_is_read_with_a_note(tmp_path, capsys):
    paper_copy(tmp_path / "workspace" / "quick-1a2b3c4d")
    rc, err = _report(capsys, tmp_path / "workspace" / "quick-1a2b3c4d")
    assert rc == 0
    assert "note:" in err and "read unverified" in err and "error" not in err
