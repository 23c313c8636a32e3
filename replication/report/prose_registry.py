"""The registry of generated prose blocks (report/prose.py): ``block(NAME)`` registers a generator
``root -> Markdown`` under NAME in ``GENERATORS``, plus the number formats and readers the block
modules share. Block modules (prose.py's own blocks, prose_regime, prose_gdro) import this, never
prose.py, so the package has no import cycle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

PAPERS = {"vip": "VIP", "dynamo": "DynaMO", "gdro": "GDRO"}
GENERATORS: dict[str, Callable[[Path], str]] = {}


def block(name: str):
    def register(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        GENERATORS[name] = fn
        return fn
    return register


def _pts(x: float) -> str:
    v = 100 * float(x)
    return f"{v:+.1f}".replace("-", "\u2212")


def _p(p: float) -> str:
    return "1" if p >= 0.995 else f"{p:.2g}"


def _summary(root: Path, paper: str) -> dict:
    return json.loads((root / "results" / paper / "summary.json").read_text())
