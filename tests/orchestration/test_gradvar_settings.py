"""The notebooks' gradient-variance settings come from the profile's `gradvar:` section (issue 36:
sized by the profile, not by its name), and that section never enters a run's key."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.analysis.gradient_variance import GradVarConfig
from replication.arms import gradvar_settings
from replication.config import ConfigError, load_profile


def test_default_measures_30_sets_on_the_full_batch():
    s = gradvar_settings("default")
    assert s["draws"] == s["reference_draws"] == 30 and "steps" not in s and "prompts" not in s
    gv = GradVarConfig(**s)
    assert gv.prompts is None  # the profile's Q; steps None: 0, a third and all (measurement_cache)


def test_quick_is_a_smaller_first_look_and_the_parameter_overrides():
    q = gradvar_settings("quick")
    assert q["draws"] < 30 and q["prompts"] < 64
    assert q["steps"] == (0, load_profile("quick").steps)  # the first and the last step
    GradVarConfig(**q)
    assert gradvar_settings("quick", 12)["draws"] == gradvar_settings("quick", 12)["reference_draws"] == 12
    assert gradvar_settings("default", 40)["draws"] == 40
    with pytest.raises(ConfigError, match="gradvar_draws"):
        gradvar_settings("default", 1)


def test_a_profile_file_sizes_the_section_and_bad_sizes_are_refused(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("extends: smoke\ngradvar: {draws: 3, reference_draws: 4, prompts: 2, checkpoints: [0]}\n")
    s = gradvar_settings(str(f))
    assert s == {"draws": 3, "reference_draws": 4, "prompts": 2, "oracle_samples": 64, "steps": (0,)}
    for bad in ({"gradvar.draws": 1}, {"gradvar.checkpoints": [10 ** 6]}, {"gradvar.prompts": -1},
                {"gradvar.threads": -1}):
        with pytest.raises(ConfigError, match="gradvar"):
            load_profile("smoke", bad)


def test_the_section_is_not_part_of_a_runs_key(tmp_path, monkeypatch):
    """A profile's gradvar sizes never retrain a run: the key's config leaves the section out."""
    from replication.orchestration.run_cache import run_key

    monkeypatch.chdir(tmp_path)
    keys = []
    for body in ("gradvar: {draws: 3}", "gradvar: {draws: 9, checkpoints: [0]}", "optim: {lr: 1.0e-3}"):
        Path("mine.yaml").write_text(f"extends: smoke\n{body}\n")
        key, rec = run_key("mine.yaml", {}, 0, None)
        keys.append(key)
        assert "gradvar" not in rec["inputs"]["config"]
    assert keys[0] == keys[1] != keys[2]


def test_threads_and_the_options_of_measured_methods_only():
    """A rehearsal's measurement takes both cores (its runs took two single-thread processes), and
    a notebook's options for a method the profile does not measure are dropped, not refused."""
    opts = {"vip-gp": {"bandwidth": None}}
    vip, gdro = gradvar_settings("rehearsal-vip", method_options=opts), gradvar_settings("rehearsal-gdro", method_options=opts)
    assert vip["threads"] == gdro["threads"] == 2 and load_profile("rehearsal-vip").model.threads == 1
    assert vip["method_options"] == opts and "method_options" not in gdro
    assert set(gdro["methods"]) == {"uniform", "vip-oracle", "rollout-gdro"}
    GradVarConfig(**vip), GradVarConfig(**gdro)
    assert gradvar_settings("default", method_options=opts)["method_options"] == opts  # every method measured
    assert "threads" not in gradvar_settings("default")  # 0: the profile's model.threads
    with pytest.raises(ValueError, match="threads"):
        GradVarConfig(threads=-1)


def test_the_measurement_takes_the_section_s_threads(tmp_path, monkeypatch):
    """measure_checkpoint builds its components with gradvar.threads (torch.set_num_threads)."""
    import replication.train.components as components
    from replication.analysis import checkpoint_measurement as cm

    seen = []

    def stop(cfg, *a, **k):
        seen.append(cfg.model.threads)
        raise RuntimeError("stop here")

    monkeypatch.setattr(components, "build_components", stop)
    cfg = load_profile("smoke")
    for threads, want in ((0, cfg.model.threads), (3, 3)):
        with pytest.raises(RuntimeError, match="stop here"):
            cm.measure_checkpoint(cfg, "somewhere", 0, None, GradVarConfig(steps=(0,), threads=threads))
    assert seen == [cfg.model.threads, 3]
