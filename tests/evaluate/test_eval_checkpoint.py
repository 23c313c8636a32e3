"""``python -m replication eval --checkpoint``: a model folder, or a run folder (the README's
form) through its model/ or its latest checkpoint; anything else is one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from replication.__main__ import main
from replication.train.checkpoint import save_checkpoint
from replication.train.standalone_eval import resolve_checkpoint

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "results" / "base-model"
COMMITTED_RUN = REPO / "results" / "vip" / "runs" / "RLOO" / "s0"
SMALL = ["--set", "eval.prompts_per_set=4", "--set", "eval.k=1", "--set", "eval.greedy=false"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "replication", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _run_folder(root: Path) -> Path:
    """A run folder as a finished or running run leaves it: config.json (the run's config,
    which is not an HF config) and logs."""
    run = root / "run"
    run.mkdir(parents=True)
    shutil.copy(COMMITTED_RUN / "config.json", run / "config.json")
    (run / "steps.jsonl").write_text("")
    return run


def test_a_run_folder_without_model_or_checkpoint_is_one_line_exit_2(tmp_path):
    run = _run_folder(tmp_path)
    for target, needle in [(run, "holds no model: neither a model folder"),
                           (tmp_path / "nowhere", "does not exist")]:
        proc = _cli("eval", "--profile", "default", "--checkpoint", str(target),
                    "--out", str(tmp_path / "ev"), cwd=tmp_path)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(err) == 1 and err[0].startswith(f"error: --checkpoint '{target}'") \
            and needle in err[0], err
    assert not (tmp_path / "ev").exists()


def test_a_run_folder_is_evaluated_through_its_model_folder(tmp_path):
    run = _run_folder(tmp_path)
    shutil.copytree(BASE, run / "model")
    assert main(["eval", "--profile", "default", "--checkpoint", str(run),
                 "--out", str(tmp_path / "ev"), *SMALL]) == 0
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["checkpoint"] == str(run) and m["model"].endswith("(the run's final model/)")
    heldout = [k for k in m["eval"] if k.endswith("-heldout")]
    assert heldout and all(m["eval"][k]["n_prompts"] == 4 for k in heldout)
    assert 0 <= m["eval"]["average"]["pass@1"] <= 1


def test_a_run_folder_without_model_uses_its_checkpoint(tmp_path, monkeypatch):
    """The base model of the run's config, with the checkpoint's weights: the evaluated model
    holds exactly the saved (here: perturbed) weights."""
    from replication.models import load_policy

    run = _run_folder(tmp_path)
    model, _ = load_policy(str(BASE), device="cpu")
    state = {k: v + 0.01 for k, v in model.state_dict().items()}
    save_checkpoint(run, {"step": 3, "config": {"model": {"path": str(BASE)}},
                          "components": {"model": state}})
    folder, payload, chosen = resolve_checkpoint(run)
    assert folder == BASE and chosen == "checkpoint at step 3"
    seen = {}

    class Recording:
        def __init__(self, engine, sets, verifier, cfg):
            pass

        def __call__(self, model, seed=0):
            seen.update(model.state_dict())
            return {"average": {}}

    monkeypatch.setattr("replication.evaluate.runner.Evaluator", Recording)
    assert main(["eval", "--profile", "default", "--checkpoint", str(run),
                 "--out", str(tmp_path / "ev"), *SMALL]) == 0
    assert set(state) == set(seen) and all(torch.equal(seen[k], v) for k, v in state.items())
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert m["model"] == f"{BASE} (checkpoint at step 3)"


def test_a_checkpoint_whose_base_model_is_missing_names_it(tmp_path):
    run = _run_folder(tmp_path)
    save_checkpoint(run, {"step": 1, "config": {"model": {"path": str(tmp_path / "gone")}},
                          "components": {"model": {}}})
    from replication.config import ConfigError

    with pytest.raises(ConfigError, match=r"was trained from .*gone.*not a model folder here"):
        resolve_checkpoint(run)
