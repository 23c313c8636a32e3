"""--set values: the grid's json.dumps of every params.yaml arm reaches the trainer unchanged
(json.dumps(1e-6) is "1e-06", which YAML alone reads as a string inside a mapping)."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml

from replication.__main__ import _overrides
from replication.orchestration.run_cache import train_command


def _parsed(cmd: list[str]) -> dict:
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    return _overrides(argparse.Namespace(set=sets))


def test_every_params_arm_survives_the_grid_to_cli_round_trip(tmp_path):
    params = yaml.safe_load(open("params.yaml"))
    for section in ("vip", "dynamo", "gdro"):
        for arm, over in params[section]["arms"].items():
            over = {**(params[section].get("base") or {}), **(over or {})}
            cmd = train_command("default", over, 0, None, tmp_path, resume=False)
            # JSON's own normal form (mapping keys are strings, as in every run's config.json)
            assert _parsed(cmd) == json.loads(json.dumps(over)), (section, arm)


@pytest.mark.parametrize("text,value", [
    ('{"share_floor": 1e-06}', {"share_floor": 1e-06}),
    ("{bandwidth: 0.2, x: 6e-5}", {"bandwidth": 0.2, "x": 6e-05}),
    ("6e-5", 6e-05), ("vip", "vip"), ("null", None), ("[0, 1]", [0, 1]), ('"1e-3"', "1e-3"),
])
def test_set_value_parsing(text, value):
    assert _overrides(argparse.Namespace(set=[f"k={text}"]))["k"] == value
    assert json.dumps(value)  # every parsed value is plain data
