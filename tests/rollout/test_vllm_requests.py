"""Requests, seeds and sampling parameters for vLLM, and its outputs into an aligned batch
(vllm_requests.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from replication.rollout.base import SamplingConfig
from replication.rollout.vllm_requests import (
    SEED_STRIDE,
    assemble_batch,
    build_requests,
    collect_completions,
    logprobs_match_trainer,
    sampling_kwargs,
    step_seeds,
)

from .vllm_fakes import EOS, PAD, SAMPLING, FakeTokenizer


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
