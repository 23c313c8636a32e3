"""PPO-clip loss, aggregation, KL estimators, and per-token log-probs/entropies of a causal LM."""

import math

import pytest
import torch

from replication.rl import (
    PPOConfig,
    aggregate,
    kl_penalty,
    ppo_clip_active,
    ppo_clip_loss,
    token_logprobs_and_entropy,
)


def _grad_wrt_logp(logp0, old, adv, mask, cfg, **kw):
    logp = logp0.clone().requires_grad_(True)
    out = ppo_clip_loss(logp, old, adv, mask, cfg, **kw)
    out.loss.backward()
    return out, logp.grad


def verl_style_token_loss(logp, old, adv, cfg):
    """The max/min form of verl's compute_policy_loss, written independently."""
    ratio = torch.exp(logp - old)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    clipped = torch.maximum(l1, l2)
    if cfg.dual_clip is None:
        return clipped
    return torch.where(adv < 0, torch.minimum(clipped, -adv * cfg.dual_clip), clipped)


def test_gradient_at_ratio_one_is_minus_advantage_over_token_count():
    torch.manual_seed(0)
    old = -torch.rand(3, 5) * 3
    adv = torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]])
    out, grad = _grad_wrt_logp(old, old, adv, mask, PPOConfig())
    n = mask.sum()
    torch.testing.assert_close(grad, -adv * mask / n)
    assert out.stats["clipfrac"] == 0.0 and out.stats["ratio_mean"] == pytest.approx(1.0)
    assert out.loss.item() == pytest.approx(float(-(adv * mask).sum() / n), rel=1e-6)


@pytest.mark.parametrize(
    "a, r, dual, live",
    [
        (1.0, 1.5, 10.0, False),  # A>0 above 1+ε_high: clipped
        (1.0, 1.2, 10.0, True),  # inside the band
        (1.0, 0.5, 10.0, True),  # A>0 below 1−ε_low: NOT clipped (PPO is pessimistic)
        (-1.0, 0.5, 10.0, False),  # A<0 below 1−ε_low: clipped
        (-1.0, 1.5, 10.0, True),  # A<0 above 1+ε_high: NOT clipped
        (-1.0, 12.0, 10.0, False),  # dual clip
        (-1.0, 12.0, None, True),  # no dual clip
    ],
)
def test_clipping_zeroes_gradient_in_the_right_regions(a, r, dual, live):
    cfg = PPOConfig(clip_low=0.2, clip_high=0.28, dual_clip=dual)
    old = torch.tensor([[-1.0]])
    logp = old + math.log(r)
    adv = torch.tensor([[a]])
    out, grad = _grad_wrt_logp(logp, old, adv, torch.ones(1, 1), cfg)
    assert bool(ppo_clip_active(torch.tensor([[r]]), adv, cfg)) is live
    if live:
        assert grad.item() == pytest.approx(-a * r, rel=1e-5)
    else:
        assert grad.item() == 0.0
    want = verl_style_token_loss(logp, old, adv, cfg)
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-6)


@pytest.mark.parametrize("dual", [10.0, 3.0, None])
def test_values_match_verl_form_and_indicator_matches_gradient(dual):
    torch.manual_seed(1)
    cfg = PPOConfig(dual_clip=dual)
    old = -torch.rand(64, 7) * 4
    logp = old + torch.randn(64, 7) * 1.2
    adv = torch.randn(64, 7) * 2
    mask = torch.ones(64, 7)
    out, grad = _grad_wrt_logp(logp, old, adv, mask, cfg)
    want = verl_style_token_loss(logp, old, adv, cfg).mean()
    assert out.loss.item() == pytest.approx(want.item(), rel=1e-5)
    active = ppo_clip_active(torch.exp(logp - old), adv, cfg)
    assert torch.equal(grad != 0, active)


def test_mini_batch_token_mean_across_micro_batches():
    torch.manual_seed(2)
    cfg = PPOConfig()
    old = -torch.rand(6, 8)
    logp = (old + 0.1 * torch.randn(6, 8)).requires_grad_(True)
    adv = torch.randn(6)
    mask = (torch.rand(6, 8) > 0.3).long()
    mask[:, 0] = 1
    full = ppo_clip_loss(logp, old, adv, mask, cfg).loss
    (g_full,) = torch.autograd.grad(full, logp)
    total = mask.sum()
    parts = [ppo_clip_loss(logp[s], old[s], adv[s], mask[s], cfg, denominator=total).loss
             for s in (slice(0, 2), slice(2, 6))]
    (g_acc,) = torch.autograd.grad(sum(parts), logp)
    torch.testing.assert_close(g_acc, g_full)
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), rel=1e-6)


def test_aggregation_modes_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0], [7.0, 7.0, 7.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert aggregate(x, m, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate(x, m, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(x, m, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(x, m, "token-mean", denominator=10).item() == pytest.approx(1.0)
    assert aggregate(x, torch.zeros_like(m), "token-mean").item() == 0.0
    with pytest.raises(ValueError):
        aggregate(x, m, "sum")


def test_row_loss_and_kl_term():
    cfg = PPOConfig(kl_coef=0.5, kl_estimator="k2")
    old = torch.zeros(2, 3)
    logp = torch.zeros(2, 3)
    ref = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = ppo_clip_loss(logp, old, adv, mask, cfg, ref_logp=ref)
    # at r = 1: token loss −A; k2 = ½ (logp − ref)²
    kl = 0.5 * ref**2
    row0 = (-1.0 + 0.5 * kl[0, 0] - 1.0 + 0.5 * kl[0, 1]) / 2
    row1 = (2.0 * 3 + 0.5 * kl[1].sum()) / 3
    torch.testing.assert_close(out.row_loss, torch.stack([row0, row1]))
    assert not out.row_loss.requires_grad
    tok = torch.tensor([[-1.0, -1.0, 0], [2.0, 2.0, 2.0]]) + 0.5 * kl
    assert out.loss.item() == pytest.approx(float((tok * mask).sum() / 5))
    assert out.stats["kl"] == pytest.approx(float((kl * mask).sum() / 5))
    with pytest.raises(ValueError):
        ppo_clip_loss(logp, old, adv, mask, cfg)  # kl_coef > 0 without ref


def test_config_validation():
    with pytest.raises(ValueError):
        PPOConfig(aggregation="mean")
    with pytest.raises(ValueError):
        PPOConfig(dual_clip=1.0)
    with pytest.raises(ValueError):
        PPOConfig(kl_estimator="k7")


# ---- KL estimators


def test_kl_estimators_nonnegative_and_k3_clamped():
    torch.manual_seed(3)
    a, b = torch.randn(1000) * 3, torch.randn(1000) * 3
    assert (kl_penalty(a, b, "k2") >= 0).all()
    assert (kl_penalty(a, b, "low_var_kl") >= 0).all()
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([30.0]), "k3").item() == 10.0
    assert kl_penalty(torch.tensor([0.0]), torch.tensor([0.0]), "k3").item() == 0.0
    with pytest.raises(ValueError):
        kl_penalty(a, b, "nope")


def test_k1_k3_unbiased_for_kl_on_a_toy():
    g = torch.Generator().manual_seed(4)
    q = torch.softmax(torch.randn(6, generator=g), 0)  # current policy
    p = torch.softmax(torch.randn(6, generator=g), 0)  # reference
    exact = float((q * (q.log() - p.log())).sum())
    a = torch.multinomial(q, 200_000, replacement=True, generator=g)
    logq, logp = q.log()[a].double(), p.log()[a].double()
    for name in ("k1", "low_var_kl"):
        est = kl_penalty(logq, logp, name)
        se = float(est.std()) / math.sqrt(len(a))
        assert abs(float(est.mean()) - exact) < 4 * se + 1e-4, name
    # k3's variance is lower than k1's when the policies are close (Schulman's point)
    p_near = torch.softmax(q.log() + 0.1 * torch.randn(6, generator=g), 0)
    logp_near = p_near.log()[a].double()
    assert kl_penalty(logq, logp_near, "k3").var() < 0.1 * kl_penalty(logq, logp_near, "k1").var()


# ---- token log-probs / entropies on a tiny random Llama (no downloads)


@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=37, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      pad_token_id=0)
    return LlamaForCausalLM(cfg).eval()


def _padded_batch():
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    completions = [[14, 15, 16], [17, 18, 19, 20, 21], [22]]
    P, T = max(map(len, prompts)), max(map(len, completions))
    ids = torch.zeros(3, P + T, dtype=torch.long)
    am = torch.zeros_like(ids)
    cm = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, P - len(p):P] = torch.tensor(p)
        ids[i, P:P + len(c)] = torch.tensor(c)
        am[i, P - len(p):P + len(c)] = 1
        cm[i, P:P + len(c)] = 1
    return ids, am, cm, prompts, completions, P


def test_logprobs_match_unpadded_per_sequence_computation(tiny_llama):
    ids, am, cm, prompts, completions, P = _padded_batch()
    temp = 0.7
    with torch.no_grad():
        logp, ent = token_logprobs_and_entropy(tiny_llama, ids, am, temp, completion_mask=cm)
        logp1, ent1 = token_logprobs_and_entropy(tiny_llama, ids, am, temp, completion_mask=cm, chunk=1)
    torch.testing.assert_close(logp1, logp)
    torch.testing.assert_close(ent1, ent)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        seq = torch.tensor([p + c])
        with torch.no_grad():
            z = tiny_llama(input_ids=seq).logits[0].float() / temp
        lsm = torch.log_softmax(z, -1)
        want_lp = torch.stack([lsm[len(p) + j - 1, tok] for j, tok in enumerate(c)])
        want_h = torch.stack([-(lsm[len(p) + j - 1].exp() * lsm[len(p) + j - 1]).sum() for j in range(len(c))])
        torch.testing.assert_close(logp[i, P:P + len(c)], want_lp, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ent[i, P:P + len(c)], want_h, atol=1e-5, rtol=1e-5)
    assert torch.all(logp[cm == 0] == 0) and torch.all(ent[cm == 0] == 0)
    assert torch.all(logp[cm == 1] < 0) and torch.all(ent[cm == 1] > 0)


def test_logprobs_default_mask_and_gradient(tiny_llama):
    ids, am, cm, prompts, _, P = _padded_batch()
    logp, ent = token_logprobs_and_entropy(tiny_llama, ids, am, 1.0)
    # default: every real token with a real predecessor (prompt tokens after the first too)
    want_mask = torch.zeros_like(am, dtype=torch.bool)
    want_mask[:, 1:] = (am[:, 1:] == 1) & (am[:, :-1] == 1)
    assert torch.equal(logp != 0, want_mask)
    assert torch.all(logp[:, 0] == 0)
    logp.sum().backward()
    assert tiny_llama.lm_head.weight.grad is not None
    tiny_llama.zero_grad()


def test_gdro_prompt_loss_is_zero_by_construction_at_ratio_one():
    """GDRO's per-prompt loss ℓ(x) = mean over the prompt's rollouts of the token-mean clipped
    surrogate (issue 10, docs/fidelity/gdro.md #11). With group-centred GRPO advantages
    Σ_i A_i = 0, so at ratio 1 every row's loss is −A_i and their mean is exactly 0, whatever
    the lengths; an all-equal group has A = 0 and loss 0 at ANY ratio. Off ratio 1 the loss is
    first order in the log-ratio drift: halving the drift halves it."""
    from replication.rl.advantages import group_advantages

    g = torch.Generator().manual_seed(0)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    rewards = torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1])  # group 1 all correct
    adv = group_advantages(rewards, groups, "grpo").float()
    lengths = torch.tensor([3, 8, 5, 1, 4, 4, 2, 7, 6, 2, 8, 3])
    mask = (torch.arange(8)[None, :] < lengths[:, None]).float()
    old = -torch.rand(12, 8, generator=g) * 3
    cfg = PPOConfig(clip_low=0.2, clip_high=0.28, dual_clip=10.0)

    def prompt_losses(logp):
        rows = ppo_clip_loss(logp, old, adv, mask, cfg).row_loss
        return torch.stack([rows[groups == k].mean() for k in range(3)])

    assert torch.allclose(prompt_losses(old.clone()), torch.zeros(3), atol=1e-7)
    drift = torch.randn(12, 8, generator=g) * 0.02
    small, half = prompt_losses(old + drift), prompt_losses(old + drift / 2)
    assert small[1] == 0.0 and half[1] == 0.0  # all-equal group: no signal at any ratio
    assert small[[0, 2]].abs().min() > 1e-4  # drift gives a (small) signal
    assert torch.allclose(half[[0, 2]], small[[0, 2]] / 2, rtol=0.05)  # first order in the drift
