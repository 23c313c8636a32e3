"""The positive control's rule came first (issue 37: "a test checks that this commit precedes the
results"): replication/specs/positive_control.yaml was committed before any output of the study,
and every record and the study's state carry the hash of the declaration as it is committed now,
so a rule edited after its runs fails here instead of passing for the one declared."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = "replication/specs/positive_control.yaml"
OUTPUTS = ("results/regime/positive_control.csv", "results/regime/positive_control.png",
           "results/regime/positive_control")


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"git {' '.join(args)}: {r.stderr.strip()[:200]} (not a full clone)")
    return r.stdout.strip()


def _first_commit(path: str) -> str | None:
    out = _git("log", "--format=%H", "--diff-filter=A", "--", path).splitlines()
    return out[-1] if out else None


def test_the_declaration_is_committed_before_any_output():
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone has no history to order")
    declared = _first_commit(SPEC)
    assert declared, f"{SPEC} is not committed"
    files = [f for f in _git("ls-files", "--", *OUTPUTS).splitlines() if f]
    for f in files:
        first = _first_commit(f)
        assert first and first != declared, f"{f} was committed with or before the declaration"
        r = subprocess.run(["git", "merge-base", "--is-ancestor", declared, first], cwd=ROOT)
        assert r.returncode == 0, f"{f} first appears in {first[:10]}, which does not follow the declaration {declared[:10]}"


def test_every_output_carries_the_committed_declaration():
    blob = _git("rev-parse", f"HEAD:{SPEC}")
    assert blob == _git("hash-object", SPEC), f"{SPEC} differs from its committed version"
    root = ROOT / "results" / "regime" / "positive_control"
    manifests = sorted(root.rglob("MANIFEST.json")) if root.exists() else []
    for m in manifests:
        made = (json.loads(m.read_text()).get("extra") or {}).get("declaration")
        assert made == blob, f"{m.parent} was made under declaration {made}, not {blob}"
    state = root / "study.json"
    if (ROOT / "results/regime/positive_control.csv").exists():
        study = json.loads(state.read_text())
        assert study["declaration"] == blob
        # the table counts only what the records hold: as many screened cells as measurements kept
        kept = [m for m in manifests if m.parent.parent.name == "gradvar"]
        assert study["screened_cells"] <= len(kept), (study["screened_cells"], len(kept))  # records run ahead of the table between stage runs
