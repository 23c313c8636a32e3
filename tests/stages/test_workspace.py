"""Where outputs go (issue 18.4): only the published default writes results/; every trial gets
its own workspace folder; the README block refuses anything but the published default; list
parameters passed through papermill's -p are read (issue 18.10)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from replication.__main__ import main
from replication.config import ConfigError
from replication.orchestration.workspace import Place, check_out_root, paper_place
from replication.stage_params import notebook_value

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def params(tmp_path, monkeypatch):
    """A git checkout holding this repo's params.yaml, committed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    git = dict(cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **git)
    subprocess.run(["git", "add", "params.yaml"], **git)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "p"], **git)
    return tmp_path / "params.yaml"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_only_the_committed_default_is_published(params):
    place = paper_place("vip", params, _load(params))
    assert place.published and place.root == Path("results")
    assert paper_place("vip", params, _load(params), notebook={"seeds": None, "overrides": {}}).published


@pytest.mark.parametrize("profile, notebook, name", [
    ("quick", {}, "quick"),                         # what `dvc exp run -S profile=quick` gives
    ("quick", {"seeds": [0]}, "quick-"),             # the by-hand notebook run
    (None, {"steps": 5}, "default-"),                # default profile, other parameters: still a trial
    (None, {"overrides": {"optim.lr": 6e-5}}, "default-"),
])
def test_trials_go_to_their_own_workspace(params, profile, notebook, name):
    place = paper_place("vip", params, _load(params), profile=profile, notebook=notebook)
    assert not place.published
    assert place.root.parent == Path("workspace") and place.root.name.startswith(name)
    assert place.root.name == name or len(place.root.name) == len(name) + 8
    with pytest.raises(ConfigError, match="results/ holds only the published default"):
        check_out_root("results", place)
    check_out_root("/tmp/elsewhere", place)


def test_the_same_trial_lands_in_the_same_folder_and_another_does_not(params):
    a = paper_place("vip", params, _load(params), profile="quick", notebook={"seeds": [0]})
    b = paper_place("vip", params, _load(params), profile="quick", notebook={"seeds": [0]})
    c = paper_place("vip", params, _load(params), profile="quick", notebook={"seeds": [1]})
    assert a.root == b.root != c.root


def test_a_section_edited_since_the_commit_is_a_trial(params):
    text = params.read_text().replace("  steps:  ", "  steps: 7  ", 1)
    params.write_text(text)
    place = paper_place("vip", params, _load(params))
    assert not place.published and "params.yaml vip" in place.differs
    assert paper_place("dynamo", params, _load(params)).published  # other sections unchanged


def test_published_place_describes_itself():
    assert "published default" in Place(Path("results"), True, {}).describe("vip")
    text = Place(Path("workspace/quick"), False, {"profile": "quick"}).describe("vip")
    assert "workspace/quick/vip" in text and "results/ is not touched" in text


@pytest.mark.parametrize("raw, kind, want", [
    ("[0]", list, [0]), ("[0, 3]", list, [0, 3]), ([1], list, [1]), (None, list, None),
    ('["RLOO", "RLOO+VIP"]', list, ["RLOO", "RLOO+VIP"]), ("{optim.lr: 6.0e-5}", dict, {"optim.lr": 6e-5}),
])
def test_list_parameters_pass_through_papermill_p(raw, kind, want):
    assert notebook_value("seeds", raw, kind) == want


@pytest.mark.parametrize("raw", ["[0", "0", 3])
def test_a_bad_list_parameter_says_to_use_y(raw):
    with pytest.raises(ConfigError, match=r"seeds: .*-y 'seeds: \[0, 1\]'") as e:
        notebook_value("seeds", raw, list)
    assert "\n" not in str(e.value)


def _summary(folder: Path, paper: str, profile: str) -> None:
    (folder / paper).mkdir(parents=True, exist_ok=True)
    row = {"arm": "B", "baseline": "A", "metric": "average mean@8", "method_mean": 0.5, "baseline_mean": 0.4,
           "diff": 0.1, "ci_low": 0.0, "ci_high": 0.2, "p_value": 0.04, "n": 3, "mde": 0.1}
    (folder / paper / "summary.json").write_text(json.dumps({"profile": profile, "seeds": [0, 1, 2],
                                                            "comparisons": [row]}))
    from replication.store.products import write_products_manifest

    write_products_manifest(folder / paper, extra={"paper": paper})  # sealed, as its stage seals it


def test_readme_refuses_results_of_another_profile(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- results:begin -->\nold\n<!-- results:end -->\n")
    _summary(tmp_path / "results", "vip", "quick")  # what `dvc exp run -S profile=quick` once left
    assert main(["report", "--results", "results", "--out", "results/summary.md", "--readme", "README.md"]) == 2
    err = capsys.readouterr().err.strip()
    assert "profile 'quick'" in err and "README" in err and len(err.splitlines()) == 1
    assert "old" in readme.read_text() and not (tmp_path / "results" / "summary.md").exists()
    _summary(tmp_path / "workspace" / "default-1234abcd", "vip", "default")  # a default-profile trial
    assert main(["report", "--results", "workspace/default-1234abcd", "--out", "x.md", "--readme", "README.md"]) == 2
    assert "only the published" in capsys.readouterr().err
    _summary(tmp_path / "results", "vip", "default")
    assert main(["report", "--results", "results", "--out", "results/summary.md", "--readme", "README.md"]) == 0
    assert "| VIP | default | B | A |" in readme.read_text()


def test_report_sets_a_trial_beside_the_published_results(tmp_path, capsys):
    _summary(tmp_path / "results", "vip", "default")
    _summary(tmp_path / "workspace" / "quick", "vip", "quick")
    out = tmp_path / "workspace" / "quick" / "summary.md"
    assert main(["report", "--results", str(tmp_path / "workspace" / "quick"), "--out", str(out),
                 "--beside", str(tmp_path / "results")]) == 0
    rows = [r for r in out.read_text().splitlines() if r.startswith("| VIP")]
    assert len(rows) == 2 and "default (" in rows[0] and "quick (" in rows[1]
