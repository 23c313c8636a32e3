"""params.yaml is in the form DVC writes (issue 34.1): `dvc exp run -S key=value` rewrites the file
through DVC's own override path (dvc.utils.hydra.apply_overrides: the file parsed with ruamel,
the overrides applied through OmegaConf, the result merged back — every list is replaced by a
plain one and dumped in block style, and a comment below a list's last item is lost), so a file
in any other form comes back with dozens of lines moved. Here that very path is a fixed point,
and setting one parameter changes one line."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_hydra = pytest.importorskip("dvc.utils.hydra", reason="DVC is not installed (the `pipeline` extra)")


def _roundtrip(text: str, override: str = "profile=default") -> str:
    """``text`` after `dvc exp run -S <override>` has rewritten it (DVC's own code path)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_text(text)
        _hydra.apply_overrides(path, [override])
        return path.read_text()


def _changed_lines(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), n=0, lineterm="")
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_dvc_round_trip_leaves_params_yaml_as_it_is():
    text = (ROOT / "params.yaml").read_text()
    assert _changed_lines(text, _roundtrip(text)) == []


@pytest.mark.parametrize("key, value", [("profile", "quick"), ("workers", 1), ("scale", "paper")])
def test_setting_one_parameter_changes_one_line(key, value):
    text = (ROOT / "params.yaml").read_text()
    changed = _changed_lines(text, _roundtrip(text, f"{key}={value}"))
    assert len(changed) == 2 and changed[0].startswith(f"-{key}:") and changed[1].startswith(f"+{key}: {value}")


def test_a_nested_parameter_changes_one_line():
    text = (ROOT / "params.yaml").read_text()
    changed = _changed_lines(text, _roundtrip(text, "vip.scales.paper.shape.processes=4"))
    assert len(changed) == 2 and "processes: 4" in changed[1]


def test_the_launcher_is_no_stage_parameter():
    """Where runs go never marks a result stale: no stage of dvc.yaml lists `launcher` (DVC then
    ignores it in `dvc status`), and params.yaml's launcher section validates."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        for p in stage.get("params") or []:
            keys = p if isinstance(p, str) else next(iter(p.values()), [])
            assert not str(keys).startswith("launcher"), f"stage {name} lists {p}"
    text = (ROOT / "params.yaml").read_text()
    assert "launcher:" in text
    changed = _changed_lines(text, _roundtrip(text, "launcher.backend=slurm"))
    assert len(changed) == 2 and "backend: slurm" in changed[1]


def test_a_bad_launcher_section_is_one_line_before_any_stage_runs(tmp_path):
    import yaml

    from replication.config import ConfigError
    from replication.stage_params import validate_stage

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["launcher"] = {"backend": "local", "cpus": 0}
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match="launcher.cpus"):
        validate_stage(bad, "vip")
    params["launcher"] = {"backnd": "local"}
    bad.write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match="unknown key"):
        validate_stage(bad, "vip")
