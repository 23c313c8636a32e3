"""Every code block of README.md is run here, or listed in MANUAL with the reason it is not.

A newcomer copies the README's commands as written (issue 34.6: brackets copied from
``[--max-steps N]``, an ``--out results/...`` that overwrote committed results). Each block is
either run cheaply — in a temporary folder, on the smoke profile, with only an output path
redirected — or named in ``MANUAL`` with why; a new block that is neither fails
``test_every_block_is_run_or_manual``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

MANUAL = {
    "dvc repro --quiet": "installs the packages and runs the whole pipeline (hours on 2 cores); "
                         "the stages are tested by tests/stages and tests/test_pipeline.py",
    "python -m pytest -q -n 2": "installs the packages and runs the whole suite (about 15 minutes)",
    "dvc exp run --set-param profile=quick": "trains the quick profile (about 9 minutes) and records "
                                             "a DVC experiment; tests/stages/test_dvc_trial.py runs trials",
    "jupyter lab notebooks/": "starts an interactive server; tests/test_repo_paths.py runs the "
                              "notebooks' first cells from notebooks/ as JupyterLab starts them",
    "benchmarks/bench_solvers.py": "timings (minutes); tests/benchmarks runs the benchmarks small",
}
RUN = ("replication report --results workspace/quick-1a2b3c4d", "make_allocator(",
       "replication sft   --profile smoke", "replication prefetch --scale paper")
"""Key phrases of the blocks run below (one test each)."""


def blocks() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in FENCE.findall((ROOT / "README.md").read_text())]


def _block(key: str) -> str:
    found = [body for _, body in blocks() if key in body]
    assert len(found) == 1, f"README: {len(found)} code blocks contain {key!r}"
    return found[0]


def test_every_block_is_run_or_manual():
    for lang, body in blocks():
        keys = [k for k in (*MANUAL, *RUN) if k in body]
        assert len(keys) == 1, f"README block not run by a test nor listed in MANUAL:\n{body}"
        assert not re.search(r"\[--|<\w", body), f"[--flag] or <placeholder> is copied as typed:\n{body}"
    for key in (*MANUAL, *RUN):
        _block(key)


def _env(**extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "REPLICATION_ROOT": str(ROOT), **extra}


def _shell(body: str, cwd: Path, **sub: str) -> None:
    """Each command line of ``body`` as written, ``python`` being this interpreter."""
    for line in body.strip().splitlines():
        line = line.split("  #")[0].strip()
        if not line:
            continue
        for old, new in sub.items():
            line = line.replace(old, new)
        cmd = re.sub(r"(^|&& )python ", lambda m: f"{m.group(1)}{sys.executable} ", line)
        r = subprocess.run(cmd, shell=True, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{line}\n{r.stderr[-3000:]}"
        assert "Traceback" not in r.stderr, r.stderr


def test_report_beside_block(tmp_path):
    """The trial-beside-published command, in a folder holding both (the committed summaries)."""
    for folder in ("results", "workspace/quick-1a2b3c4d"):
        for paper in ("vip", "dynamo", "gdro"):
            src = ROOT / "results" / paper / "summary.json"
            (tmp_path / folder / paper).mkdir(parents=True)
            shutil.copy(src, tmp_path / folder / paper / "summary.json")
    out = tmp_path / "both.md"
    _shell(_block(RUN[0]), tmp_path, **{"/tmp/both.md": str(out)})
    assert "| VIP |" in out.read_text()


def test_python_block(tmp_path):
    code = _block(RUN[1])
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_cli_block_on_the_smoke_profile(tmp_path):
    """sft, train, eval and dry-run as written, in a temporary folder (their runs/ lands there)."""
    _shell(_block(RUN[2]), tmp_path)
    assert (tmp_path / "runs" / "vip-s0").is_dir() and (tmp_path / "runs" / "vip-s0-eval").is_dir()
    assert not list((ROOT / "runs").glob("vip-s0*")) if (ROOT / "runs").exists() else True


def test_paper_scale_block_plans_and_watches_as_written(tmp_path):
    """The *Paper scale* block's lines that need neither GPUs nor the hub, as written: the
    dry-run plan (16 GPUs' worth of commands, no GPU needed) and `status` (every run missing in a
    fresh folder's run cache). Not run here: `prefetch` downloads the papers' models from the hub
    (tests/store/test_prefetch.py runs it against a local stand-in), and the `dvc exp run` lines
    train paper-scale models on GPUs; their SLURM path runs on the smoke profile through a local
    cluster in tests/stages/test_slurm_stage.py, and `-S vip.scales.paper.shape.processes=1` is
    checked to resolve below."""
    body = _block(RUN[3])
    lines = [line for line in body.strip().splitlines()]
    runnable = [line for line in lines if line.startswith(("python -m replication dry-run", "python -m replication status"))]
    assert len(runnable) == 2, lines
    _shell("\n".join(runnable), tmp_path)
    # the one-GPU box's override: a key DVC's -S can set (it exists in params.yaml), giving 1-GPU runs
    import copy

    import yaml

    from replication.stage_params import load_params, section_at_scale

    override = next(line for line in lines if "shape.processes=1" in line).split("  #")[0].split()
    assert override[:3] == ["dvc", "exp", "run"]
    params = copy.deepcopy(load_params(ROOT / "params.yaml"))
    assert params["vip"]["scales"]["paper"]["shape"]["processes"] == 8  # the key the override sets exists
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    from dvc.utils.hydra import apply_overrides  # what `dvc exp run -S` does to params.yaml

    apply_overrides(tmp_path / "params.yaml", [a for a in override[3:] if a not in ("-S", "vip")])
    shape = section_at_scale(load_params(tmp_path / "params.yaml"), "vip")["shape"]
    assert shape["processes"] == 1 and shape["gpus_per_process"] == 1, shape
