"""The vLLM weight-sync check's tolerance in bfloat16 (docs/rehearsal.md, "Defects the rehearsals
found"): after every sync the engine compares vLLM's log-probabilities of a probe with the
trainer's and refuses to generate above ``rollout.vllm.sync_check_tolerance``. bfloat16 keeps 8
significant bits, so two correct computations of a logit of magnitude 16-32 differ by up to its
spacing, 0.125: a tolerance below that refuses right weights (the bfloat16 vLLM rehearsal stopped
at 0.0878 > 0.05, the in-code default). A partial or garbled load moves log-probabilities by nats,
so a tolerance under 1 still catches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.config import load_profile
from replication.rollout.vllm_weight_sync import DEFAULT_TOLERANCE

PROFILES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "replication" / "profiles").glob("*.yaml"))


def _bf16_vllm(name: str) -> bool:
    cfg = load_profile(name)
    return cfg.model.dtype == "bfloat16" and cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sync_check


BF16_VLLM = [name for name in PROFILES if _bf16_vllm(name)]
"""The built-in profiles that sample with vLLM in bfloat16 and check each sync (the paper ones)."""


def bf16_spacing(magnitude: float) -> float:
    """Distance between adjacent bfloat16 values at ``magnitude`` (8 significant bits)."""
    import math

    return 2.0 ** (math.floor(math.log2(magnitude)) - 7)


def test_the_spacing_is_bfloat16s():
    import torch

    for x in (1.0, 10.0, 20.0):
        t = torch.tensor(x, dtype=torch.bfloat16)
        up = torch.nextafter(t, torch.tensor(float("inf"), dtype=torch.bfloat16))
        assert float(up - t) == bf16_spacing(x)


def test_the_in_code_default_tolerates_bf16_rounding():
    # was 0.05, below the spacing: the bf16 vLLM rehearsal stopped at 0.0878 with right weights
    assert bf16_spacing(16.0) <= DEFAULT_TOLERANCE["bfloat16"] < 1.0


def test_the_paper_profiles_are_among_them():
    assert {"paper-vip", "paper-dynamo", "paper-gdro"} <= set(BF16_VLLM), BF16_VLLM


@pytest.mark.parametrize("name", BF16_VLLM)
def test_a_bf16_vllm_profile_tolerates_bf16_rounding(name):
    tol = load_profile(name).rollout.vllm.sync_check_tolerance or DEFAULT_TOLERANCE["bfloat16"]
    assert bf16_spacing(16.0) <= tol < 1.0, (name, tol)
