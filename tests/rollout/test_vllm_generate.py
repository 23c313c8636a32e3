"""The vLLM engine's generate with a fake vLLM: aligned rows, seeds, old log-probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replication.rollout.base import SamplingConfig

from .vllm_fakes import EOS, SAMPLING, FakeTokenizer, TinyLM, make_engine


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


def test_pass_sync_pads_the_recompute_to_the_ranks_largest_pass_count():
    """Under FSDP every rank runs as many forward passes over the sharded policy as the rank with
    the most rows: ``pass_sync`` (World.max) says how many; the extra ones are dropped."""
    calls = []

    class CountingLM(TinyLM):
        def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
            calls.append(input_ids.shape[0])
            return super().forward(input_ids, attention_mask, position_ids, **kw)

    engine = make_engine(old_logprobs="recompute")
    engine.policy = CountingLM(vocab=93)
    args = (["a", "b"], ["xy", "z"], ["1", "2"], np.array([2, 3]), SAMPLING)
    plain = engine.generate(*args, generator=torch.Generator().manual_seed(0))
    n_plain = len(calls)
    engine.pass_sync = lambda passes: passes + 2  # another rank needs two more passes
    calls.clear()
    padded = engine.generate(*args, generator=torch.Generator().manual_seed(0))
    assert len(calls) == n_plain + 2 and calls[-2:] == [1, 1]
    assert torch.equal(plain.old_logprobs, padded.old_logprobs)
