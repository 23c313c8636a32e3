"""Typed run configuration, one dataclass per concern, built from a profile + overrides.

A profile is a YAML file in ``replication/profiles/`` (``default``, ``quick``, ``smollm2``,
``paper-vip``, ...). ``load_profile(name, overrides)`` merges overrides (nested dicts or dotted
keys such as ``{"rollout.mean_rollouts": 4}``) and validates everything before any compute:
an unknown key, a wrong type or an out-of-range value raises ``ConfigError`` naming the key.

Where things live: the sections (``sections.py``, ``rollout_sections.py``), dataclass ↔ mapping
(``mapping.py``), profile files and overrides (``profiles.py``), the checks (``validation.py``).
Import everything from here: ``from replication.config import load_profile``.
"""

from __future__ import annotations

from replication.config.errors import ConfigError
from replication.config.mapping import from_dict, to_dict
from replication.config.profiles import (
    PROFILE_DIR,
    available_profiles,
    load_profile,
    load_yaml_file,
    profile_dict,
    yaml_problem,
)
from replication.config.rollout_sections import (
    TRAIN_MAX_NEW_TOKENS,
    RolloutConfig,
    SamplingConfig,
    VLLMSection,
)
from replication.config.sections import (
    AllocatorConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    RLConfig,
    TaskConfig,
    TrainConfig,
)
from replication.config.validation import check_name, validate

__all__ = [
    "PROFILE_DIR", "TRAIN_MAX_NEW_TOKENS", "AllocatorConfig", "ConfigError", "EvalConfig",
    "ModelConfig", "OptimConfig", "RLConfig", "RolloutConfig", "SamplingConfig", "TaskConfig",
    "TrainConfig", "VLLMSection", "available_profiles", "check_name", "from_dict", "load_profile",
    "load_yaml_file", "profile_dict", "to_dict", "validate", "yaml_problem",
]
