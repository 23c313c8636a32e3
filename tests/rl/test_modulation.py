"""DynaMO token modulation (docs/papers/dynamo.md, section B): exact factor values, masks,
no gradient."""

import math

import pytest
import torch

from replication.rl import (
    DynaMOConfig,
    PPOConfig,
    gradient_compensation,
    modulate_advantages,
    ppo_clip_loss,
    stabilisation_factor,
    update_stabilisation,
)
from replication.rl.modulation import entropy_change_magnitude


def test_stabilisation_factor_exact_values():
    x = torch.tensor([0.99, 1.0, 0.0, 0.9, 0.8], dtype=torch.float64)
    b = stabilisation_factor(x, 0.6, 50.0, 0.99)
    assert b[0].item() == pytest.approx(0.8, abs=1e-15)
    assert b[1].item() == pytest.approx(0.6 + 0.4 / (1 + math.exp(0.5)), abs=1e-15)
    assert b[1].item() == pytest.approx(0.751, abs=5e-4)
    assert b[2].item() == 1.0
    assert b[3].item() == pytest.approx(0.99561, abs=1e-5)
    assert b[4].item() == pytest.approx(1.0, abs=1e-4)


def test_config_defaults_and_alt_mode():
    c = DynaMOConfig()
    assert (c.alpha, c.lambda_min, c.gamma, c.tau) == (0.2, 0.6, 50.0, 0.99)
    a = DynaMOConfig.alt_mode()
    assert (a.alpha, a.lambda_min, a.gamma, a.tau) == (0.4, 0.6, 50.0, 0.9)
    with pytest.raises(ValueError):
        DynaMOConfig(lambda_min=1.5)


def _batch(seed=0, n=4, length=6):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, length, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(n, length, generator=g, dtype=torch.float64)
    ent = torch.rand(n, length, generator=g, dtype=torch.float64) * 2
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    mask = torch.ones(n, length, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    return adv, logp, old, ent, mask


def test_gradient_compensation_range_and_positive_only():
    adv, _, _, ent, mask = _batch()
    alpha = 0.2
    beta = gradient_compensation(adv, ent, mask, alpha)
    a = adv[:, None].expand_as(ent)
    pos = mask & (a > 0)
    assert torch.all(beta[~pos] == 1.0)
    assert torch.all((beta[pos] >= 1.0) & (beta[pos] <= 1.0 + alpha + 1e-12))
    h = ent[mask]
    want = 1 + alpha * (h.max() - ent) / (h.max() - h.min())
    torch.testing.assert_close(beta[pos], want[pos])
    # padded entropies never set H_min / H_max
    ent2 = ent.clone()
    ent2[~mask] = 1e6
    torch.testing.assert_close(gradient_compensation(adv, ent2, mask, alpha), beta)
    # no entropy contrast -> factor 1
    assert torch.all(gradient_compensation(adv, torch.full_like(ent, 0.3), mask, alpha) == 1.0)


def test_entropy_change_matches_a_hand_loop():
    adv, logp, old, ent, mask = _batch(1)
    ppo = PPOConfig()
    got = entropy_change_magnitude(adv, logp, old, ent, mask, ppo)
    for i in range(logp.shape[0]):
        valid = [t for t in range(logp.shape[1]) if mask[i, t]]
        pl = {t: math.exp(logp[i, t].item()) * (logp[i, t].item() + ent[i, t].item()) for t in valid}
        mean = sum(pl.values()) / len(valid)
        for t in range(logp.shape[1]):
            if t not in pl:
                assert got[i, t] == 0
                continue
            r = math.exp((logp[i, t] - old[i, t]).item())
            a = float(adv[i])
            live = (r <= 1.28) if a > 0 else (0.8 <= r <= 10.0)
            xi = (1.0 if live else 0.0) * r * a
            assert got[i, t].item() == pytest.approx(abs(-xi * (pl[t] - mean)), rel=1e-12, abs=1e-15)


def test_update_stabilisation_damps_the_largest_and_respects_mask():
    adv, logp, old, ent, mask = _batch(2)
    cfg, ppo = DynaMOConfig(), PPOConfig()
    beta = update_stabilisation(adv, logp, old, ent, mask, cfg, ppo)
    xi = entropy_change_magnitude(adv, logp, old, ent, mask, ppo)
    top = xi.argmax()
    assert beta.flatten()[top].item() == pytest.approx(0.6 + 0.4 / (1 + math.exp(0.5)), abs=1e-12)
    assert torch.all(beta[~mask] == 1.0)
    x = xi / xi.max()
    torch.testing.assert_close(beta[mask], stabilisation_factor(x, 0.6, 50.0, 0.99)[mask])
    assert torch.all((beta >= 0.6) & (beta <= 1.0))
    # values at padded positions do not matter
    logp2, ent2 = logp.clone(), ent.clone()
    logp2[~mask], ent2[~mask] = 0.0, 50.0
    torch.testing.assert_close(update_stabilisation(adv, logp2, old, ent2, mask, cfg, ppo), beta)


def test_clipped_tokens_are_not_damped():
    # A>0 with r far above 1+ε_high: 1_clip = 0, so ξ = 0 and Ξ = 0 for that token
    logp = torch.tensor([[-0.1, -0.2, -1.0]], dtype=torch.float64)
    old = logp.clone()
    old[0, 0] = logp[0, 0] - 1.0  # r = e > 1.28
    ent = torch.tensor([[0.5, 1.0, 2.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    xi = entropy_change_magnitude(torch.tensor([1.0]), logp, old, ent, mask, PPOConfig())
    assert xi[0, 0] == 0 and xi[0, 1:].gt(0).all()


def test_modulate_product_detached_and_zero_advantages_unchanged():
    adv, logp, old, ent, mask = _batch(3)
    logp = logp.clone().requires_grad_(True)
    ent = ent.clone().requires_grad_(True)
    adv_tok = adv[:, None].expand(-1, logp.shape[1]).clone().requires_grad_(True)
    cfg, ppo = DynaMOConfig(), PPOConfig()
    out, stats = modulate_advantages(adv_tok, logp, old, ent, mask, cfg, ppo)
    comp = gradient_compensation(adv_tok, ent, mask, cfg.alpha)
    stab = update_stabilisation(adv_tok, logp, old, ent, mask, cfg, ppo)
    torch.testing.assert_close(out, adv_tok.detach() * comp * stab)
    # gradient reaches the advantages only through A (factor = constant), never logp / entropy
    (g_adv, g_logp, g_ent) = torch.autograd.grad(out.sum(), (adv_tok, logp, ent), allow_unused=True)
    torch.testing.assert_close(g_adv, comp * stab)
    assert g_logp is None and g_ent is None
    assert 0 <= stats["frac_damped"] <= 1 and stats["beta_stab_min"] >= 0.6
    assert 1.0 <= stats["beta_comp_pos_mean"] <= 1.2
    # the PPO gradient with modulated advantages equals the one with those advantages as constants
    g1 = torch.autograd.grad(ppo_clip_loss(logp, old, out, mask, ppo).loss, logp)[0]
    g2 = torch.autograd.grad(ppo_clip_loss(logp, old, out.detach(), mask, ppo).loss, logp)[0]
    torch.testing.assert_close(g1, g2)

    zeros = torch.zeros(4, dtype=torch.float64)
    out0, stats0 = modulate_advantages(zeros, logp, old, ent, mask, cfg, ppo)
    assert torch.all(out0 == 0)
    assert stats0["beta_stab_mean"] == 1.0 and stats0["beta_comp_mean"] == 1.0


def test_switches_turn_factors_off():
    adv, logp, old, ent, mask = _batch(4)
    off = DynaMOConfig(enable_comp=False, enable_stab=False)
    out, _ = modulate_advantages(adv, logp, old, ent, mask, off, PPOConfig())
    torch.testing.assert_close(out, adv[:, None].expand_as(logp))
    only_comp = DynaMOConfig(enable_stab=False)
    out, _ = modulate_advantages(adv, logp, old, ent, mask, only_comp, PPOConfig())
    torch.testing.assert_close(out, adv[:, None] * gradient_compensation(adv, ent, mask, 0.2))


def test_sequence_sum_delta_h_is_the_pre_fix_codes_per_sequence_sum():
    """delta_h="sequence_sum": |Σ_seq π²Λξ| broadcast to every valid token (pre-2026-04-12 code)."""
    import torch

    from replication.rl import PPOConfig
    from replication.rl.modulation import DynaMOConfig, entropy_change_magnitude

    torch.manual_seed(0)
    lp = -torch.rand(2, 4)
    ent = torch.rand(2, 4)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([0.5, -1.0])
    cfg = PPOConfig(dual_clip=None)
    got = entropy_change_magnitude(adv, lp, lp, ent, mask, cfg, "sequence_sum")
    pi = lp.exp()
    per_tok = pi * pi * (lp + ent) * adv[:, None]  # r = 1, every token live
    want = (per_tok * mask).sum(-1).abs()
    for i in range(2):
        assert torch.allclose(got[i][mask[i]], want[i].expand(int(mask[i].sum())))
        assert torch.all(got[i][~mask[i]] == 0)
    centred = entropy_change_magnitude(adv, lp, lp, ent, mask, cfg)
    assert not torch.allclose(centred, got)
    with pytest.raises(ValueError, match="delta_h"):
        DynaMOConfig(delta_h="tokens")
