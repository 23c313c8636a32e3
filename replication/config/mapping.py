"""Dataclass configs to and from plain mappings: unknown keys and wrong types raise a
``ConfigError`` naming the dotted key."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from replication.config.errors import ConfigError


def from_dict(cls: type, data: dict, path: str = "") -> Any:
    """Build dataclass ``cls`` from a dict, recursively; unknown keys and bad types raise."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"unknown config key {key!r}; allowed here: {sorted(fields)}")
    kwargs = {}
    for name, value in data.items():
        key = f"{path}.{name}" if path else name
        f = fields[name]
        if (dataclasses.is_dataclass(hints[name]) and isinstance(value, dict)
                and f.default_factory is not dataclasses.MISSING):
            # a partly given section keeps this field's own defaults for the rest
            # (rollout.sampling: max_new_tokens 8, where the engine's SamplingConfig says 16)
            default = f.default_factory()
            value = {**{g.name: getattr(default, g.name) for g in dataclasses.fields(default)}, **value}
        kwargs[name] = _coerce(hints[name], value, key)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # the dataclass's own checks (__post_init__)
        raise ConfigError(f"{path or cls.__name__}: {e}") from None


def _coerce(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):  # a section's default kept by a partly given parent section
            return value
        return from_dict(tp, value, key)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: bad value {value!r}")
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is tuple or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(value)
    return value


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)
