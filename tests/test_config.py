"""Config conventions: every bad value is a ConfigError naming its key; names are checked against
the registries (so a new method is one registered class plus its config); merged sampling config
keeps both defaults; dead keys are gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from replication.__main__ import build_parser
from replication.config import ConfigError, SamplingConfig, TrainConfig, from_dict, load_profile
from replication.rl.modulation import MODULATIONS


def test_sampling_defaults_stay_what_they_were():
    assert SamplingConfig().max_new_tokens == 16  # what an engine call gets without a value
    assert TrainConfig().rollout.sampling.max_new_tokens == 8  # what a run gets
    partly = from_dict(TrainConfig, {"rollout": {"sampling": {"temperature": 0.5}}})
    assert partly.rollout.sampling == SamplingConfig(temperature=0.5, max_new_tokens=8)
    assert load_profile("default", {"rollout.sampling.top_k": 3}).rollout.sampling.max_new_tokens == \
        load_profile("default").rollout.sampling.max_new_tokens


@pytest.mark.parametrize("overrides, key", [
    ({"eval_every": 5}, "eval_every"),                                  # removed: it did nothing
    ({"rl.kl_estimator": "k7"}, "rl.kl_estimator"),
    ({"rl.estimator": "ppo"}, "rl.estimator"),
    ({"rl.modulation": "entropy"}, "rl.modulation"),
    ({"rl.prompt_weights": "dro"}, "rl.prompt_weights"),
    ({"allocator.name": "vipp"}, "allocator.name"),
    ({"task.options.formatter": "markdown"}, "task.options.formatter"),
    ({"allocator.options": {"bogus": 1}}, "allocator.options.bogus"),
    ({"rl.modulation": "dynamo", "rl.modulation_options": {"alpha": -1.0}}, "rl.modulation_options"),
    ({"rl.modulation": "dynamo", "rl.modulation_options": {"alfa": 1.0}}, "rl.modulation_options.alfa"),
    ({"rl.prompt_weights": "gdro", "rl.prompt_weights_options": {"eta": 0.0}}, "rl.prompt_weights_options"),
    ({"task.options": {"heldout_size": 0}}, None),  # checked when the data is built (see below)
])
def test_bad_values_name_their_key(overrides, key):
    if key is None:
        from replication.tasks.data import build_data

        with pytest.raises(ConfigError, match="task.options"):
            build_data(load_profile("default", overrides))
        return
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_profile("default", overrides)


def test_kl_estimator_is_a_config_key():
    assert load_profile("default").rl.kl_estimator == "low_var_kl"
    assert load_profile("default", {"rl.kl_estimator": "k2"}).rl.kl_estimator == "k2"


def test_a_new_modulation_is_one_registered_config(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class ToyModulation:
        strength: float = 1.0
        """How much."""

        def __post_init__(self):
            if self.strength < 0:
                raise ValueError("strength must be >= 0")

    monkeypatch.setitem(MODULATIONS._items, "toy", ToyModulation)
    cfg = load_profile("default", {"rl.modulation": "toy", "rl.modulation_options": {"strength": 2}})
    assert cfg.rl.modulation == "toy"
    with pytest.raises(ConfigError, match="rl.modulation_options: strength must be >= 0"):
        load_profile("default", {"rl.modulation": "toy", "rl.modulation_options": {"strength": -1}})
    args = build_parser().parse_args(["train", "--seed", "0", "--out", "x", "--modulation", "toy"])
    assert args.modulation == "toy"


def test_cli_choices_come_from_the_registries():
    from replication.rl.advantages import ADVANTAGE_ESTIMATORS

    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    choices = {a.dest: a.choices for a in train._actions if a.choices}
    assert choices["estimator"] == ADVANTAGE_ESTIMATORS.names()
    assert set(choices["modulation"]) == {*MODULATIONS.names(), "none"}


@pytest.mark.parametrize("overrides, key", [
    ({"sft.stpes": 10}, "sft.stpes"),                                    # unknown key
    ({"sft.model": {"hiden": 64}}, "sft.model.hiden"),                   # unknown nested key
    ({"sft.steps": "many"}, "sft.steps"),                                # wrong type
    ({"sft.steps": 0}, "sft.steps"),                                     # out of range
    ({"sft.mix": {"add9": 1.0}}, "add9"),                                # unknown task level
    ({"sft.task_options": {"train_size": {"add1": 5}}}, "sft.task_options.train_size"),
])
def test_sft_section_is_validated_with_the_rest(overrides, key):
    """Issue 19: `sft:` keys were not checked until `python -m replication sft` ran."""
    with pytest.raises(ConfigError) as e:
        load_profile("default", overrides)
    assert key in str(e.value) and "\n" not in str(e.value)
    assert load_profile("smoke").sft["steps"] == 30  # the committed sft sections still load


def test_sft_unknown_key_is_one_line_from_validate(tmp_path, capsys):
    import yaml

    from replication.__main__ import main

    root = Path(__file__).resolve().parents[1]
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["vip"]["base"]["sft.bacth_size"] = 64
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", str(f), "--stage", "vip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sft.bacth_size" in err[0], err
