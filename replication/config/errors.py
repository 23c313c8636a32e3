"""The one exception of configuration handling."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value; the message names the key."""
