"""Bad input refused before compute (issue 18.8), configuration side: a rollout lower bound that
leaves the estimator without a baseline, more prompts per step than the train pool, duplicate
seeds. Each is one ``error:`` line (exit 2) before the model is loaded."""

from __future__ import annotations

import pytest
import yaml

from replication.__main__ import main
from replication.config import ConfigError, available_profiles, load_profile

from faults.cli_helpers import ROOT, one_line_error, run_cli, train_args, tree_digest


def _no_model_load(monkeypatch) -> None:
    """Any model load from here on fails the test: the refusal must come first."""
    import replication.train.components as components

    monkeypatch.setattr(components, "load_model", lambda cfg: pytest.fail("the model was loaded"))


# ---------------------------------------------------------------------------- rollout lower bound


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "drgrpo"])
@pytest.mark.parametrize("over", [{"rollout.lower": 1},
                                  {"rollout.lower": 1, "rollout.mean_rollouts": 1}])
def test_lower_bound_of_one_is_refused(small_overrides, tmp_path, capsys, monkeypatch, estimator, over):
    """A group of one rollout has no baseline: advantage 0, grad norm 0 (every step at mean 1)."""
    _no_model_load(monkeypatch)
    out = tmp_path / "run"
    assert main(train_args(small_overrides, out, "--estimator", estimator, overrides=over)) == 2
    one_line_error(capsys.readouterr().err, "rollout.lower", estimator, "baseline")
    assert not out.exists()


def test_every_profile_and_params_arm_keeps_a_baseline():
    for name in available_profiles():
        assert load_profile(name).rollout.lower >= 2, name
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for stage in ("vip", "dynamo", "gdro"):
        assert main(["validate", "--params", str(ROOT / "params.yaml"), "--stage", stage]) == 0
        base = params[stage].get("base") or {}
        for arm, over in params[stage]["arms"].items():
            cfg = load_profile(params.get("profile", "default"), {**base, **(over or {})})
            assert cfg.rollout.lower >= 2, (stage, arm)


# ---------------------------------------------------------------------------- pool size


def test_more_prompts_per_step_than_the_pool_is_refused_and_rerun_works(small_overrides, tmp_path,
                                                                         capsys, monkeypatch):
    """Before: a traceback after the model load and the first evaluation, and a config.json left
    behind that made a plain re-run refuse the folder."""
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        _no_model_load(m)
        assert main(train_args(small_overrides, out, overrides={"rollout.prompts_per_step": 5000})) == 2
    one_line_error(capsys.readouterr().err, "rollout.prompts_per_step=5000", "train pool of 600 prompts",
                   "task.options.train_sizes")
    assert not (out / "config.json").exists()
    assert main(train_args(small_overrides, out, "--max-steps", "1")) == 0  # the plain re-run


def test_dry_run_reports_a_step_larger_than_the_pool(capsys):
    assert main(["dry-run", "--profile", "default", "--set", "rollout.prompts_per_step=100000"]) == 2
    one_line_error(capsys.readouterr().err, "rollout.prompts_per_step=100000", "train pool")
    assert main(["dry-run", "--profile", "paper-vip", "--set", "task.options.limit=100"]) == 2
    one_line_error(capsys.readouterr().err, "prompts_per_step=256", "task.options.limit=100")
    assert main(["dry-run", "--profile", "default"]) == 0


@pytest.mark.parametrize("bad, needles", [
    ("rollout.lower=1", ["rollout.lower", "baseline"]),
    ("rollout.prompts_per_step=100000", ["rollout.prompts_per_step=100000", "train pool"]),
])
def test_refusals_through_python_m_replication_train(small_overrides, tmp_path, bad, needles):
    r = run_cli(*train_args(small_overrides, tmp_path / "run", "--set", bad))
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, *needles)
    assert not (tmp_path / "run" / "config.json").exists()


# ---------------------------------------------------------------------------- seeds


def _params_with(tmp_path, **section) -> str:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["vip"].update(section)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    return str(f)


def test_duplicate_seeds_in_params_yaml(tmp_path, capsys):
    f = _params_with(tmp_path, seeds=[0, 1, 1])
    assert main(["validate", "--params", f, "--stage", "vip"]) == 2
    one_line_error(capsys.readouterr().err, f, "vip.seeds", "duplicate seeds [1]")
    r = run_cli("validate", "--params", f, "--stage", "vip")  # what dvc repro runs first
    assert r.returncode == 2
    one_line_error(r.stderr, "vip.seeds", "duplicate")


def test_duplicate_seeds_as_a_notebook_parameter_touch_nothing(tmp_path):
    """The notebooks' ``seeds = [0, 0]`` (papermill -p / -y) reached the tables as "n = 2, ± 0.0"."""
    from replication.orchestration.grid import run_paper

    out_root = tmp_path / "results"
    (out_root / "vip" / "runs").mkdir(parents=True)
    (out_root / "vip" / "runs" / "keep.json").write_text("{}")
    before = tree_digest(out_root)
    with pytest.raises(ConfigError, match=r"seeds: duplicate seeds \[0\] in \[0, 0\]"):
        run_paper("vip", ROOT / "params.yaml", out_root, seeds=[0, 0])
    assert tree_digest(out_root) == before


def test_select_arms_refuses_duplicates_and_keeps_distinct_seeds():
    from replication.arms import select_arms

    sec = {"profile": "default", "seeds": [0, 1], "arms": {"A": {}}}
    assert select_arms(sec, seeds=[3, 1])[1] == [3, 1]
    with pytest.raises(ConfigError, match="duplicate seeds"):
        select_arms(sec, seeds=[2, 2])
