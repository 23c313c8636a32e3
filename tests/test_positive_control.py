"""The positive-control study (issue 37, docs/positive_control.md): its declaration read as data,
the runs it asks for, its declared decisions on constructed data, and the stage script end to
end on the smoke profile with a small declaration of the same form (slow, ~2 min)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from replication.analysis import positive_control as pc

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study() -> pc.Study:
    return pc.load_study()


def test_the_declaration_reads_as_declared(study):
    cells = study.cells()
    assert len(cells) == 4 * 2 * 4 * 2 == len({c.name for c in cells})
    assert len({c.uniform_name for c in cells}) == 2 * 2 * 4 * 2  # L, U do not change a uniform run
    first = cells[0]  # the first level of every lever is today's default profile
    assert (first.budget, first.prompts, first.mix, first.lr) == (pc.Budget(4, 2, 12), 64, "frontier", 3e-5)
    from replication.config import load_profile

    d = load_profile("default")
    assert (d.rollout.mean_rollouts, d.rollout.lower, d.rollout.upper, d.rollout.prompts_per_step, d.optim.lr) == \
        (4, 2, 12, 64, 3e-5)
    assert dict(study.mixes["frontier"]) == dict(d.task.options["train_sizes"])
    assert {sum(m.values()) for m in study.mixes.values()} == {5500}
    assert study.blob == subprocess.run(["git", "hash-object", str(pc.SPEC)], capture_output=True, text=True,
                                        cwd=ROOT).stdout.strip()


def test_a_run_differs_from_the_profile_only_by_its_cell_and_arm(study):
    from replication.config import load_profile

    cell = study.cell("n8L2U24-q16-extremes-lr1.5e-05")
    oracle = load_profile("default", pc.run_overrides(study, cell, "oracle"))
    assert (oracle.rollout.mean_rollouts, oracle.rollout.lower, oracle.rollout.upper) == (8, 2, 24)
    assert oracle.rollout.prompts_per_step == 16 and oracle.optim.lr == 1.5e-5
    assert oracle.allocator.name == "vip-probe" and oracle.allocator.options == {"probe_rollouts": 64}
    assert oracle.task.options["train_sizes"]["add1"] == 200 and oracle.rl.estimator == "grpo"
    uniform = load_profile("default", pc.run_overrides(study, cell, "uniform"))
    assert uniform.allocator.name == "uniform" and uniform.rollout.mean_rollouts == 8
    # one uniform run per n̄: configured with the first declared bounds of its n̄
    assert (uniform.rollout.lower, uniform.rollout.upper) == (4, 16)
    assert pc.run_name(cell, "uniform", 100) == "n8-q16-extremes-lr1.5e-05/uniform/s100"
    assert pc.run_name(cell, "oracle", 200) == "n8L2U24-q16-extremes-lr1.5e-05/oracle/s200"
    with pytest.raises(ValueError, match="arm must be one of"):
        pc.run_name(cell, "vip", 0)


def test_a_declaration_with_reported_seeds_or_other_arms_is_refused(tmp_path):
    d = yaml.safe_load(pc.SPEC.read_text())
    bad = dict(d, pilot={**d["pilot"], "seeds": [0, 1, 2, 3]})
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="seeds must be >= 100"):
        pc.load_study(tmp_path / "a.yaml")
    bad = dict(d, arms={**d["arms"], "vip": {"allocator.name": "vip"}})
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match="arms must be exactly"):
        pc.load_study(tmp_path / "b.yaml")


def test_screen_ranks_eligible_cells_by_the_ratio_then_rollouts(study):
    cells = study.cells()
    rows = pd.DataFrame({"cell": [c.name for c in cells], "statistic": np.linspace(2.0, 0.5, len(cells)),
                         "uniform_gain": 0.01})
    rows.loc[len(cells) - 1, "uniform_gain"] = -0.01   # the lowest ratio, but its baseline did not learn
    rows.loc[0, "statistic"] = np.nan                   # undefined at every checkpoint: last
    ranked = pc.rank_screen(rows, study, steps=300)
    piloted = ranked.loc[ranked["piloted"], "cell"].tolist()
    assert set(piloted) == {cells[-2].name, cells[-3].name, cells[-4].name}
    assert cells[-1].name not in piloted and not ranked.loc[len(cells) - 1, "eligible"]
    assert ranked.loc[0, "rank"] == ranked["rank"].max()
    # equal ratios: the cheaper cell (fewer rollouts per run) first
    small = study.cell("n4L2U12-q16-frontier-lr3e-05")
    both = pd.DataFrame({"cell": [study.cell("n8L4U16-q64-frontier-lr3e-05").name, small.name],
                         "statistic": [0.8, 0.8], "uniform_gain": [0.02, 0.02]})
    r = pc.rank_screen(both, study, 300).set_index("cell")
    assert r.loc[small.name, "rank"] == 1 and r.loc[small.name, "rollouts"] == 16 * 4 * 300


def test_screen_statistic_leaves_out_undefined_checkpoints():
    df = pd.DataFrame({"step": [0, 150, 300, 0], "method": ["vip-oracle"] * 3 + ["uniform"],
                       "metric": ["noise_to_signal_vs_uniform"] * 4, "value": [0.5, np.nan, 0.7, 1.0]})
    stat, per = pc.screen_statistic(df)
    assert stat == pytest.approx(0.6) and np.isnan(per[150])
    assert np.isnan(pc.screen_statistic(df.assign(value=np.nan))[0])


def _pairs(cell, diffs, gains):
    return pd.DataFrame({"cell": cell, "seed": range(len(diffs)), "uniform_after": 0.5,
                         "oracle_after": 0.5 + np.asarray(diffs), "uniform_gain": gains})


def test_pilot_holm_and_pick(study):
    a, b, c = (x.name for x in study.cells()[:3])
    pairs = pd.concat([_pairs(a, [0.03, 0.04, 0.05, 0.035], [0.05, 0.06, 0.04, 0.05]),   # clear gain
                       _pairs(b, [0.06, -0.05, 0.08, -0.04], [0.05, 0.06, 0.04, 0.05]),   # noisy
                       _pairs(c, [0.05, 0.06, 0.07, 0.06], [0.01, -0.02, 0.0, -0.01])])   # baseline flat
    table, pick = pc.pilot_table(pairs, study, 300)
    t = table.set_index("cell")
    assert t.loc[a, "passed"] and not t.loc[b, "passed"]
    assert not t.loc[c, "passed"]  # the largest difference, but a baseline that does not learn is no control
    assert pick == a
    assert (t["p_holm"] >= t["p_one_sided"]).all()


def test_confirm_seeds_follow_the_pilot_spread(study):
    assert pc.confirm_seeds(0.001, study) == pc.confirm_seeds(0.010, study)  # the floor
    n1, n15 = pc.confirm_seeds(0.010, study), pc.confirm_seeds(0.015, study)
    assert 8 <= n1 < n15 <= 20
    assert pc.confirm_seeds(0.05, study) == 20
    assert pc.confirm_seed_list(3, study) == [200, 201, 202]
    v = pc.confirm_verdict(_pairs("x", [0.02, 0.015, 0.025, 0.02, 0.018, 0.022, 0.02, 0.019],
                                  [0.05] * 7 + [0.04]), study)
    assert v["confirmed"] and v["n"] == 8


def _small_declaration(tmp_path: Path) -> Path:
    d = yaml.safe_load(pc.SPEC.read_text())
    d["profile"] = "smoke"
    d["primary"] = {"metric": "mean@2", "set": "average"}
    d["secondary"] = [{"metric": "pass@2", "set": "average"}]
    d["levers"] = {"budget": [{"mean_rollouts": 4, "lower": 2, "upper": 8}, {"mean_rollouts": 4, "lower": 2, "upper": 6}],
                   "prompts_per_step": [8], "mix": {"easy": {"add1": 200, "add2": 300, "mul1": 100}},
                   "lr": [3.0e-5]}
    d["arms"]["oracle"]["allocator.options"]["probe_rollouts"] = 4
    d["screen"].update({"checkpoints": [0, 3], "pilot_cells": 1, "eligible_min_gain": -1.0,
                        "gradvar": {"draws": 3, "reference_draws": 3, "oracle_samples": 4, "bootstrap": 100}})
    d["pilot"].update({"seeds": [100, 101]})
    path = tmp_path / "declaration.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


@pytest.mark.slow
def test_the_stage_script_screens_pilots_resumes_and_writes_its_outputs(tmp_path):
    spec = _small_declaration(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "scripts/positive_control.py", "--spec", str(spec), "--uncommitted-spec",
           "--out", str(out), "--work", str(work), "--workers", "2"]
    # stopped after one job: what finished is kept and the outputs say how far the study got
    r = subprocess.run(cmd + ["--max-jobs", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert json.loads((out / "positive_control" / "study.json").read_text())["status"] == "pilot incomplete"
    kept = sorted(p.relative_to(out) for p in out.rglob("MANIFEST.json"))
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert set(kept) <= {p.relative_to(out) for p in out.rglob("MANIFEST.json")}
    table = pd.read_csv(out / "positive_control.csv")
    assert len(table) == 2 and table["screen_noise_to_signal_ratio"].notna().all()
    assert table["piloted"].sum() == 1
    row = table[table["piloted"]].iloc[0]
    assert row["pilot_n"] == 2 and np.isfinite(row["pilot_diff"])
    assert row["oracle_probe_rollouts_per_run"] == 3 * 8 * 4  # steps × prompts × probe m: outside the budget
    status = json.loads((out / "positive_control" / "study.json").read_text())["status"]
    assert status in {"no setting passed the pilot", "confirmation incomplete", "confirmed", "not confirmed"}
    assert (out / "positive_control.png").stat().st_size > 1000
    runs = sorted(str(p.parent.relative_to(out / "positive_control" / "runs")) for p in
                  (out / "positive_control" / "runs").rglob("MANIFEST.json"))
    assert "n4-q8-easy-lr3e-05/uniform/s100" in runs and all("prompts" not in p.name for p in out.rglob("*"))
    # a record made under another declaration is refused, not mixed in
    spec.write_text(spec.read_text().replace("alpha: 0.1", "alpha: 0.2"))
    r = subprocess.run(cmd + ["--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "was made under declaration" in r.stderr


def test_the_stage_refuses_an_uncommitted_declaration_for_results(tmp_path):
    r = subprocess.run([sys.executable, "scripts/positive_control.py", "--spec", str(_small_declaration(tmp_path)),
                        "--uncommitted-spec", "--out", "results/regime", "--dry-run"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "DVC_STAGE": "x"})
    assert r.returncode == 2 and "outside results/" in r.stderr
    r = subprocess.run([sys.executable, "scripts/positive_control.py", "--spec", str(_small_declaration(tmp_path)),
                        "--out", str(tmp_path / "o"), "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not committed as it is" in r.stderr
