"""``DataError``: a dataset file or row that cannot be used (the message names the file and row).

The CLI prints it as one line and exits 2, before any model is loaded."""

from __future__ import annotations


class DataError(ValueError):
    """Malformed, empty or incomplete data; the message names the file (and row)."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A dataset path that does not exist (also a FileNotFoundError)."""
