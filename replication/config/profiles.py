"""Profiles: YAML files in ``replication/profiles/`` (``extends:`` resolved), merged with overrides
(nested dicts or dotted keys) and validated into a ``TrainConfig``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from replication.config.errors import ConfigError
from replication.config.mapping import from_dict
from replication.config.sections import TrainConfig
from replication.config.validation import validate

PROFILE_DIR = Path(__file__).parent.parent / "profiles"


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if "." in k:
            head, rest = k.split(".", 1)
            out[head] = _merge(out.get(head, {}) or {}, {rest: v})
        elif isinstance(v, dict) and isinstance(out.get(k), dict) and k not in ("options",):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def profile_dict(name: str) -> dict:
    """The raw profile mapping, with ``extends:`` resolved."""
    path = PROFILE_DIR / f"{name}.yaml"
    if not isinstance(name, str) or not path.exists():
        raise ConfigError(f"unknown profile {name!r}; available: {available_profiles()}")
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    parent = data.pop("extends", None)
    if parent:
        data = _merge(profile_dict(parent), data)
    data["profile"] = name
    return data


def yaml_problem(err: Exception) -> str:
    """One line from a PyYAML error: what is wrong and where (line, column)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def load_yaml_file(path: str | Path) -> Any:
    """``yaml.safe_load`` of a file; a syntax error is a one-line ConfigError naming the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: YAML syntax error: {yaml_problem(e)}") from None


def load_profile(name: str, overrides: dict | None = None) -> TrainConfig:
    data = profile_dict(name)
    if overrides:
        data = _merge(data, overrides)
    cfg = from_dict(TrainConfig, data)
    validate(cfg)
    return cfg
