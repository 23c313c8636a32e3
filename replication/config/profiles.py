"""Profiles: YAML files in ``replication/profiles/`` (``extends:`` resolved), merged with overrides
(nested dicts or dotted keys) and validated into a ``TrainConfig``.

A profile may also be a file of the user's (``--profile my.yaml``, ``configs/x.yml``): anything
ending in ``.yaml``/``.yml`` or naming a folder is read as a path, and the profile is named by
the file's stem (``my``), which is what names a trial's workspace folder. A stem equal to a
built-in profile's name is refused: it would pass for that profile (``default`` is the published
one)."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from replication.config.cpu_dtype import resolve_cpu_dtype
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


def is_profile_file(name: str) -> bool:
    """True when ``name`` is written as a path (a .yaml/.yml name or one with a folder in it)."""
    return isinstance(name, str) and (name.endswith((".yaml", ".yml")) or os.sep in name or "/" in name)


def profile_name(name: str) -> str:
    """The name a profile goes by (a trial's workspace folder): a built-in's name, a file's stem."""
    return Path(name).stem if is_profile_file(name) else name


def _profile_path(name: str, relative_to: Path | None = None) -> tuple[Path, str]:
    """(file, profile name) of a built-in name or a profile file."""
    if not is_profile_file(name):
        path = PROFILE_DIR / f"{name}.yaml"
        if not isinstance(name, str) or not path.exists():
            raise ConfigError(f"unknown profile {name!r}; available: {available_profiles()} "
                              f"or a YAML file (e.g. --profile my.yaml)")
        return path, name
    path = Path(name).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path  # `extends: base.yaml` inside a profile file: beside that file
    if not path.is_file():
        raise ConfigError(f"profile file {name}: no such file")
    stem = path.stem
    if stem in available_profiles():
        raise ConfigError(f"profile file {name}: its name {stem!r} is a built-in profile's; rename the "
                          f"file (a profile file is named by its stem)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", stem):
        raise ConfigError(f"profile file {name}: name {stem!r} must be letters, digits, '.', '_' or '-'")
    return path, stem


def profile_dict(name: str, _relative_to: Path | None = None) -> dict:
    """The raw profile mapping, with ``extends:`` resolved; ``name`` is a built-in profile or a
    YAML file (named by its stem)."""
    path, label = _profile_path(name, _relative_to)
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    parent = data.pop("extends", None)
    if parent:
        data = _merge(profile_dict(parent, path.parent if is_profile_file(name) else None), data)
    data["profile"] = label
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
    cfg = resolve_cpu_dtype(from_dict(TrainConfig, data))  # model.dtype_without_bf16: before any key
    validate(cfg)
    return cfg
