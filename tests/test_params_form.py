"""params.yaml is in the form DVC writes (issue 34.1): `dvc exp run -S key=value` rewrites the file
through DVC's own YAML dumper, so a file in any other form comes back with dozens of lines moved.
Here DVC's round trip is a fixed point, and setting one parameter changes one line."""

from __future__ import annotations

import difflib
import io
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_yaml = pytest.importorskip("dvc.utils.serialize._yaml", reason="DVC is not installed (the `pipeline` extra)")


def _roundtrip(text: str, edit=None) -> str:
    data = _yaml.parse_yaml_for_update(text, "params.yaml")
    if edit is not None:
        edit(data)
    out = io.StringIO()
    _yaml._dump(data, out)
    return out.getvalue()


def _changed_lines(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_dvc_round_trip_leaves_params_yaml_as_it_is():
    text = (ROOT / "params.yaml").read_text()
    assert _changed_lines(text, _roundtrip(text)) == []


@pytest.mark.parametrize("key, value", [("profile", "quick"), ("workers", 1)])
def test_setting_one_parameter_changes_one_line(key, value):
    text = (ROOT / "params.yaml").read_text()
    changed = _changed_lines(text, _roundtrip(text, lambda d: d.__setitem__(key, value)))
    assert len(changed) == 2 and changed[0].startswith(f"-{key}:") and changed[1].startswith(f"+{key}: {value}")


def test_a_nested_parameter_changes_one_line():
    text = (ROOT / "params.yaml").read_text()
    changed = _changed_lines(text, _roundtrip(text, lambda d: d["vip"]["base"].__setitem__("rollout.lower", 2)))
    assert len(changed) == 2 and "rollout.lower: 2" in changed[1]
