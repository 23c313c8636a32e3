"""The vLLM engine's weight sync with a fake vLLM: routes, the probe check, broken loads
(vllm_weight_sync.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from replication.rollout.vllm_weight_sync import RELOAD_METHOD, named_tensors, probe_token_ids

from .vllm_fakes import SAMPLING, FakeVLLM, TinyLM, make_engine


@pytest.mark.parametrize("in_process, route", [(True, "memory"), (False, "file")])
def test_sync_weights_reload_routes_check_and_prefix_reset(tmp_path, in_process, route):
    policy, served = TinyLM(seed=1), TinyLM(seed=2)
    llm = FakeVLLM(model=served)
    engine = make_engine(llm=llm, in_process=in_process, sync_dir=str(tmp_path))
    assert engine.weight_sync == route
    engine.sync_weights(policy)
    method, kwargs = llm.rpcs[0]
    assert method == RELOAD_METHOD
    if route == "memory":
        assert [n for n, _ in kwargs["weights"]] == ["emb", "head"]
    else:
        assert Path(kwargs["weights_path"]).parent == tmp_path
        assert (Path(kwargs["weights_path"]) / "model.safetensors").exists()
    assert torch.equal(served.emb, policy.emb)
    assert llm.prefix_resets == 1 and engine.weight_syncs == 1
    assert engine.last_sync_check is not None and engine.last_sync_check < 1e-6
    engine.close()
    assert not any(tmp_path.iterdir())  # the sync folder is removed


def test_a_stale_load_is_caught_and_the_engine_refuses_to_generate():
    policy, served = TinyLM(seed=1), TinyLM(seed=2)

    class StaleVLLM(FakeVLLM):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            weights = dict(kwargs["weights"])
            weights["head"] = self.model.head.detach().clone()  # the head keeps old values
            self.model.load_state_dict(weights)
            return [0]

    engine = make_engine(llm=StaleVLLM(model=served))
    with pytest.raises(RuntimeError, match=r"do not match the trainer's after weight sync 0"):
        engine.sync_weights(policy)
    with pytest.raises(RuntimeError, match="do not match"):
        engine.generate(["a"], ["x"], ["1"], np.array([1]), SAMPLING)


def test_a_failed_reload_marks_the_engine_broken():
    class FailingVLLM(FakeVLLM):
        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            raise AttributeError("'Parameter' object has no attribute 'weight_loader'")

    engine = make_engine(llm=FailingVLLM())
    with pytest.raises(RuntimeError, match="weight sync failed.*weight_loader"):
        engine.sync_weights(TinyLM())
    with pytest.raises(RuntimeError, match="refuses to generate"):
        engine.generate(["a"], ["x"], ["1"], np.array([1]), SAMPLING)


def test_named_tensors_unwraps_wrappers_and_drops_tied_copies():
    inner = torch.nn.Linear(2, 2)
    wrapper = torch.nn.Module()
    wrapper.module = inner  # DDP-style
    assert [n for n, _ in named_tensors(wrapper)] == ["weight", "bias"]
    tied = torch.nn.Module()
    tied.embed = torch.nn.Embedding(5, 3)
    tied.lm_head = torch.nn.Linear(3, 5, bias=False)
    tied.lm_head.weight = tied.embed.weight
    assert [n for n, _ in named_tensors(tied)] == ["embed.weight"]
    assert [n for n, _ in named_tensors([("x", torch.zeros(1))])] == ["x"]


def test_probe_is_fixed_and_in_vocabulary():
    p = probe_token_ids(22, 32)
    assert p == probe_token_ids(22, 32) and len(p) == 32 and 0 <= min(p) and max(p) < 22


def test_sleep_needs_sleep_mode():
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        make_engine().sleep()
