"""vLLM engine. Two layers:

- everywhere: the pure parts (engine arguments, requests, seeds, row alignment, log-prob
  placement, weight-sync dispatch, sync check, version range, config and CLI errors) against a
  fake vLLM;
- ``-m vllm`` (scripts/vllm_cpu_env.sh runs them in a venv with vllm-cpu 0.32.0): the real
  engine on CPU with the committed tiny model — aligned variable counts, seeded reproducibility,
  weight sync in both process modes checked against the trainer's teacher-forced log-probs, and a
  short ``train`` run. They skip, with the reason, where vllm is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from replication.__main__ import main
from replication.config import ConfigError, VLLMSection, load_profile
from replication.rollout.base import SamplingConfig
from replication.engines import (
    ENGINES,
    VLLM_SUPPORTED,
    EnginePlacement,
    EngineUnavailable,
    check_vllm_version,
    vllm_version_tuple,
)
from replication.rollout.vllm_engine import (
    RELOAD_METHOD,
    SEED_STRIDE,
    WORKER_EXTENSION,
    VLLMRolloutEngine,
    assemble_batch,
    build_requests,
    collect_completions,
    llm_kwargs,
    logprobs_match_trainer,
    named_tensors,
    probe_token_ids,
    resolve_weight_sync,
    runs_in_process,
    sampling_kwargs,
    step_seeds,
    teacher_forced_logprobs,
)

REPO = Path(__file__).resolve().parents[1]
TINY_MODEL = REPO / "results" / "base-model"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None
EOS, PAD = 1, 0


class FakeTokenizer:
    """Characters -> ids 3..; EOS 1, PAD 0."""

    eos_token_id = EOS
    pad_token_id = PAD

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": ([2] if add_special_tokens else []) + [3 + ord(c) % 90 for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i >= 3 or not skip_special_tokens)

    def __len__(self):
        return 93


class TinyLM(torch.nn.Module):
    """A causal LM small enough to reason about: logits = emb(ids) @ head (no context)."""

    def __init__(self, vocab=12, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.config = SimpleNamespace(vocab_size=vocab, max_position_embeddings=64)
        self.emb = torch.nn.Parameter(torch.randn(vocab, 4, generator=g))
        self.head = torch.nn.Parameter(torch.randn(4, vocab, generator=g))

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        return SimpleNamespace(logits=self.emb[input_ids] @ self.head)


class FakeVLLM:
    """Mimics ``vllm.LLM`` for token prompts: child j of an n>1 request uses seed + j (as vLLM
    does); completions start with the prompt's last token so rows can be traced back to their
    prompt; a request's outputs come back shuffled with ``index`` set. ``collective_rpc`` of
    the reload method copies the weights into ``self.model`` (a TinyLM), whose teacher-forced
    log-probs answer ``prompt_logprobs`` requests."""

    def __init__(self, model=None):
        self.calls = []
        self.rpcs = []
        self.prefix_resets = 0
        self.model = model

    def generate(self, inputs, params, use_tqdm=False):
        self.calls.append((inputs, params))
        outs = []
        for inp, p in zip(inputs, params):
            prompt = inp["prompt_token_ids"]
            if getattr(p, "prompt_logprobs", None) is not None:
                lp = teacher_forced_logprobs(self.model, prompt).tolist()
                entries = [None] + [{t: SimpleNamespace(logprob=v)} for t, v in zip(prompt[1:], lp)]
                outs.append(SimpleNamespace(prompt_logprobs=entries, outputs=[]))
                continue
            samples = []
            for j in range(p.n):
                rng = random.Random(p.seed + j)
                length = rng.randint(0, p.max_tokens)
                tokens = ([prompt[-1]] + [rng.randint(3, 60) for _ in range(length)])[: p.max_tokens]
                if rng.random() < 0.5 and len(tokens) < p.max_tokens:
                    tokens.append(EOS)
                lps = [{t: SimpleNamespace(logprob=-0.01 * (k + 1), rank=1)}
                       for k, t in enumerate(tokens)]
                samples.append(SimpleNamespace(index=j, token_ids=tokens, logprobs=lps))
            random.Random(p.seed).shuffle(samples)
            outs.append(SimpleNamespace(prompt_token_ids=prompt, outputs=samples))
        return outs

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.rpcs.append((method, dict(kwargs or {})))
        assert method == RELOAD_METHOD
        if "weights" in kwargs:
            state = dict(kwargs["weights"])
        else:
            from safetensors.torch import load_file

            state = load_file(os.path.join(kwargs["weights_path"], "model.safetensors"))
        if self.model is not None:
            self.model.load_state_dict(state)
        return [0]

    def reset_prefix_cache(self):
        self.prefix_resets += 1


def make_engine(mode="n", llm=None, in_process=True, **opts):
    options = VLLMSection(request_mode=mode, **opts)
    return VLLMRolloutEngine(llm or FakeVLLM(), FakeTokenizer(), options, in_process=in_process,
                             params_factory=lambda **kw: SimpleNamespace(**kw))


SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)


# -- registry, config, version range, CLI ------------------------------------------------------------


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
    assert "pip install 'replication[gpu]'" in err[0] and "scripts/vllm_cpu_env.sh" in err[0]
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


# -- engine arguments ------------------------------------------------------------------------------


def test_llm_kwargs_cpu_defaults():
    kw = llm_kwargs("m", VLLMSection(), dtype="float32", seed=3, placement=EnginePlacement(),
                    on_cpu=True)
    assert kw["enable_chunked_prefill"] is False  # seeded requests crash with it on CPU
    assert kw["kv_cache_memory_bytes"] == 2**30 and "gpu_memory_utilization" not in kw
    assert kw["worker_extension_cls"] == WORKER_EXTENSION
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["seed"] == 3
    assert "distributed_executor_backend" not in kw


def test_llm_kwargs_gpu_multi_rank_and_overrides():
    opts = VLLMSection(gpu_memory_utilization=0.4, max_model_len=4096,
                       engine_kwargs={"max_num_seqs": 64, "enforce_eager": True})
    kw = llm_kwargs("m", opts, dtype="bfloat16", seed=0,
                    placement=EnginePlacement(rank=1, world_size=2, local_rank=1), on_cpu=False)
    assert kw["gpu_memory_utilization"] == 0.4 and "kv_cache_memory_bytes" not in kw
    assert "enable_chunked_prefill" not in kw  # vLLM's own default on GPU
    assert kw["distributed_executor_backend"] == "external_launcher"
    assert kw["max_num_seqs"] == 64 and kw["enforce_eager"] is True and kw["max_model_len"] == 4096


def test_process_mode_and_weight_sync_resolution():
    one = EnginePlacement()
    assert runs_in_process(VLLMSection(), one, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert not runs_in_process(VLLMSection(), one, env={})
    assert runs_in_process(VLLMSection(process_mode="in-process"), one, env={})
    assert runs_in_process(VLLMSection(), EnginePlacement(0, 2, 0), env={})
    assert resolve_weight_sync(VLLMSection(), True) == "memory"
    assert resolve_weight_sync(VLLMSection(), False) == "file"
    assert resolve_weight_sync(VLLMSection(weight_sync="file"), True) == "file"
    with pytest.raises(ValueError, match="in-process"):
        resolve_weight_sync(VLLMSection(weight_sync="memory"), False)


# -- requests and sampling parameters ----------------------------------------------------------------


def test_build_requests_modes_give_the_same_seed_per_sample():
    ids = [[5, 6], [7], [8, 9, 10]]
    counts = np.array([2, 1, 3])
    by_n = build_requests(ids, counts, step_seeds(100, 3), mode="n")
    assert [(r.prompt_index, r.n, r.seed) for r in by_n] == [
        (0, 2, 100), (1, 1, 100 + SEED_STRIDE), (2, 3, 100 + 2 * SEED_STRIDE)]
    rep = build_requests(ids, counts, step_seeds(100, 3), mode="repeat")
    assert [r.prompt_index for r in rep] == [0, 0, 1, 2, 2, 2]
    expanded = [r.seed + j for r in by_n for j in range(r.n)]  # vLLM: child j -> seed + j
    assert [r.seed for r in rep] == expanded and all(r.n == 1 for r in rep)
    assert rep[3].prompt_token_ids == [8, 9, 10]


def test_build_requests_rejects_zero_and_bad_counts():
    with pytest.raises(ValueError, match=">= 1"):
        build_requests([[1], [2]], np.array([1, 0]), [0, 1])
    with pytest.raises(ValueError, match="one entry per prompt"):
        build_requests([[1], [2]], np.array([1]), [0, 1])
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        build_requests([[1]], np.array([1]), [0, 1])
    with pytest.raises(ValueError, match="request mode"):
        build_requests([[1]], np.array([1]), [0], mode="batch")


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingConfig(temperature=0.6, top_p=0.8, top_k=20, max_new_tokens=9),
                         n=4, seed=7, stop_token_ids=[1, 5])
    assert kw == {"n": 4, "seed": 7, "temperature": 0.6, "top_p": 0.8, "top_k": 20,
                  "max_tokens": 9, "logprobs": 0, "stop_token_ids": [1, 5], "detokenize": False}
    assert sampling_kwargs(SAMPLING, 1, 0, [1])["top_k"] == 0  # vLLM >= 0.16: 0 = off


def test_logprob_semantics_table():
    plain = SamplingConfig(temperature=1.0)
    hot = SamplingConfig(temperature=0.6)
    gdro = SamplingConfig(temperature=0.6, top_p=0.8, top_k=20)
    assert logprobs_match_trainer(plain, "raw_logprobs")
    assert not logprobs_match_trainer(hot, "raw_logprobs")
    assert logprobs_match_trainer(hot, "processed_logprobs")
    assert not logprobs_match_trainer(gdro, "processed_logprobs")


# -- outputs to a batch ---------------------------------------------------------------------------


def test_collect_completions_orders_by_index_and_checks_counts():
    reqs = build_requests([[4], [5]], np.array([2, 1]), [0, 9])
    outs = [SimpleNamespace(outputs=[
                SimpleNamespace(index=1, token_ids=[9], logprobs=[{9: -0.5}]),
                SimpleNamespace(index=0, token_ids=[8, EOS],
                                logprobs=[{8: SimpleNamespace(logprob=-0.1)},
                                          {EOS: SimpleNamespace(logprob=-0.2)}])]),
            SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[], logprobs=[])])]
    rows = collect_completions(outs, reqs)
    assert rows == [([8, EOS], [-0.1, -0.2]), ([9], [-0.5]), ([], [])]
    with pytest.raises(RuntimeError, match="outputs for 1 requests"):
        collect_completions(outs, reqs[:1])
    outs[1].outputs.append(outs[1].outputs[0])
    with pytest.raises(RuntimeError, match="returned 2 samples for n=1"):
        collect_completions(outs, reqs)
    bad = [SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[3], logprobs=None)])]
    with pytest.raises(RuntimeError, match="no logprobs"):
        collect_completions(bad, build_requests([[4]], np.array([1]), [0]))


def test_assemble_batch_layout_and_alignment():
    prompts = [[11, 12, 13], [21]]
    rows = [([31, EOS], [-1.0, -2.0]), ([32, 33, 34], [-3.0, -4.0, -5.0]), ([], [])]
    batch = assemble_batch(["a", "b"], ["x", "y"], np.array([2, 1]), prompts, rows, PAD, [EOS],
                           FakeTokenizer().decode)
    batch.check_alignment()
    assert batch.row_prompt_ids == ["a", "a", "b"] and batch.row_answers == ["x", "x", "y"]
    assert batch.input_ids.tolist() == [[11, 12, 13, 31, EOS, PAD],
                                        [11, 12, 13, 32, 33, 34],
                                        [PAD, PAD, 21, PAD, PAD, PAD]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1],
                                             [0, 0, 1, 0, 0, 0]]
    assert batch.completion_mask.tolist() == [[0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1],
                                              [0, 0, 0, 0, 0, 0]]
    assert batch.old_logprobs[1, 3:].tolist() == [-3.0, -4.0, -5.0]
    assert batch.old_logprobs[0].tolist() == [0, 0, 0, -1.0, -2.0, 0]
    assert batch.completions == [chr(31), chr(32) + chr(33) + chr(34), ""]  # EOS not decoded


# -- the engine with a fake vLLM -------------------------------------------------------------------


def test_generate_rows_follow_their_prompts_with_variable_counts():
    engine = make_engine(old_logprobs="engine")
    ids, texts, answers = ["p0", "p1", "p2", "p3"], ["ab", "c", "defg", "h"], ["1", "2", "3", "4"]
    counts = np.array([3, 1, 4, 2])
    batch = engine.generate(ids, texts, answers, counts, SAMPLING,
                            generator=torch.Generator().manual_seed(0))
    batch.check_alignment()
    assert batch.n_rows == 10
    assert batch.row_prompt_ids == ["p0"] * 3 + ["p1"] + ["p2"] * 4 + ["p3"] * 2
    assert batch.row_answers == ["1"] * 3 + ["2"] + ["3"] * 4 + ["4"] * 2
    width = max(len(FakeTokenizer()(t)["input_ids"]) for t in texts)  # prompt columns
    last_prompt_token = torch.tensor([FakeTokenizer()(texts[i])["input_ids"][-1]
                                      for i in np.repeat(np.arange(4), counts)])
    assert torch.equal(batch.input_ids[:, width], last_prompt_token)  # each row from its prompt
    assert (batch.old_logprobs[batch.completion_mask == 0] == 0).all()
    assert (batch.old_logprobs[batch.completion_mask == 1] < 0).all()
    call_inputs, call_params = engine.llm.calls[0]
    assert [c.n for c in call_params] == [3, 1, 4, 2]  # n mode: one request per prompt
    assert all(c.stop_token_ids == [EOS] and c.logprobs == 0 for c in call_params)
    assert set(engine.timings) == {"generate_seconds", "old_logprob_seconds"}


def test_n_and_repeat_modes_give_identical_batches():
    args = (["a", "b", "c"], ["xy", "z", "uvw"], ["1", "2", "3"], np.array([2, 3, 1]), SAMPLING)
    b_n = make_engine("n").generate(*args, generator=torch.Generator().manual_seed(5))
    repeat_engine = make_engine("repeat")
    b_r = repeat_engine.generate(*args, generator=torch.Generator().manual_seed(5))
    assert len(repeat_engine.llm.calls[0][0]) == 6  # one request per row
    for name in ("input_ids", "attention_mask", "completion_mask", "old_logprobs"):
        assert torch.equal(getattr(b_n, name), getattr(b_r, name)), name
    assert b_n.completions == b_r.completions


def test_seeding_follows_the_generator():
    args = (["a", "b"], ["xy", "z"], ["1", "2"], np.array([4, 4]), SAMPLING)
    b1 = make_engine().generate(*args, generator=torch.Generator().manual_seed(1))
    b2 = make_engine().generate(*args, generator=torch.Generator().manual_seed(1))
    b3 = make_engine().generate(*args, generator=torch.Generator().manual_seed(2))
    assert torch.equal(b1.input_ids, b2.input_ids)
    assert b1.completions != b3.completions
    engine = make_engine()  # no generator: the engine's own stream advances per call
    first = engine.generate(*args)
    assert engine.generate(*args).completions != first.completions


def test_per_prompt_seeds_make_a_group_independent_of_the_rest_of_the_call():
    seeds = np.array([1000, 2000, 3000])
    whole = make_engine().generate(["a", "b", "c"], ["xy", "z", "uvw"], ["1", "2", "3"],
                                   np.array([2, 3, 1]), SAMPLING, seeds=seeds)
    part = make_engine("repeat").generate(["b"], ["z"], ["2"], np.array([3]), SAMPLING,
                                          seeds=seeds[1:2])
    assert part.completions == whole.completions[2:5]
    assert torch.equal(part.old_logprobs[:, -3:], whole.old_logprobs[2:5, -3:])


def test_recompute_replaces_engine_logprobs_with_the_trainers():
    policy = TinyLM(vocab=93)
    engine = make_engine(old_logprobs="recompute")
    engine.policy = policy
    sampling = SamplingConfig(temperature=0.7, max_new_tokens=5)
    batch = engine.generate(["a", "b"], ["xy", "z"], ["1", "2"], np.array([2, 3]), sampling,
                            generator=torch.Generator().manual_seed(0))
    from replication.rl import token_logprobs_and_entropy

    expect, _ = token_logprobs_and_entropy(policy, batch.input_ids, batch.attention_mask, 0.7,
                                           completion_mask=batch.completion_mask)
    assert torch.allclose(batch.old_logprobs, expect.detach(), atol=1e-6)
    assert not torch.allclose(batch.old_logprobs[batch.completion_mask == 1],
                              torch.tensor(-0.01))  # not the fake engine's values


def test_prompts_are_left_truncated_and_special_tokens_follow_the_formatter():
    engine = make_engine(max_prompt_tokens=2)
    assert engine.encode(["abcdef"]) == [FakeTokenizer()("ef")["input_ids"]]
    engine.add_special_tokens = True
    assert engine.encode(["a"])[0][0] == 2
    with pytest.raises(ValueError, match="zero tokens"):
        make_engine().encode([""])


def test_generate_checks_lengths():
    with pytest.raises(ValueError, match="2 ids, 1 prompts"):
        make_engine().generate(["a", "b"], ["x"], ["1", "2"], np.array([1, 1]), SAMPLING)


# -- weight sync ----------------------------------------------------------------------------------


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


# -- real vLLM (CPU): bash scripts/vllm_cpu_env.sh ------------------------------------------------

VLLM_SKIP = "needs vllm (bash scripts/vllm_cpu_env.sh builds a venv with vllm-cpu and runs these)"

# vLLM-CPU fp32 vs the trainer's fp32 forward: measured max |Δ log p| ~1e-5 on the tiny model.
LOGPROB_ATOL = 1e-3

REAL_SCRIPT = r'''
import json, sys
import numpy as np, torch
from replication.config import VLLMSection
from replication.models import load_policy
from replication.rollout.base import SamplingConfig
from replication.rollout.vllm_engine import VLLMRolloutEngine
from replication.rl import token_logprobs_and_entropy

if __name__ == "__main__":
    model_dir, mode = sys.argv[1], sys.argv[2]
    policy, tok = load_policy(model_dir, device="cpu", dtype="float32")
    opts = VLLMSection(process_mode=mode, old_logprobs="engine", kv_cache_gib=0.25)
    engine = VLLMRolloutEngine.start(model_dir, tok, opts, dtype="float32", seed=0,
                                     add_special_tokens=True)
    out = {"weight_sync": engine.weight_sync}
    prompts, ids, answers = ["12+7=", "3*4=", "40-13="], ["a", "b", "c"], ["19", "12", "27"]
    s1 = SamplingConfig(temperature=1.0, max_new_tokens=6)

    def batch(seed, s=s1, engine=engine):
        return engine.generate(ids, prompts, answers, np.array([1, 3, 5]), s,
                               generator=torch.Generator().manual_seed(seed))

    b1, b2, b3 = batch(0), batch(0), batch(1)
    out["rows"] = b1.row_prompt_ids
    out["group_index"] = b1.group_index.tolist()
    out["same_seed_same"] = torch.equal(b1.input_ids, b2.input_ids) and b1.completions == b2.completions
    out["other_seed_differs"] = b1.completions != b3.completions
    # rows start from their own prompt's tokens (left-padded)
    enc = engine.encode(prompts)
    width = max(len(e) for e in enc)
    out["prompts_aligned"] = all(b1.input_ids[r, width - len(enc[q]):width].tolist() == enc[q]
                                 for r, q in enumerate(b1.group_index))
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
    engine.sync_weights(policy)
    out["sync_check"] = engine.last_sync_check
    for temp in (1.0, 0.7):
        s = SamplingConfig(temperature=temp, max_new_tokens=6)
        b = batch(2, s)
        with torch.no_grad():
            lp, _ = token_logprobs_and_entropy(policy, b.input_ids, b.attention_mask, temp,
                                               completion_mask=b.completion_mask)
        m = b.completion_mask.bool()
        out[f"max_diff_T{temp}"] = float((lp[m] - b.old_logprobs[m]).abs().max())
        out[f"tokens_T{temp}"] = int(m.sum())
    engine.close()
    print("RESULT " + json.dumps(out))
'''


def _run_real(tmp_path: Path, mode: str) -> dict:
    script = tmp_path / "real_vllm.py"
    script.write_text(REAL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(script), str(TINY_MODEL), mode], env=env,
                          capture_output=True, text=True, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[len("RESULT "):])


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_SKIP)
@pytest.mark.parametrize("mode, route", [("in-process", "memory"), ("multi-process", "file")])
def test_real_vllm_generate_and_sync(tmp_path, mode, route):
    r = _run_real(tmp_path, mode)
    assert r["weight_sync"] == route
    assert r["rows"] == ["a"] + ["b"] * 3 + ["c"] * 5 and r["group_index"] == [0, 1, 1, 1, 2, 2, 2, 2, 2]
    assert r["prompts_aligned"] and r["same_seed_same"] and r["other_seed_differs"]
    assert r["sync_check"] < LOGPROB_ATOL
    for temp in ("1.0", "0.7"):  # vLLM's processed log-probs = the perturbed trainer's log softmax(z/T)
        assert r[f"tokens_T{temp}"] > 0
        assert r[f"max_diff_T{temp}"] < LOGPROB_ATOL, r


@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason=VLLM_SKIP)
def test_real_vllm_train_five_steps(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cmd = [sys.executable, "-m", "replication", "train", "--profile", "default", "--seed", "0",
           "--max-steps", "5", "--out", str(out), "--no-progress", "--model", str(TINY_MODEL),
           "--set", "rollout.engine=vllm", "--set", "rollout.vllm.kv_cache_gib=0.25",
           "--set", "eval.prompts_per_set=16", "--set", "eval.k=2"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2, 3, 4]
    cfg = load_profile("default")
    assert all(s["rollouts"] == cfg.budget for s in steps)
    assert all(s["generate_seconds"] > 0 and s["sync_seconds"] > 0 for s in steps)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 5 and 0 <= metrics["eval_after"]["average"]["pass@1"] <= 1
