"""benchmarks/bench_processes.py: interleaved rounds and within-round ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_processes.py"


def test_rounds_rotate_the_order(bench):
    ways = ["1x1", "2x1", "2x1free"]
    orders = [bench.round_order(ways, k) for k in range(3)]
    assert orders == [["1x1", "2x1", "2x1free"], ["2x1", "2x1free", "1x1"], ["2x1free", "1x1", "2x1"]]
    assert [o[0] for o in orders] == ways  # every way runs first once in len(ways) rounds
    assert bench.round_order(ways, 3) == ways


def test_ratios_are_taken_within_a_round(bench):
    rounds = [{"1x1": 1.0, "2x1": 0.7, "2x1free": 0.6}, {"1x1": 2.0, "2x1": 1.8}]
    summary = dict(bench.summarize(rounds))
    assert summary["2 x 1 / 1 x 1 (replicated)"] == pytest.approx([0.7, 0.9])
    # a ratio whose ways ran together in one round only has that round's value
    assert summary["2 x 1 no comm / 1 x 1 (the floor)"] == pytest.approx([0.6])
    assert summary["2 x 1 / 2 x 1 no comm"] == pytest.approx([0.7 / 0.6])
    assert "FSDP / replicated" not in summary  # no round ran FSDP


def test_unknown_way_is_refused_before_any_run(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--model", str(tmp_path), "--ways", "1x1,3x1"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "3x1" in p.stderr


def test_two_rounds_end_to_end(base_model_dir, tmp_path):
    """Two rounds of 1 × 1 and the no-communication pair on the session's tiny model: every round
    runs both ways and the JSON's ratios are the rounds' own."""
    out = tmp_path / "bench.json"
    p = subprocess.run([sys.executable, str(SCRIPT), "--model", base_model_dir, "--steps", "2", "--prompts", "8",
                        "--eval-prompts", "4", "--ways", "1x1,2x1free", "--repeats", "2", "--json", str(out)],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert [sorted(r) for r in res["rounds"]] == [["1x1", "2x1free"]] * 2
    floor = res["ratios"]["2 x 1 no comm / 1 x 1 (the floor)"]
    assert floor == pytest.approx([r["2x1free"] / r["1x1"] for r in res["rounds"]])
    assert all(v > 0 for v in floor)
    assert len(res["splits"]["2x1free"][0]) == 2  # both processes' phase splits
    assert "median over rounds" in p.stdout


def test_cuda_needs_one_gpu_per_process(bench, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert bench.gpus_missing("cpu", ["1x1", "2x1"]) is None
    assert bench.gpus_missing("cuda", ["1x1"]) is None
    why = bench.gpus_missing("cuda", ["1x1", "2x1free"])
    assert "need 2 GPU(s)" in why and "this machine has 1" in why
    # the no-communication pair's processes see one GPU each; CPU runs leave the variable alone
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert bench._env(1, gpu=1)["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in bench._env(1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4, 6")  # the benchmark was given GPUs 4 and 6
    assert [bench._env(1, gpu=r)["CUDA_VISIBLE_DEVICES"] for r in (0, 1)] == ["4", "6"]


def test_cuda_without_the_gpus_is_refused_before_any_run(tmp_path):
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the two GPUs the 2-process ways need")
    p = subprocess.run([sys.executable, str(SCRIPT), "--model", str(tmp_path), "--device", "cuda",
                        "--ways", "1x1,2x1"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "need 2 GPU(s)" in p.stderr
    assert "round" not in p.stdout  # refused before the first run's table
