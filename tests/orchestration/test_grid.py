"""The grid over the run cache: exported runs with the same key load without training, cached runs
are exported, only missing runs train; notebook overrides reach every arm; bad names fail early."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from replication.config import ConfigError
from replication.orchestration import grid, run_cache
from replication.store import write_manifest


def _fake_training(calls: list, launchers: list | None = None):
    """Stands in for the CLI subprocess: writes a finished run folder (with its manifest, as
    train/run_folder.finish_run does), records the call."""

    launchers = [] if launchers is None else launchers

    def ensure_run(profile, overrides, seed, steps, cache, name="", guard=None, digests=None, launcher=None, shape=None):
        key, record = run_cache.run_key(profile, overrides, seed, steps, shape=shape)
        resolved = record["inputs"]["config"]
        calls.append((name, seed))
        launchers.append(launcher)
        d = Path(cache) / key
        d.mkdir(parents=True, exist_ok=True)
        q = resolved["rollout"]["prompts_per_step"]
        (d / "config.json").write_text(json.dumps(resolved))
        (d / "key.json").write_text(json.dumps(record))
        ev = {"average": {"mean@2": 0.5}}
        (d / "metrics.json").write_text(json.dumps({"seed": seed, "steps": steps, "eval_before": ev,
                                                    "eval_after": ev}))
        (d / "steps.jsonl").write_text("".join(json.dumps({"step": t}) + "\n" for t in range(steps)))
        (d / "prompts.jsonl").write_text("".join(json.dumps({"step": t, "prompt_id": f"p{i}"}) + "\n"
                                                 for t in range(steps) for i in range(q)))
        write_manifest(d, kind="run", extra={"steps": steps})
        return d

    return ensure_run


def test_second_grid_loads_exports_and_only_new_runs_train(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(grid, "ensure_run", _fake_training(calls))
    arms = [grid.Arm("U", {"allocator.name": "uniform"}), grid.Arm("V", {"allocator.name": "vip"})]
    cache, out = tmp_path / "cache", tmp_path / "out"
    first = grid.run_grid("smoke", arms, [0, 1], out, steps=2, workers=1, cache=cache)
    assert sorted(calls) == [("U", 0), ("U", 1), ("V", 0), ("V", 1)]
    assert list(first["arm"]) == ["U", "U", "V", "V"]
    assert run_cache.exported_key(out / "U" / "s0") == run_cache.run_key("smoke", arms[0].overrides, 0, 2)[0]

    calls.clear()
    again = grid.run_grid("smoke", arms, [0, 1, 2], out, steps=2, workers=1, cache=cache)
    assert sorted(calls) == [("U", 2), ("V", 2)]  # seeds 0, 1 loaded from the exports
    assert len(again) == 6

    calls.clear()  # exports gone, cache kept: re-exported, nothing trains
    import shutil

    shutil.rmtree(out)
    grid.run_grid("smoke", arms, [0], out, steps=2, workers=1, cache=cache)
    assert calls == [] and (out / "V" / "s0" / "prompts.jsonl.gz").exists()

    calls.clear()  # a changed setting is a different run
    grid.run_grid("smoke", [grid.Arm("U", {"allocator.name": "uniform", "optim.lr": 1e-4})], [0], out,
                  steps=2, workers=1, cache=cache)
    assert calls == [("U", 0)]


def _params(tmp_path: Path) -> Path:
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"profile": "smoke", "workers": 1, "paper": {
        "seeds": [0, 1, 2], "main": ["A"], "steps": 2, "baseline": {"B": "A"},
        "base": {"rollout.mean_rollouts": 4},
        "arms": {"A": {"allocator.name": "uniform"}, "B": {"allocator.name": "vip"}},
        "scales": {"small": {}}}}))  # params.yaml's form: DVC lists paper.scales.${scale}
    return p


def test_select_arms_applies_notebook_overrides_seeds_and_arms(tmp_path):
    sec = grid.load_section("paper", _params(tmp_path))
    arms, seeds = grid.select_arms(sec)
    assert [a.name for a in arms] == ["A", "B"] and seeds == [0, 1, 2]
    arms, seeds = grid.select_arms(sec, {"optim.lr": 6e-5}, seeds=[1], arms=["B"])
    assert seeds == [1] and [a.name for a in arms] == ["B"]
    assert arms[0].overrides == {"rollout.mean_rollouts": 4, "allocator.name": "vip", "optim.lr": 6e-5}
    with pytest.raises(ConfigError, match="arms: unknown arm 'C'"):
        grid.select_arms(sec, arms=["C"])


def test_bad_override_fails_before_any_training(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(grid, "ensure_run", _fake_training(calls))
    with pytest.raises(ConfigError, match="optim.lrr"):
        grid.run_paper("paper", _params(tmp_path), tmp_path / "out", overrides={"optim.lrr": 1.0},
                       seeds=[0])
    assert calls == []


def test_section_run_list_selects_the_default_arms_and_a_bad_one_is_named(tmp_path):
    from replication.config import ConfigError
    from replication.orchestration.grid import select_arms
    from replication.stage_params import validate_stage

    sec = {"profile": "default", "seeds": [0, 1], "arms": {"A": {}, "B": {}, "C": {}},
           "run": ["A", "C"], "main": ["A"]}
    arms, seeds = select_arms(sec)
    assert [a.name for a in arms] == ["A", "C"] and seeds == [0, 1]
    arms, _ = select_arms(sec, arms=["B"])  # an explicit choice still reaches every arm
    assert [a.name for a in arms] == ["B"]
    arms, seeds = select_arms({**sec, "profile": "quick"})
    assert [a.name for a in arms] == ["A"] and seeds == [0]
    bad = tmp_path / "params.yaml"
    bad.write_text("profile: default\nworkers: 2\nvip:\n  seeds: [0]\n  run: [RLOO, Nope]\n"
                   "  arms:\n    RLOO: {rl.estimator: rloo}\n  scales: {small: {}}\n")
    with pytest.raises(ConfigError, match=r"vip.run: 'Nope' is not an arm"):
        validate_stage(bad, "vip")


def test_run_paper_takes_the_launcher_from_params_yaml_and_refuses_a_bad_one_first(tmp_path, monkeypatch):
    """params.yaml's ``launcher:`` mapping reaches run_grid; it places nothing (the output folder
    is the one of the same grid without it); a bad launcher or shape stops before any output."""
    grids: list = []
    monkeypatch.setattr(grid, "run_grid", lambda *a, **kw: grids.append((a, kw)))
    monkeypatch.setattr(grid, "load_paper_run", lambda *a, **kw: None)
    params = _params(tmp_path)
    data = yaml.safe_load(params.read_text())
    grid.run_paper("paper", params, tmp_path / "out", seeds=[0], arms=["A"])
    params.write_text(yaml.safe_dump({**data, "launcher": {"backend": "local", "cpus": 3, "gpus": []}}))
    grid.run_paper("paper", params, tmp_path / "out", seeds=[0], arms=["A"])
    (a0, kw0), (a1, kw1) = grids
    assert a0 == a1 and kw0["launcher"] == grid.LauncherConfig() and not kw0["shape"]  # the small scale sets no shape
    assert kw1["launcher"] == grid.LauncherConfig(cpus=3, gpus=())
    assert {k: v for k, v in kw0.items() if k != "launcher"} == {k: v for k, v in kw1.items() if k != "launcher"}
    grid.run_paper("paper", params, tmp_path / "out", seeds=[0], arms=["A"], launcher={"cpus": 1})
    assert grids[-1][1]["launcher"].cpus == 1  # an explicit launcher replaces params.yaml's
    params.write_text(yaml.safe_dump({**data, "launcher": {"backend": "local", "gpu": [0]}}))
    with pytest.raises(ConfigError, match=r"launcher: unknown key\(s\) \['gpu'\]"):
        grid.run_paper("paper", params, tmp_path / "bad", seeds=[0], arms=["A"])
    with pytest.raises(ConfigError, match=r"shape.processes=0"):
        grid.run_paper("paper", _params(tmp_path), tmp_path / "bad", seeds=[0], shape={"processes": 0})
    assert not (tmp_path / "bad").exists() and len(grids) == 3


def test_the_grid_hands_its_launcher_to_every_run(tmp_path, monkeypatch):
    calls, launchers = [], []
    monkeypatch.setattr(grid, "ensure_run", _fake_training(calls, launchers))
    arms = [grid.Arm("U", {"allocator.name": "uniform"})]
    grid.run_grid("smoke", arms, [0, 1], tmp_path / "out", steps=2, workers=None, cache=tmp_path / "c",
                  launcher={"cpus": 5, "gpus": []})
    assert len(launchers) == 2 and launchers[0] is launchers[1] and launchers[0].cpus.cores == 5
    with pytest.raises(ConfigError, match=r"needs 1 GPU\(s\)"):  # refused before any run starts
        grid.run_grid("smoke", arms, [2], tmp_path / "out", steps=2, cache=tmp_path / "c",
                      launcher={"gpus": []}, shape={"gpus_per_process": 1})
    assert len(launchers) == 2


def test_a_paper_folder_keeps_only_the_runs_of_its_grid(tmp_path, monkeypatch):
    """An arm dropped or renamed in params.yaml (RLOO+VIP-oracle -> RLOO+phat16) left its exports
    in results/<paper>/runs, where the paper's manifest sealed them beside the new ones: run_paper
    now removes every export that is not in its grid, and nothing else."""
    calls: list = []
    monkeypatch.setattr(grid, "ensure_run", _fake_training(calls))
    monkeypatch.setattr(grid, "load_paper_run", lambda *a: a[-1])  # the grid's rows; reading them is tested elsewhere
    monkeypatch.chdir(tmp_path)  # the run cache (.cache/runs, relative) of this test, not the checkout's
    params, out = _params(tmp_path), tmp_path / "out"
    grid.run_paper("paper", params, out, seeds=[0, 1])
    runs = out / "paper" / "runs"
    assert sorted(p.parent.name + "/" + p.name for p in runs.glob("*/s*")) == ["A/s0", "A/s1", "B/s0", "B/s1"]
    (runs / "B" / "notes.txt").write_text("mine")  # not an export: never touched
    (runs / "A" / "s7").mkdir()  # no manifest: not an export either
    rows = grid.run_paper("paper", params, out, seeds=[0], arms=["A"])
    assert sorted(p.parent.name + "/" + p.name for p in runs.glob("*/s*")) == ["A/s0", "A/s7"]
    assert (runs / "B" / "notes.txt").exists() and not list((runs / "B").glob(".s*.lock"))
    assert list(rows["arm"]) == ["A"] and calls == [("A", 0), ("B", 0), ("A", 1), ("B", 1)]  # nothing retrained
    (runs / "B" / "notes.txt").unlink()
    grid.run_paper("paper", params, out, seeds=[0, 1], arms=["B"])  # B again: trained anew, A's runs go
    assert sorted(p.parent.name + "/" + p.name for p in runs.glob("*/s*")) == ["A/s7", "B/s0", "B/s1"]
