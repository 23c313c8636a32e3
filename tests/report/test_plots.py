"""Every plot writes a non-empty PNG from the synthetic runs."""

from __future__ import annotations

import pytest

from replication.report import plots
from replication.report.runs import load_eval, load_prompts, load_steps

PNG_MAGIC = b"\x89PNG"


@pytest.fixture(scope="module")
def frames(results_dir):
    return load_eval(results_dir), load_steps(results_dir), load_prompts(results_dir)


def _is_png(path) -> bool:
    return path.exists() and path.stat().st_size > 1000 and path.read_bytes()[:4] == PNG_MAGIC


def test_arm_comparison_and_training_curves(frames, tmp_path):
    ev, steps, _ = frames
    plots.arm_comparison(ev, tmp_path / "arms.png")
    plots.training_curves(steps, tmp_path / "sub" / "curves.png", smooth=3)
    assert _is_png(tmp_path / "arms.png") and _is_png(tmp_path / "sub" / "curves.png")


def test_allocation_and_gdro_heatmaps(frames, tmp_path):
    _, steps, prompts = frames
    plots.allocation_curve(prompts, tmp_path / "alloc.png")
    plots.bin_share_heatmap(prompts, tmp_path / "share.png", step_window=4, arms=["gdro", "uniform"])
    fig = plots.weight_mass_heatmap(steps, tmp_path / "mass.png")
    assert len([ax for ax in fig.axes if ax.get_title()]) == 1  # only the gdro arm logs weight mass
    for name in ("alloc.png", "share.png", "mass.png"):
        assert _is_png(tmp_path / name)
