"""`python -m replication verify` on every kind of folder the pipeline writes (issue 34.4): one
line each saying what was checked; exit 0 verified, 1 damage found, 2 bad input (a missing or
empty folder). Small copies of the committed results stand in for each kind."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evidence.product_helpers import RESULTS, paper_copy, sealed_paper
from faults.cli_helpers import ROOT, one_line_error, run_cli
from replication.__main__ import main


def verify(capsys, *paths: Path) -> tuple[int, str, str]:
    rc = main(["verify", *map(str, paths)])
    out, err = capsys.readouterr()
    return rc, out, err


# ----------------------------------------------------------------------------- bad input


def test_missing_or_empty_folder_is_bad_input(tmp_path):
    r = run_cli("verify", str(tmp_path / "nonexistent"))  # the CLI as typed (was exit 1)
    assert r.returncode == 2 and r.stdout == ""
    one_line_error(r.stderr, "nonexistent", "no such file or folder")
    (tmp_path / "empty").mkdir()
    r = run_cli("verify", str(tmp_path / "empty"))
    assert r.returncode == 2
    one_line_error(r.stderr, "empty folder")


def test_bad_input_is_found_before_anything_is_verified(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    rc, out, err = verify(capsys, sealed_paper(tmp_path), tmp_path / "notes")
    assert rc == 2 and out == ""
    one_line_error(err, "notes", "not a folder the pipeline writes")


# ----------------------------------------------------------------------------- each kind verifies


def _base_model(where: Path) -> Path:
    dest = where / "base-model"
    shutil.copytree(RESULTS / "base-model", dest)
    return dest


def _unsealed_base_model(where: Path) -> Path:
    """A base model folder from before the base stage wrote manifests."""
    dest = _base_model(where)
    (dest / "MANIFEST.json").unlink()
    return dest


@pytest.mark.parametrize("kind, target, says", [
    ("export", lambda t: sealed_paper(t) / "runs" / "RLOO" / "s0", "export verified"),
    ("runs folder", lambda t: sealed_paper(t) / "runs", "export verified"),
    ("paper products", sealed_paper, "paper products verified"),
    ("measurement", lambda t: sealed_paper(t) / "gradient_variance", "gradient-variance measurement verified"),
    ("summary", lambda t: sealed_paper(t) / "summary.json", "summary.json: verified against"),
    ("table", lambda t: sealed_paper(t) / "tables" / "comparisons.csv", "verified with the"),
    ("base model", _base_model, "base-model verified"),
    ("unsealed base model", _unsealed_base_model, "base model checked, not under a MANIFEST.json"),
])
def test_each_kind_verifies_and_says_what_was_checked(tmp_path, capsys, kind, target, says):
    rc, out, err = verify(capsys, target(tmp_path))
    assert rc == 0, err
    assert says in out and err == ""


def test_a_results_folder_verifies_each_thing_in_it(tmp_path, capsys):
    sealed_paper(tmp_path)
    _base_model(tmp_path)
    rc, out, err = verify(capsys, tmp_path)
    assert rc == 0, err
    assert "paper products verified" in out and "1 export" in out and "1 gradient-variance" in out
    assert "base-model verified" in out


def test_the_committed_results_verify():
    """A clean clone verifies: the committed paper folders were sealed once (`seal results/<paper>`)."""
    r = run_cli("verify", "results", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for paper in ("vip", "dynamo", "gdro"):
        assert f"results/{paper}: paper products verified" in r.stdout
    assert r.stdout.count("export") >= 3


# ----------------------------------------------------------------------------- damage in each kind


def _flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def _damage(kind: str, where: Path) -> tuple[Path, str]:
    """(what to verify, the file its error line must name)."""
    if kind == "base model":
        model = _base_model(where) / "model.safetensors"
        model.write_bytes(model.read_bytes()[:-100])
        return model.parent, "model.safetensors"
    paper = sealed_paper(where)
    if kind == "export":
        _flip(paper / "runs" / "RLOO" / "s0" / "metrics.json")
        return paper / "runs" / "RLOO" / "s0", "metrics.json"
    if kind == "export seen from its paper":
        _flip(paper / "runs" / "RLOO" / "s0" / "steps.jsonl")
        return paper, "steps.jsonl"
    if kind == "measurement":
        _flip(paper / "gradient_variance" / "gradient_variance.csv")
        return paper / "gradient_variance", "gradient_variance.csv"
    if kind == "table":
        _flip(paper / "tables" / "comparisons.csv")
        return paper, "comparisons.csv"
    if kind == "unlisted figure":
        shutil.copy(paper / "figures" / "heldout.png", paper / "figures" / "extra.png")
        return paper, "extra.png"
    if kind == "summary":
        path = paper / "summary.json"
        path.write_text(path.read_text().replace('"profile": "default"', '"profile": "defaulT"'))
        return path, "summary.json"
    if kind == "no manifest":
        (paper / "MANIFEST.json").unlink()
        return paper, "seal"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["export", "export seen from its paper", "measurement", "table",
                                  "unlisted figure", "summary", "no manifest", "base model"])
def test_damage_in_each_kind_exits_1_naming_the_file(tmp_path, capsys, kind):
    target, name = _damage(kind, tmp_path)
    rc, out, err = verify(capsys, target)
    assert rc == 1
    one_line_error(err, name)


# ----------------------------------------------------------------------------- sealing once


def test_seal_checks_an_old_paper_folder_then_seals_it_once(tmp_path, capsys):
    paper = paper_copy(tmp_path, "dynamo")
    assert main(["seal", str(paper)]) == 0
    out = capsys.readouterr().out
    assert "paper products sealed after checking" in out and "table" in out
    assert main(["verify", str(paper)]) == 0
    assert main(["seal", str(paper)]) == 0
    assert "already sealed, verified" in capsys.readouterr().out


def _edit_first_diff(paper: Path) -> None:
    """A hand edit of one figure of summary.json (the table it was made from left as it was)."""
    path = paper / "summary.json"
    path.write_text(re.sub(r'"diff": (-?[0-9.e-]+)', lambda m: f'"diff": {float(m.group(1)) + 0.01!r}',
                           path.read_text(), count=1))


@pytest.mark.parametrize("damage, name", [
    (_edit_first_diff, "comparisons.csv"),
    (lambda p: (p / "summary.json").write_text((p / "summary.json").read_text()[:500]), "summary.json"),
    (lambda p: (p / "figures" / "heldout.png").write_bytes((p / "figures" / "heldout.png").read_bytes()[:900]),
     "heldout.png"),
])
def test_seal_refuses_a_folder_whose_files_do_not_hold_up(tmp_path, capsys, damage, name):
    paper = paper_copy(tmp_path, "dynamo")
    damage(paper)
    assert main(["seal", str(paper)]) == 1
    one_line_error(capsys.readouterr().err, name)
    assert not (paper / "MANIFEST.json").exists()
