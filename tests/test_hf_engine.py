"""HF rollout engine: row alignment, seeding, EOS masking, and the policy-gradient sanity check
(sampler log-probs == a full forward pass at the same temperature)."""

import numpy as np
import pytest
import torch

from replication.models import TinyModelConfig, build_char_tokenizer, build_tiny_model
from replication.rollout import HFRolloutEngine, SamplingConfig
from replication.rollout.sampling import draw, truncate_logits

PROMPTS = ["1+2=", "42-25=", "123+456=", "9*9=", "7-8="]
ANSWERS = ["3", "17", "579", "81", "-1"]
IDS = ["a", "b", "c", "d", "e"]
COUNTS = np.array([3, 1, 5, 2, 4])


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    torch.set_num_threads(1)
    return build_tiny_model(TinyModelConfig(init_seed=1), tok).eval()


@pytest.fixture(scope="module")
def engine(model, tok):
    # A random model rarely says <eos>; making three digits "EOS" gives rows of many lengths.
    eos = [tok.eos_token_id] + tok.convert_tokens_to_ids(["3", "5", "7"])
    return HFRolloutEngine(model, tok, eos_token_ids=eos)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def run(engine, sampling=SamplingConfig(max_new_tokens=6), seed=0, counts=COUNTS):
    return engine.generate(IDS, PROMPTS, ANSWERS, counts, sampling, gen(seed))


def recompute(model, batch, temperature):
    """log π(x_t | x_<t) at temperature T from one full forward pass (positions as generate's)."""
    am = batch.attention_mask
    pos = (am.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=am, position_ids=pos).logits.float()
    logp = torch.log_softmax(logits[:, :-1] / temperature, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    out = torch.zeros_like(batch.old_logprobs)
    out[:, 1:] = logp
    return out * batch.completion_mask, logits


def test_alignment_with_variable_counts(engine, tok):
    b = run(engine)
    b.check_alignment()
    assert b.n_rows == COUNTS.sum() and b.input_ids.shape[0] == COUNTS.sum()
    assert b.group_index.tolist() == np.repeat(np.arange(5), COUNTS).tolist()
    assert b.row_prompt_ids == [i for i, c in zip(IDS, COUNTS) for _ in range(c)]
    assert b.row_answers == [a for a, c in zip(ANSWERS, COUNTS) for _ in range(c)]
    # every row carries its own prompt (left-padded: real prompt tokens end where completions start)
    for r, g in enumerate(b.group_index):
        real = b.input_ids[r][(b.attention_mask[r] == 1) & (b.completion_mask[r] == 0)]
        assert tok.decode(real, skip_special_tokens=True) == PROMPTS[g]


@pytest.mark.parametrize("bad", [[3, 0, 5, 2, 4], [3, -1, 5, 2, 4], [1, 2, 3], [1.5, 1, 1, 1, 1]])
def test_bad_counts_raise(engine, bad):
    with pytest.raises(ValueError):
        run(engine, counts=np.array(bad))


def test_seeded_determinism(engine):
    a, b, c = run(engine, seed=5), run(engine, seed=5), run(engine, seed=6)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.old_logprobs, b.old_logprobs)
    assert a.completions == b.completions and a.completions != c.completions
    # without a generator the engine's own one advances: two calls differ
    s = SamplingConfig(max_new_tokens=6)
    assert engine.generate(IDS, PROMPTS, ANSWERS, COUNTS, s).completions != engine.generate(IDS, PROMPTS, ANSWERS, COUNTS, s).completions


def test_eos_masking(engine, tok):
    b = run(engine, SamplingConfig(max_new_tokens=8), seed=2)
    eos = set(engine.eos_token_ids)
    comp = b.completion_mask.bool()
    start = int(comp.any(0).nonzero()[0])
    lengths = set()
    for r in range(b.n_rows):
        m = comp[r, start:]
        n = int(m.sum())
        lengths.add(n)
        assert m[:n].all() and not m[n:].any(), "completion mask must be one contiguous prefix"
        toks = b.input_ids[r, start:].tolist()
        stopped = [i for i, t in enumerate(toks[:n]) if t in eos]
        assert stopped in ([n - 1], []), "EOS is the last masked token and nothing follows it"
        if not stopped:
            assert n == 8
        assert all(t == tok.pad_token_id for t in toks[n:])
        assert torch.all(b.old_logprobs[r, start + n :] == 0) and torch.all(b.attention_mask[r, start + n :] == 0)
        assert torch.all(b.attention_mask[r, start : start + n] == 1)
        assert b.completions[r] == tok.decode([t for t in toks[: n - len(stopped)]], skip_special_tokens=True)
    assert len(lengths) > 2, "the fixture should produce rows of several lengths"
    assert torch.all(b.old_logprobs[~comp] == 0) and torch.all(b.old_logprobs[comp] < 0)


@pytest.mark.parametrize("temperature, top_p, top_k", [(1.0, 1.0, 0), (0.7, 1.0, 0), (1.6, 1.0, 0), (1.0, 0.8, 0), (0.9, 0.9, 4)])
def test_old_logprobs_match_full_forward(engine, model, temperature, top_p, top_k):
    """The classic policy-gradient sanity check: what the sampler reports is what the loss sees."""
    b = run(engine, SamplingConfig(temperature, top_p, top_k, max_new_tokens=7), seed=3)
    ref, _ = recompute(model, b, temperature)
    torch.testing.assert_close(b.old_logprobs, ref, atol=2e-5, rtol=1e-5)


def test_batch_tensors_support_backward(engine, model):
    b = run(engine)
    out = model(input_ids=b.input_ids, attention_mask=b.attention_mask)
    (out.logits.float().log_softmax(-1)[:, :-1].gather(-1, b.input_ids[:, 1:, None]).squeeze(-1) * b.completion_mask[:, 1:]).sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
    model.zero_grad(set_to_none=True)


def test_old_logprobs_match_rl_logprobs(engine, model):
    from replication.rl import logprobs
    b = run(engine, SamplingConfig(0.8, 1.0, 0, max_new_tokens=7), seed=4)
    with torch.no_grad():
        lp, _ = logprobs.token_logprobs_and_entropy(model, b.input_ids, b.attention_mask, 0.8, b.completion_mask)
    torch.testing.assert_close(b.old_logprobs, lp * b.completion_mask, atol=2e-5, rtol=1e-5)


def test_chunking_keeps_rows_and_logprobs(model, tok, engine):
    small = HFRolloutEngine(model, tok, eos_token_ids=engine.eos_token_ids, max_rows_per_chunk=4)
    b = small.generate(IDS, PROMPTS, ANSWERS, COUNTS, SamplingConfig(max_new_tokens=6), gen(0))
    b.check_alignment()
    ref, _ = recompute(model, b, 1.0)
    torch.testing.assert_close(b.old_logprobs, ref, atol=2e-5, rtol=1e-5)


def test_top_k_one_is_greedy_and_top_k_bounds(engine, model):
    g1 = run(engine, SamplingConfig(top_k=1, max_new_tokens=6), seed=1)
    g2 = run(engine, SamplingConfig(top_k=1, max_new_tokens=6), seed=99)
    assert torch.equal(g1.input_ids, g2.input_ids)
    for k, b in [(1, g1), (3, run(engine, SamplingConfig(top_k=3, max_new_tokens=6), seed=7))]:
        _, logits = recompute(model, b, 1.0)
        nxt = b.input_ids[:, 1:]
        rank = (logits[:, :-1] > logits[:, :-1].gather(-1, nxt[..., None])).sum(-1)  # tokens ranked above
        assert int(rank[b.completion_mask[:, 1:].bool()].max()) < k


def test_temperature_changes_diversity(engine):
    many = np.full(5, 40)
    distinct = {}
    for t in (0.05, 2.0):
        b = engine.generate(IDS, PROMPTS, ANSWERS, many, SamplingConfig(temperature=t, max_new_tokens=4), gen(0))
        distinct[t] = len(set(zip(b.group_index.tolist(), b.completions)))
    assert distinct[0.05] < distinct[2.0] / 3


def test_sampling_validation(engine):
    for bad in [SamplingConfig(temperature=0.0), SamplingConfig(top_p=0.0), SamplingConfig(top_k=-1), SamplingConfig(max_new_tokens=0)]:
        with pytest.raises(ValueError):
            run(engine, bad)


def test_sync_weights_and_mode(engine, model):
    model.train()
    run(engine)
    assert model.training  # the engine restores the trainer's mode
    model.eval()
    engine.sync_weights(model)
    assert engine.model is model


def test_truncate_and_draw():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0]])
    k2 = truncate_logits(logits, top_k=2)
    assert torch.isinf(k2[0, 2:]).all() and torch.isfinite(k2[0, :2]).all()
    # softmax = [0.644, 0.237, 0.087, 0.032]: the smallest top set holding >= top_p of the mass
    assert torch.isfinite(truncate_logits(logits, top_p=0.5)[0]).tolist() == [True, False, False, False]
    assert torch.isfinite(truncate_logits(logits, top_p=0.7)[0]).tolist() == [True, True, False, False]
    assert torch.isfinite(truncate_logits(logits, top_p=1e-9)).sum(-1).tolist() == [1, 1]
    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75]]).repeat(20_000, 1)
    toks = draw(probs, gen(0))
    assert set(toks.tolist()) == {1, 3}
    assert abs(float((toks == 3).float().mean()) - 0.75) < 0.015
