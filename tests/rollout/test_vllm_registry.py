"""The vLLM engine's registry entry, config keys, supported versions and the train command's
pre-flight errors (no vLLM needed)."""

from __future__ import annotations

import pytest

from replication.__main__ import main
from replication.config import ConfigError, load_profile
from replication.engines import (
    ENGINES,
    VLLM_SUPPORTED,
    EnginePlacement,
    EngineUnavailable,
    check_vllm_version,
    vllm_version_tuple,
)

from .vllm_fakes import HAVE_VLLM


def test_registry_names_and_default_engine():
    assert ENGINES.names() == ["hf", "vllm"]
    assert load_profile("default").rollout.engine == "hf"
    for paper in ("paper-vip", "paper-dynamo", "paper-gdro"):
        assert load_profile(paper).rollout.engine == "vllm"


@pytest.mark.parametrize("key, value, needle", [
    ("rollout.engine", "sglang", "unknown rollout engine 'sglang'"),
    ("rollout.vllm.request_mode", "batch", "rollout.vllm.request_mode"),
    ("rollout.vllm.logprobs_mode", "processed_logits", "rollout.vllm.logprobs_mode"),
    ("rollout.vllm.tensor_parallel_size", 0, "rollout.vllm.tensor_parallel_size"),
    ("rollout.vllm.old_logprobs", "both", "rollout.vllm.old_logprobs"),
    ("rollout.vllm.weight_sync", "nccl", "rollout.vllm.weight_sync"),
    ("rollout.vllm.process_mode", "threads", "rollout.vllm.process_mode"),
    ("rollout.vllm.bogus", 1, "rollout.vllm.bogus"),
])
def test_engine_config_errors_name_the_key(key, value, needle):
    with pytest.raises(ConfigError, match=needle):
        load_profile("default", {key: value})


def test_memory_sync_needs_an_in_process_engine():
    with pytest.raises(ConfigError, match="weight_sync"):
        load_profile("default", {"rollout.vllm.weight_sync": "memory",
                                 "rollout.vllm.process_mode": "multi-process"})


def test_version_range():
    assert vllm_version_tuple("0.32.0") == (0, 32)
    assert vllm_version_tuple("0.16.1rc1.dev5+gabc") == (0, 16)
    check_vllm_version("0.16.0")
    check_vllm_version("0.32.0")
    for old in ("0.8.5", "0.11.2", "0.15.1"):
        with pytest.raises(ValueError, match=r"not supported: this engine needs vllm >= 0.16"):
            check_vllm_version(old)
    with pytest.raises(ValueError, match="not supported"):
        check_vllm_version(f"{VLLM_SUPPORTED[1][0]}.0.0")


@pytest.mark.skipif(HAVE_VLLM, reason="vllm is installed here: the missing-vllm path cannot run")
def test_train_with_vllm_absent_exits_2_before_any_compute(tmp_path, capsys, monkeypatch):
    def no_data(cfg):  # the check must come before data (and so before the model) is built
        raise AssertionError("data was built before the engine check")

    monkeypatch.setattr("replication.train.components.build_data", no_data)
    rc = main(["train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "x"),
               "--set", "rollout.engine=vllm"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rollout.engine" in err[0]
    assert "pip install -e '.[gpu]'" in err[0] and "scripts/vllm_cpu_env.sh" in err[0]
    assert not (tmp_path / "x").exists()


def test_unsupported_installed_version_is_a_config_error(monkeypatch):
    entry = ENGINES.get("vllm")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    monkeypatch.setattr("replication.engines._installed_version", lambda d: "0.11.0")
    with pytest.raises(EngineUnavailable, match=r"vLLM 0.11.0 is not supported"):
        entry.check_available()
    from replication.train.setup import check_engine

    with pytest.raises(ConfigError, match=r"^rollout.engine: vLLM 0.11.0 is not supported"):
        check_engine(load_profile("default", {"rollout.engine": "vllm"}))


def test_placement_from_env():
    assert EnginePlacement.from_env({}) == EnginePlacement(0, 1, 0)
    p = EnginePlacement.from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (p.rank, p.world_size, p.local_rank) == (3, 4, 1)
    with pytest.raises(ValueError, match="bad placement"):
        EnginePlacement(rank=2, world_size=2)


def test_pass_sync_reaches_only_engines_that_run_passes_over_the_policy(monkeypatch):
    """FSDP's ``pass_sync`` is given to the vLLM builder (its old-log-prob recompute runs over the
    sharded policy) and never to the HF engine (it samples from its own full copy)."""
    from replication.engines import EngineEntry

    assert ENGINES.get("vllm").policy_passes and not ENGINES.get("hf").policy_passes
    got = {}

    def record(cls, cfg, model, tokenizer, add_special_tokens, placement=None, pass_sync=None):
        got.update(pass_sync=pass_sync, placement=placement)
        return "engine"

    monkeypatch.setattr(EngineEntry, "check_available", lambda self: None)
    monkeypatch.setattr("replication.rollout.vllm_engine.VLLMRolloutEngine.from_train_config",
                        classmethod(record))
    sync = max  # stands in for World.max
    cfg = load_profile("default", {"rollout.engine": "vllm"})
    assert ENGINES.get("vllm").build(cfg, None, None, True, EnginePlacement(), pass_sync=sync) == "engine"
    assert got["pass_sync"] is sync
    seen = []
    monkeypatch.setattr("replication.rollout.hf_engine.build_from_config",
                        lambda *a, **kw: seen.append(kw) or "hf")
    assert ENGINES.get("hf").build(cfg, None, None, True, EnginePlacement(), pass_sync=sync) == "hf"
    assert seen == [{}]


def _broken_vllm(root, version="0.32.0"):
    """A vLLM that is installed (a dist-info with a supported version) but fails to import, as
    a wheel built against another torch does."""
    pkg = root / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'raise ImportError("operator torchvision::nms does not exist")\n')
    info = root / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


BROKEN = ("vLLM 0.32.0 is installed but fails to import: ImportError: operator torchvision::nms "
          "does not exist")


def test_a_vllm_that_fails_to_import_is_unavailable(tmp_path, monkeypatch):
    import importlib
    import sys

    monkeypatch.syspath_prepend(str(_broken_vllm(tmp_path / "site")))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    importlib.invalidate_caches()
    with pytest.raises(EngineUnavailable) as err:
        ENGINES.get("vllm").check_available()
    assert str(err.value).startswith(BROKEN) and "\n" not in str(err.value)
    assert "pip install -e '.[gpu]'" in str(err.value)
    ENGINES.get("hf").check_available()  # nothing to import


def test_train_with_a_broken_vllm_exits_2_with_one_line_before_any_compute(tmp_path):
    """Through the CLI: one line on stderr, exit 2, and no run folder (the check runs before
    data and model are loaded)."""
    import os
    import subprocess
    import sys

    from .vllm_fakes import REPO

    site = _broken_vllm(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    proc = subprocess.run([sys.executable, "-m", "replication", "train", "--profile", "default",
                           "--seed", "0", "--out", str(tmp_path / "run"),
                           "--set", "rollout.engine=vllm"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(err) == 1 and err[0].startswith(f"error: rollout.engine: {BROKEN}"), err
    assert not (tmp_path / "run").exists()


def test_eval_with_a_broken_vllm_exits_2_before_data_is_built(tmp_path, monkeypatch, capsys):
    import importlib
    import sys

    from .vllm_fakes import TINY_MODEL

    monkeypatch.syspath_prepend(str(_broken_vllm(tmp_path / "site")))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    importlib.invalidate_caches()

    def no_data(cfg):
        raise AssertionError("data was built before the engine check")

    monkeypatch.setattr("replication.tasks.data.build_data", no_data)
    rc = main(["eval", "--profile", "default", "--checkpoint", str(TINY_MODEL),
               "--out", str(tmp_path / "ev"), "--set", "rollout.engine=vllm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: rollout.engine: {BROKEN}"), err
    assert not (tmp_path / "ev").exists()
