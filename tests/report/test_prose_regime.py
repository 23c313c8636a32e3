"""docs/regime.md's generated blocks apply the rules fixed there to the studies on seeds the
reported results do not use (issue 20.5), and say when the pipeline does not run the rule's pick."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from replication.report import prose
from replication.store import write_manifest

ROOT = Path(__file__).resolve().parents[2]


def _root(tmp_path: Path, bandwidth: float = 0.2) -> Path:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["vip"]["arms"]["RLOO+VIP"]["allocator.options"]["bandwidth"] = bandwidth
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "replication/profiles").mkdir(parents=True)
    shutil.copy(ROOT / "replication/profiles/default.yaml", tmp_path / "replication/profiles/default.yaml")
    (tmp_path / "results/regime").mkdir(parents=True)
    return tmp_path


def _gp_study(root: Path) -> None:
    rows = [{"setting": "moving-average (unseen = constant)", "reference": True, "seen": 0.150, "unseen": 0.331, "all": 0.2},
            {"setting": "median", "options": {}, "seen": 0.204, "unseen": 0.230, "all": 0.21},
            {"setting": "bw=0.2", "options": {"bandwidth": 0.2}, "seen": 0.149, "unseen": 0.250, "all": 0.18},
            {"setting": "bw=0.1", "options": {"bandwidth": 0.1}, "seen": 0.140, "unseen": 0.340, "all": 0.19}]
    (root / "results/regime/gp_settings_seed100.json").write_text(json.dumps(
        {"seed": 100, "encoder": "results/encoder", "command": "python scripts/gp_settings_study.py x", "rows": rows}))


def test_gp_choice_applies_the_rule_and_checks_params(tmp_path):
    root = _root(tmp_path)
    _gp_study(root)
    text = prose.GENERATORS["regime-gp-choice"](root)
    # bw=0.1 has the lowest seen MAE but is worse than the constant on unseen prompts: not eligible
    assert "| bw=0.1 | 0.140 | 0.340 | 0.190 | no |" in text
    assert "The rule picks **bw=0.2**" in text and "params.yaml's GP arms run it." in text
    root = _root(tmp_path / "other", bandwidth=0.3)
    _gp_study(root)
    assert "NOT the rule's pick" in prose.GENERATORS["regime-gp-choice"](root)


def test_task_mix_block_applies_the_rule(tmp_path):
    root = _root(tmp_path)
    frontier = json.dumps(yaml.safe_load((ROOT / "replication/profiles/default.yaml").read_text())
                          ["task"]["options"]["train_sizes"], sort_keys=True)
    rows = [{"mix": "frontier", "seed": s, "train_sizes": frontier, "gain": g}
            for s, g in zip(range(100, 104), (0.031, 0.036, 0.040, 0.033))]
    rows += [{"mix": "addition", "seed": s, "train_sizes": json.dumps({"add1": 200}), "gain": g}
             for s, g in zip(range(100, 104), (0.05, -0.01, 0.04, 0.0))]
    pd.DataFrame(rows).to_csv(root / "results/regime/task_mix_seeds_100-103.csv", index=False)
    text = prose.GENERATORS["regime-task-mix"](root)
    assert "| frontier: add1t3, add2, add2t3 | 100, 101, 102, 103 | +3.1, +3.6, +4.0, +3.3 |" in text
    assert "The rule picks **frontier**; the default profile runs frontier — the same." in text
    assert "| addition: add1 |" in text and "| no |" in text


def _uniform_run(folder: Path, seed: int, before: float, after: float, allocator: str = "uniform") -> None:
    folder.mkdir(parents=True)
    ev = lambda x: {"average": {"mean@8": x}}  # noqa: E731
    (folder / "metrics.json").write_text(json.dumps({"seed": seed, "allocator": allocator, "estimator": "grpo",
                                                     "steps": 300, "eval_before": ev(before), "eval_after": ev(after)}))
    (folder / "config.json").write_text(json.dumps({"task": {"options": {"train_sizes": {"add2": 3000}}}}))
    write_manifest(folder, kind="run")


def test_task_mix_script_reads_verified_runs(tmp_path):
    for s, (b, a) in zip((100, 101), ((0.50, 0.54), (0.50, 0.53))):
        _uniform_run(tmp_path / "mix/frontier" / f"s{s}", s, b, a)
    out = tmp_path / "mix.csv"
    r = subprocess.run([sys.executable, "scripts/task_mix_study.py", "--mix", f"frontier={tmp_path / 'mix/frontier'}",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    t = pd.read_csv(out)
    assert list(t["seed"]) == [100, 101] and t["gain"].round(4).tolist() == [0.04, 0.03]
    # a damaged run is refused, naming it
    (tmp_path / "mix/frontier/s101/metrics.json").write_text("{}")
    r = subprocess.run([sys.executable, "scripts/task_mix_study.py", "--mix", f"frontier={tmp_path / 'mix/frontier'}",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "s101" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("allocator", ["dynamo"])
def test_task_mix_script_refuses_a_method_run(tmp_path, allocator):
    _uniform_run(tmp_path / "m/s1", 1, 0.5, 0.6, allocator=allocator)
    r = subprocess.run([sys.executable, "scripts/task_mix_study.py", "--mix", f"m={tmp_path / 'm'}",
                        "--out", str(tmp_path / "o.csv")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "not a uniform run" in r.stderr and not (tmp_path / "o.csv").exists()


def _synthetic_study(root: Path, code_mae: float = 0.30, code: tuple = (0.0, 1e-6)) -> None:
    rows = [{"setting": "moving-average", "predictor": "moving-average", "options": {}, "mae": 0.124},
            {"setting": "ridge", "predictor": "ridge", "options": {}, "mae": 0.082}]
    maes = {(0.0, 1e-6): code_mae, (0.0, 0.01): 0.19, (1.0, 1e-6): 0.12, (1.0, 0.01): 0.053}
    rows += [{"setting": f"σ_n² = {n:g}, ε = {e:g}", "predictor": "gp", "options": {"noise": n, "clip_eps": e},
              "mae": m} for (n, e), m in maes.items()]
    rows.append({"setting": "h = 0.4, code's σ_n² and ε", "predictor": "gp",
                 "options": {"bandwidth": 0.4, "noise": 0.0, "clip_eps": 1e-6}, "mae": 0.238})
    args = {"prompts": 3000, "clusters": 30, "dim": 64, "cluster_spread": 0.3, "spread": 3.0, "offset": -0.5,
            "drift": 1.0, "batch": 256, "rollouts": 8, "steps": 40, "burn_in": 5, "seed": 0}
    (root / "results/regime/gp_synthetic_check.json").write_text(json.dumps(
        {"args": args, "command": "python scripts/gp_synthetic_check.py --out x",
         "code": {"noise": code[0], "clip_eps": code[1]}, "rows": rows}))


def test_gp_synthetic_block_marks_the_code_and_the_pipeline(tmp_path):
    """docs/fidelity/vip.md #5/#6: the σ_n² × ε grid, the code's row labelled, the pipeline's
    setting (params.yaml's GP arms, GPConfig's defaults where unset) in bold, the verdict computed."""
    root = _root(tmp_path)
    _synthetic_study(root)
    text = prose.GENERATORS["gp-synthetic-check"](root)
    assert "| σ_n² \\ ε | 1e-06 | 0.01 |" in text
    assert "| 0 (code) | 0.300 | 0.190 |" in text and "| 1 | 0.120 | **0.053** |" in text
    assert "References: moving-average 0.124, ridge 0.082. h = 0.4, code's σ_n² and ε: 0.238." in text
    assert "the grid's best: σ_n² = 1, ε = 0.01, 0.053 — at the grid's edge." in text
    assert "The code's values predict worst of the grid." in text
    assert "Every setting with σ_n² > 0 and ε ≥ 0.01 beats both references." in text
    assert "h = 0.2" in text and "Command: `python scripts/gp_synthetic_check.py --out x`" in text
    root = _root(tmp_path / "other")
    _synthetic_study(root, code_mae=0.1)
    assert "The grid's worst is σ_n² = 0, ε = 0.01, not the code's values." in prose.GENERATORS["gp-synthetic-check"](root)


def test_gp_synthetic_block_labels_the_code_the_study_names(tmp_path):
    """The code's row is the one the study says the official code runs, not the grid's corner;
    a study whose grid lacks it is refused rather than mislabelled."""
    root = _root(tmp_path)
    _synthetic_study(root, code=(1.0, 1e-6))
    text = prose.GENERATORS["gp-synthetic-check"](root)
    assert "| 1 (code) | 0.120 | **0.053** |" in text and "| 0 | 0.300 | 0.190 |" in text
    assert "The code's values (σ_n² = 1, ε = 1e-06): 0.120" in text
    _synthetic_study(root, code=(0.5, 1e-6))
    with pytest.raises(ValueError, match="no cell for the official code's σ_n² = 0.5"):
        prose.GENERATORS["gp-synthetic-check"](root)


def _exported(root: Path, paper: str, created: list[str], walls: list[float], nb: tuple[str, str],
              commit: str = "abcdef0123", digest: str = "d1g3st") -> None:
    for i, (c, w) in enumerate(zip(created, walls)):
        run = root / "results" / paper / "runs" / "ARM" / f"s{i}"
        run.mkdir(parents=True)
        (run / "MANIFEST.json").write_text(json.dumps({"created": c, "files": {}}))
        (run / "metrics.json").write_text(json.dumps({"wall_seconds": w, "provenance": {
            "code_digest": digest, "commit": commit, "dirty": i == 0}}))
    (root / "results" / paper / f"{paper}.ipynb").write_text(json.dumps(
        {"metadata": {"papermill": {"start_time": nb[0], "end_time": nb[1]}}, "cells": []}))
    from replication.store.products import write_products_manifest

    write_products_manifest(root / "results" / paper)  # as its stage seals it: prose verifies it first


def test_rerun_time_is_read_from_the_exports_and_the_notebooks(tmp_path):
    """docs/regime.md "Time": export windows, wall-second sums and medians, the notebooks'
    last executions and how many exports fall inside them (none after a cached re-execution)."""
    root = tmp_path
    _exported(root, "vip", ["2026-12-02T06:19:00Z", "2026-12-02T06:56:00Z", "2026-12-02T06:30:00Z"],
              [60.0, 120.0, 180.0], ("2026-12-02T06:16:00+00:00", "2026-12-02T07:03:30+00:00"))
    _exported(root, "dynamo", ["2026-12-02T07:04:00Z", "2026-12-02T07:14:00Z"], [30.0, 90.0],
              ("2026-12-02T07:03:30+00:00", "2026-12-02T07:17:00+00:00"))
    # a report-only repro re-executed GDRO's notebook later: its runs come from the run cache
    _exported(root, "gdro", ["2026-12-02T07:18:00Z", "2026-12-02T07:43:00Z"], [600.0, 600.0],
              ("2026-12-02T09:00:00+00:00", "2026-12-02T09:02:00+00:00"), commit="1234567abc")
    text = prose.GENERATORS["rerun-time"](root)
    assert "| VIP | 3 | 2026-12-02 06:19–06:56 | 6 min (120 s) | 48 min (2026-12-02 06:16–07:03) | 3 |" in text
    assert "| DynaMO | 2 | 2026-12-02 07:04–07:14 | 2 min (60 s) | 14 min (2026-12-02 07:03–07:17) | 2 |" in text
    assert "| GDRO | 2 | 2026-12-02 07:18–07:43 | 20 min (600 s) | 2 min (2026-12-02 09:00–09:02) | 0 |" in text
    assert "| **all** | 7 | 2026-12-02 06:19–07:43 (**84 min**) |" in text
    assert "Code digest of the runs: d1g3st; commits named in their provenance: 1234567, 1234567 (dirty), " \
           "abcdef0, abcdef0 (dirty)." in text


def test_rerun_time_of_stages_from_different_reruns_gives_no_total(tmp_path):
    """A re-run under way: one stage's runs are new (another code digest, another day); the
    table says so instead of timing one "re-run" across days, and a window crossing a day gives
    both dates."""
    root = tmp_path
    _exported(root, "vip", ["2026-12-06T23:50:00Z", "2026-12-07T00:20:00Z"], [60.0, 60.0],
              ("2026-12-06T23:45:00+00:00", "2026-12-07T00:30:00+00:00"), digest="new")
    for paper in ("dynamo", "gdro"):
        _exported(root, paper, ["2026-12-02T07:04:00Z", "2026-12-02T07:14:00Z"], [30.0, 90.0],
                  ("2026-12-02T07:03:30+00:00", "2026-12-02T07:17:00+00:00"), digest="old")
    text = prose.GENERATORS["rerun-time"](root)
    assert "| VIP | 2 | 2026-12-06 23:50 – 2026-12-07 00:20 | 2 min (60 s) |" in text
    assert "| **all** | 6 | runs of 2 code digests: not one re-run, no total |" in text
    assert "Code digest of the runs: new, old;" in text
