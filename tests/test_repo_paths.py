"""One resolver of the repository root (replication/paths.py), and notebooks that start in
notebooks/ (JupyterLab, nbconvert): the first cells find params.yaml and can be run twice;
every figure cell displays its figure inline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from replication.config import ConfigError
from replication.paths import ROOT_ENV, enter_repo_root, params_path, repo_root

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ("vip", "dynamo", "gdro")


def test_root_from_any_subfolder(monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    for sub in ("notebooks", "replication/report", "."):
        monkeypatch.chdir(ROOT / sub)
        assert repo_root() == ROOT
    assert params_path() == ROOT / "params.yaml" and params_path("x.yaml") == Path("x.yaml")


def test_root_of_another_checkout_and_the_env_override(tmp_path, monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / "params.yaml").write_text("profile: smoke\n")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert repo_root() == tmp_path  # the checkout the user is in, before the package's own
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(ROOT_ENV, str(tmp_path))
    assert repo_root() == tmp_path
    monkeypatch.setenv(ROOT_ENV, str(tmp_path / "notebooks"))
    with pytest.raises(ConfigError, match=ROOT_ENV):
        repo_root()


def test_enter_repo_root_twice(monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    monkeypatch.chdir(ROOT / "notebooks")
    assert enter_repo_root() == ROOT and Path.cwd() == ROOT
    assert enter_repo_root() == ROOT and Path.cwd() == ROOT


def test_library_defaults_read_the_repository_params(monkeypatch):
    from replication.stage_params import load_params, validate_stage

    monkeypatch.delenv(ROOT_ENV, raising=False)
    monkeypatch.chdir(ROOT / "notebooks")
    assert "vip" in load_params()
    assert "OK" in validate_stage(None, "report")


def _cells(name: str) -> list:
    import nbformat

    return [c for c in nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells
            if c.cell_type == "code"]


@pytest.mark.parametrize("name", PAPERS)
def test_every_figure_is_shown_inline(name):
    """A plot call ending in ';' displays nothing (the figures are not pyplot's): each is wrapped
    in show(...)."""
    src = "\n".join(c.source for c in _cells(name))
    calls = re.findall(r"^\s*(\S*)\b(?:plots|lab|gvr|predictor_study)\.(?:plot_\w+|arm_comparison|"
                       r"training_curves|allocation_curve|\w+_heatmap)\(", src, flags=re.M)
    assert calls and all(c == "show(" for c in calls), calls


def test_first_cells_run_from_notebooks_folder_twice():
    """The parameters cell and the root cell, executed by a kernel started in notebooks/ (as
    JupyterLab and nbconvert start it), each cell twice; then params.yaml loads as given."""
    import nbformat
    from nbclient import NotebookClient

    params, root_cell = _cells("vip")[:2]
    check = nbformat.v4.new_code_cell(
        "from replication.orchestration.grid import load_section\n"
        "import os\nprint(os.getcwd()); print(sorted(load_section(section, params_file)['arms'])[0])")
    again = [nbformat.v4.new_code_cell(c.source) for c in (params, root_cell)]
    nb = nbformat.v4.new_notebook(cells=[params, root_cell, *again, check])
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    assert out.splitlines()[0] == str(ROOT), out


def test_show_displays_png(monkeypatch):
    from matplotlib.figure import Figure
    import IPython.display

    from replication.report import inline

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1])
    inline.show(fig)
    inline.show(None)
    assert len(shown) == 1 and shown[0].data[:8] == b"\x89PNG\r\n\x1a\n"
