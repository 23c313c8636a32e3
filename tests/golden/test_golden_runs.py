"""Golden runs (issue 19, point 3): every arm of params.yaml trains its short smoke run again and
must log the numbers kept in tests/golden/<paper>/<arm>/ (floats within 1e-6 relative, 1e-9
absolute near 0; integers and strings exactly; new fields allowed, missing ones fail).

A deliberate change of behaviour regenerates the files: ``python scripts/golden_runs.py --update``
(the diff then shows every number that moved)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("golden_runs", ROOT / "scripts" / "golden_runs.py")
golden_runs = sys.modules["golden_runs"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(golden_runs)

ARMS = golden_runs.golden_arms()
ENV_DIFF = golden_runs.environment_differences()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path | str:
    """The VIP encoder exported once for the module, or why it cannot be (the `embeddings` extra)."""
    try:
        return golden_runs.export_encoder(tmp_path_factory.mktemp("golden-enc") / "encoder")
    except RuntimeError as e:
        return f"VIP encoder not exported: {e}"


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden-runs")


@pytest.mark.parametrize("arm", ARMS, ids=[a.id for a in ARMS])
def test_arm_logs_its_golden_numbers(arm, encoder, work):
    if arm.needs_encoder and isinstance(encoder, str):
        pytest.skip(encoder)
    if ENV_DIFF:  # other kernels round differently and RL amplifies it (docs/reproducibility.md)
        pytest.skip("golden files made in another environment: " + "; ".join(ENV_DIFF)
                    + " (regenerate from main's code here: python scripts/golden_runs.py --update)")
    now = golden_runs.run_arm(arm, encoder if isinstance(encoder, Path) else None, work)
    diffs = golden_runs.compare_arm(arm, now)
    assert not diffs, (f"{arm.id}: {len(diffs)} logged values moved from {arm.dir.relative_to(ROOT)} "
                       f"(deliberate? python scripts/golden_runs.py --update):\n" + "\n".join(diffs[:30]))


def test_every_paper_arm_has_a_golden_run():
    from replication.orchestration.grid import load_section

    params = ROOT / "params.yaml"
    assert len(ARMS) == sum(len(load_section(p, params)["arms"]) for p in golden_runs.PAPERS) == 21
    assert len({a.dir for a in ARMS}) == len(ARMS)  # no two arms share a folder
    for arm in ARMS:
        assert all((arm.dir / n).exists() for n in golden_runs.FILES), f"{arm.id}: golden files missing"


@pytest.mark.parametrize("arm", ARMS, ids=[a.id for a in ARMS])
def test_golden_run_revisits_prompts_across_epochs(arm):
    """Long enough for what only shows on a second visit: the allocators' predictions from past
    visits and DynaMO's end-of-epoch refresh (16 prompts, 8 a step, 6 steps = 3 epochs)."""
    prompts = golden_runs.read_golden(arm)["prompts.json"]
    cov = golden_runs.coverage(prompts)
    assert cov == {"distinct": golden_runs.POOL, "revisits": 32, "epochs": 3}, cov
    steps = golden_runs.read_golden(arm)["steps.json"]
    assert [r["step"] for r in steps] == list(range(golden_runs.STEPS))
    for r in steps:  # no timing field kept: they differ between machines
        assert not any(k.endswith("_seconds") for k in r), r


def test_comparison_tolerance_and_fields():
    g = {"a": 1.0, "n": 3, "s": "x", "near0": 0.0, "rows": [{"step": 0, "v": 2.0}], "gone": None}
    now = {"a": 1.0 + 5e-7, "n": 3, "s": "x", "near0": 5e-10, "rows": [{"step": 0, "v": 2.0}], "gone": None,
           "new": 7}
    assert golden_runs.compare(g, now, "f") == []  # within 1e-6 relative / 1e-9 absolute; new field allowed
    moved = {**now, "a": 1.0 + 2e-6, "n": 4, "near0": 2e-9, "rows": [{"step": 0, "v": 2.1}]}
    del moved["gone"]
    out = golden_runs.compare(g, moved, "f")
    assert [line.split(":")[0] for line in out] == ["f.a", "f.n", "f.near0", "f.rows step 0.v", "f.gone"], out
    assert golden_runs.compare({"n": 3}, {"n": 3.0}, "f") != []  # an integer stays an integer
    assert golden_runs.compare({"x": float("nan")}, {"x": float("nan")}, "f") == []
