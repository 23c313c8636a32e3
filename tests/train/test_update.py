"""Policy-gradient sanity checks of one PPO update on a variable-count rollout batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replication.models import load_policy
from replication.rl import PPOConfig, group_advantages, token_logprobs_and_entropy
from replication.rollout.base import SamplingConfig
from replication.rollout.hf_engine import HFRolloutEngine
from replication.train.update import ppo_update


@pytest.fixture()
def policy(base_model_dir):
    torch.manual_seed(0)
    model, tok = load_policy(base_model_dir)
    return model, tok


def _batch(model, tok, counts, temperature=1.0):
    engine = HFRolloutEngine(model, tok, seed=0)
    prompts = ["12+34=", "7*8=", "3+4=", "55-21="]
    ids = [f"p{i}" for i in range(len(prompts))]
    answers = ["46", "56", "7", "34"]
    gen = torch.Generator().manual_seed(0)
    return engine.generate(ids, prompts, answers, np.asarray(counts), SamplingConfig(temperature, 1.0, 0, 6), generator=gen)


def _seq_logp(model, batch, temperature):
    with torch.no_grad():
        logp, _ = token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, temperature)
    m = batch.completion_mask.float()
    return (logp * m).sum(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_loss_logprobs_equal_sampling_logprobs(policy, temperature):
    """π_old recorded by the sampler = π_θ recomputed by the loss (same T, masks) before any update."""
    model, tok = policy
    batch = _batch(model, tok, [3, 1, 5, 2], temperature)
    with torch.no_grad():
        logp, _ = token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, temperature)
    m = batch.completion_mask.bool()
    assert torch.allclose(logp[m], batch.old_logprobs[m], atol=1e-5)
    assert torch.all(batch.old_logprobs[~m] == 0)
    # Post-EOS positions and prompt positions are outside the completion mask.
    assert torch.all(batch.completion_mask.sum(-1) >= 1)


def test_update_moves_logprobs_with_the_sign_of_the_advantage(policy):
    model, tok = policy
    counts = np.array([4, 2, 6, 4])
    batch = _batch(model, tok, counts)
    rng = np.random.default_rng(0)
    rewards = rng.integers(0, 2, size=batch.n_rows).astype(float)
    rewards[:2] = [1.0, 0.0]  # at least one mixed group
    adv = group_advantages(rewards, batch.group_index, "drgrpo")
    before = _seq_logp(model, batch, 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ppo_update(model, opt, None, batch, adv, PPOConfig(dual_clip=None), temperature=1.0,
               mini_batches=1, ppo_epochs=1, grad_clip=1e9, rng=np.random.default_rng(0))
    delta = (_seq_logp(model, batch, 1.0) - before).numpy()
    pos, neg = adv > 0, adv < 0
    assert pos.any() and neg.any()
    # On average over completions (a shared network couples them, so per-row signs can mix).
    assert delta[pos].mean() > 0 > delta[neg].mean()


def test_zero_advantage_rows_skipped_without_changing_the_gradient(policy):
    """Skipping zero-advantage rows in backward gives exactly the full token-mean gradient."""
    model, tok = policy
    batch = _batch(model, tok, [3, 3, 3, 3])
    adv = np.zeros(batch.n_rows)
    adv[:3] = [0.5, -0.25, -0.25]
    cfg = PPOConfig(dual_clip=None)
    logp, _ = token_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, 1.0)
    m = batch.completion_mask.float()
    full = -(torch.as_tensor(adv, dtype=torch.float32)[:, None] * torch.exp(logp - batch.old_logprobs) * m).sum() / m.sum()
    model.zero_grad()
    full.backward()
    g_full = [p.grad.clone() for p in model.parameters()]

    class Capture(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})
            self.grads = None

        def step(self, closure=None):
            self.grads = [p.grad.clone() for g in self.param_groups for p in g["params"]]

    opt = Capture(model.parameters())
    ppo_update(model, opt, None, batch, adv, cfg, temperature=1.0, mini_batches=1, ppo_epochs=1,
               grad_clip=1e9, rng=np.random.default_rng(0))
    for a, b in zip(g_full, opt.grads):
        assert torch.allclose(a, b, atol=1e-6)


def test_per_row_loss_is_the_mean_over_ppo_epochs(policy):
    """With two PPO epochs the per-row loss (the GDRO adversaries' signal) is the mean of the two
    epochs' losses, not the last epoch's."""
    import copy

    model, tok = policy
    batch = _batch(model, tok, [3, 3, 3, 3])
    adv = np.zeros(batch.n_rows)
    adv[:6] = [0.5, -0.25, -0.25, 1.0, -0.5, -0.5]
    cfg = PPOConfig(dual_clip=None)
    kw = dict(temperature=1.0, mini_batches=1, grad_clip=1e9, rng=np.random.default_rng(0))
    seq = copy.deepcopy(model)
    opt = torch.optim.SGD(seq.parameters(), lr=0.5)
    first = ppo_update(seq, opt, None, batch, adv, cfg, ppo_epochs=1, **kw).row_loss
    second = ppo_update(seq, opt, None, batch, adv, cfg, ppo_epochs=1, **kw).row_loss
    assert not np.allclose(first, second)  # the first epoch moved the policy
    both = ppo_update(model, torch.optim.SGD(model.parameters(), lr=0.5), None, batch, adv, cfg,
                      ppo_epochs=2, **kw)
    assert np.allclose(both.row_loss, (first + second) / 2, atol=1e-6)
    assert np.all(both.row_kl == 0)


def test_fused_adamw_is_the_same_update(policy):
    """``optim.fused``: torch's fused AdamW makes the same update as the default per-parameter
    loop (the committed numbers' kernel) — equal to float rounding, not bit for bit — over two
    mini-batches with weight decay and clipping."""
    import copy

    model, tok = policy
    batch = _batch(model, tok, [3, 3, 3, 3])
    adv = np.asarray(group_advantages(np.tile([1.0, 0.0, 0.0], 4), np.repeat(np.arange(4), 3), "grpo"))
    moved = {}
    for kernel in ({"foreach": False}, {"fused": True}):
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1, **kernel)
        ppo_update(m, opt, None, batch, adv, PPOConfig(dual_clip=None), temperature=1.0, mini_batches=2,
                   ppo_epochs=1, grad_clip=0.5, rng=np.random.default_rng(0))
        moved[next(iter(kernel))] = [p.detach() for p in m.parameters()]
    before = list(model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(moved["fused"], before))  # the update moved weights
    for a, b in zip(moved["foreach"], moved["fused"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fused", [False, True])
def test_optimizer_kernel_follows_the_config(small_overrides, fused):
    """``optim.fused`` picks torch's fused AdamW; unset, the trainer keeps torch's default loop."""
    from replication.config import load_profile
    from replication.train.components import build_components

    cfg = load_profile("smoke", {**small_overrides, "optim.fused": fused})
    opt = build_components(cfg).optimizer
    assert isinstance(opt, torch.optim.AdamW)
    assert bool(opt.defaults["fused"]) is fused and not opt.defaults["foreach"]
