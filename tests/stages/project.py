"""A throwaway DVC project for the stage tests: this repo's dvc.yaml and params.yaml, a small fake
results tree, and fake paper notebooks that do what the real ones do to the disk in a second:
claim their output folder (replication.orchestration.workspace), export a "run", write tables,
figures and summary.json into the products folder (the fake results/<paper> folders are sealed
with their products manifest, as the stage seals them); with ``FAKE_HANG=<file>`` they start a
"trainer" bound to the kernel as the grid's are (with ``FAKE_STUBBORN=1`` one that ignores SIGTERM
and outlives the kernel instead), write "<kernel pid> <trainer pid>" to the file and wait; with ``FAKE_FAIL=1`` a cell fails after the products are written, with
``FAKE_DETACH=<message>`` a cell raises GridDetached(message) as a detached SLURM grid does.
``make_project(..., real=("vip",))`` puts the real notebook of those papers in, with what it needs
to train for real: the committed base model and the real encoder export (the `encoder` stage)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("vip", "dynamo", "gdro")

PARAMETERS = '''section = "vip"
params_file = "params.yaml"
out_root = None
workers = 0
profile = None
overrides = {}
seeds = None
arms = None
steps = None
gradvar_draws = None
'''

BODY = '''import json, os, subprocess, sys, time
from replication.orchestration.workspace import claim_output, paper_place
from replication.stage_params import load_params, notebook_value
seeds = notebook_value("seeds", seeds, list)
place = paper_place(section, params_file, load_params(params_file), profile=profile, notebook={"seeds": seeds})
out, products = claim_output(section, place, out_root)
(out / "runs").mkdir(parents=True, exist_ok=True)
(out / "runs" / "new-run.json").write_text("{}")
for name in ("tables", "figures"):
    (products / name).mkdir(parents=True, exist_ok=True)
(products / "tables" / "heldout.csv").write_text("new table")
(products / "figures" / "heldout.png").write_text("new figure")
(products / "summary.json").write_text(json.dumps({"profile": profile or load_params(params_file)["profile"],
                                                  "seeds": seeds or [0], "comparisons": []}))
'''

HANG = '''hang = os.environ.get("FAKE_HANG")
if hang:
    bound = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
             if os.environ.get("FAKE_STUBBORN") else "import sys, time; from replication.interrupts import "
             "die_with_parent; die_with_parent(int(sys.argv[1])); time.sleep(600)")
    trainer = subprocess.Popen([sys.executable, "-c", bound, str(os.getpid())])
    open(hang + ".tmp", "w").write(f"{os.getpid()} {trainer.pid}")
    os.replace(hang + ".tmp", hang)
    time.sleep(600)
if os.environ.get("FAKE_FAIL"):
    raise RuntimeError("a cell failed")
if os.environ.get("FAKE_DETACH"):
    from replication.launch.inflight import GridDetached
    raise GridDetached(os.environ["FAKE_DETACH"])
'''


def fake_notebook(paper: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMETERS.replace('"vip"', f'"{paper}"'))
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(BODY), nbformat.v4.new_code_cell(HANG)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


PUBLISHED = {f"results/{p}/{name}": f"committed {name}" for p in PAPERS
             for name in ("runs/RLOO/s0/metrics.json", "tables/heldout.csv", "figures/heldout.png", "summary.json")}
PUBLISHED.update({"results/base-model/model.safetensors": "weights", "results/summary.md": "# summary\n"})
for _p in PAPERS:
    PUBLISHED[f"results/{_p}/summary.json"] = '{"profile": "default", "seeds": [0], "comparisons": []}'
    PUBLISHED[f"results/{_p}/{_p}.ipynb"] = "{executed notebook}"


def make_project(where: Path, *, git: bool = True, real: tuple[str, ...] = ()) -> Path:
    proj = where / "proj"
    proj.mkdir(parents=True)
    for name in ("params.yaml", "dvc.yaml", ".gitignore"):
        shutil.copy(ROOT / name, proj / name)
    from replication.orchestration.base_model import KEY_FILE, base_key

    (proj / "results" / "base-model").mkdir(parents=True)  # current for the default: never rebuilt here
    (proj / "results" / "base-model" / KEY_FILE).write_text(base_key("default") + "\n")
    shutil.copy(ROOT / "results" / ".gitignore", proj / "results" / ".gitignore")
    for stand_ins in ("default", "small"):  # dvc.yaml's workspace/${profile} and workspace/${scale}
        shutil.copytree(ROOT / "workspace" / stand_ins, proj / "workspace" / stand_ins)
    # the frozen regime stages' committed evidence (dvc.yaml): DVC checks a frozen stage's outputs exist
    shutil.copytree(ROOT / "results" / "regime", proj / "results" / "regime")
    (proj / "replication").symlink_to(ROOT / "replication")
    (proj / "notebooks").mkdir()
    for paper in PAPERS:
        nbformat.write(fake_notebook(paper), proj / "notebooks" / f"{paper}.ipynb")
    (proj / "scripts").mkdir()  # the encoder stage: a stand-in that writes its folder at once
    (proj / "scripts" / "export_encoder.py").write_text(
        "import sys, pathlib\np = pathlib.Path(sys.argv[1]); p.mkdir(parents=True, exist_ok=True)\n"
        "(p / 'config.json').write_text('{}')\n")
    for study in ("gp_synthetic_check.py", "gp_settings_study.py", "task_mix_study.py", "regime_runs.py",
                  "positive_control.py"):
        shutil.copy(ROOT / "scripts" / study, proj / "scripts" / study)  # frozen stages' deps must exist
    for rel, text in PUBLISHED.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    from replication.store.products import write_products_manifest

    if real:  # real notebooks train: the committed base model, VIP's encoder exported for real
        shutil.rmtree(proj / "results" / "base-model")
        shutil.copytree(ROOT / "results" / "base-model", proj / "results" / "base-model")
        shutil.copy(ROOT / "scripts" / "export_encoder.py", proj / "scripts" / "export_encoder.py")
        for paper in real:
            shutil.copy(ROOT / "notebooks" / f"{paper}.ipynb", proj / "notebooks" / f"{paper}.ipynb")
    for paper in PAPERS:  # sealed as a stage seals its products (dvc.yaml declares the manifest)
        write_products_manifest(proj / "results" / paper, extra={"paper": paper})
    if git:
        commit_project(proj)
    return proj


def commit_project(proj: Path) -> None:
    """``git init`` + ``dvc init`` and commit everything (a clone's state)."""
    run = dict(cwd=proj, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], **run)
    subprocess.run(["git", "add", "-A"], **run)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fixture"], **run)


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and ".lock" not in p.name}


def wait_for(path: Path, timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.2)
    raise TimeoutError(f"{path} never appeared")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] not in "ZX"
