"""The notebooks' gradient-variance settings: issue 10's 30 sets, a smaller first look under quick."""

from __future__ import annotations

import pytest

from replication.analysis.gradient_variance import GradVarConfig
from replication.config import ConfigError
from replication.arms import GRADVAR_DRAWS, gradvar_settings


def test_default_measures_30_sets_on_the_full_batch():
    s = gradvar_settings("default")
    assert s == {"draws": GRADVAR_DRAWS, "reference_draws": GRADVAR_DRAWS} and GRADVAR_DRAWS >= 30
    gv = GradVarConfig(**s)
    assert gv.prompts is None  # the profile's Q


def test_quick_is_a_smaller_first_look_and_the_parameter_overrides():
    q = gradvar_settings("quick")
    assert q["draws"] < GRADVAR_DRAWS and q["prompts"] < 64
    assert q["steps"][0] == 0 and len(q["steps"]) == 2  # the first and the last step
    GradVarConfig(**q)
    assert gradvar_settings("quick", 12)["draws"] == gradvar_settings("quick", 12)["reference_draws"] == 12
    assert gradvar_settings("default", 40)["draws"] == 40
    with pytest.raises(ConfigError, match="gradvar_draws"):
        gradvar_settings("default", 1)
