"""Shared fixtures: a small SFT base model built once per test session (CPU, seconds)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Tiny settings shared by every trainer test: small pools, 8 prompts x 4 rollouts, 2 eval sets.
SMALL_TASKS = {
    "train_sizes": {"add1": 200, "add2": 300, "mul1": 100},
    "heldout_size": 16,
    "heldout_levels": ["add2", "mul1"],
}


@pytest.fixture(scope="session")
def small_overrides(base_model_dir) -> dict:
    """Config overrides for a seconds-long run on the session's base model."""
    model_dir = base_model_dir
    return {
        "model.path": model_dir,
        "task.options": dict(SMALL_TASKS),
        "rollout.prompts_per_step": 8,
        "rollout.mean_rollouts": 4,
        "rollout.lower": 2,
        "rollout.upper": 8,
        "eval.k": 2,
        "eval.prompts_per_set": 8,
        "checkpoint_every": 2,
        "steps": 4,
    }


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory) -> str:
    from replication.sft import SFTConfig, run_sft
    from replication.tasks import TaskMixSpec

    out = tmp_path_factory.mktemp("base-model")
    cfg = SFTConfig(steps=150, batch_size=64, probe_prompts=16, probe_samples=4, eval_prompts=8, eval_k=2,
                    mix={"add1": 1.0, "add2": 1.0, "mul1": 1.0}, corpus_per_level=2000)
    run_sft(cfg, out, TaskMixSpec(**SMALL_TASKS), progress=False)
    return str(out)


REQUIRED = {"vllm": "REPLICATION_REQUIRE_VLLM"}
"""Markers whose skips become failures when their variable is 1: CI sets it where it has installed
the real component (scripts/vllm_cpu_env.sh runs the `vllm` tests with REPLICATION_REQUIRE_VLLM=1),
so a broken install can never pass as "skipped". The SLURM tests do the same through
tests/slurm_helpers.py (REPLICATION_REQUIRE_SLURM)."""


def pytest_collection_modifyitems(config, items):
    """`rehearsal` tests run only when selected (`-m rehearsal`): each trains with 2 processes for
    minutes, so `.ci/run` runs them as their own sequential step after the parallel suite (inside
    xdist two of them would put 4 processes on 2 cores)."""
    if "rehearsal" in (config.getoption("markexpr", "") or ""):
        return
    keep = [i for i in items if i.get_closest_marker("rehearsal") is None]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("rehearsal")])
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    for marker, variable in REQUIRED.items():
        if item.get_closest_marker(marker) is not None and os.environ.get(variable) == "1":
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            reason = reason.removeprefix("Skipped: ")
            report.outcome = "failed"
            report.longrepr = f"{variable}=1 but this `{marker}` test skipped: {reason}"
