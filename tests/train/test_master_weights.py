"""Float32 master weights for bf16 parameters (train/master_weights.py, ``optim.master_weights``)."""

from __future__ import annotations

import copy

import pytest
import torch

from replication.train.master_weights import MASTER, MasterWeightAdamW

KERNELS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _model(dtype=torch.bfloat16, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.1)  # weights of magnitude ~0.02, as a transformer's
    return m.to(dtype)


def _grads(model, seed):
    """Deterministic gradients for ``model`` (the same for every copy of it)."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g).to(p.dtype)


def _steps(model, opt, n, sched=None):
    for i in range(n):
        _grads(model, i)
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


def test_plain_bf16_adamw_barely_moves_weights_the_copies_move_them_all():
    """At the papers' lr (1e-6) AdamW's step is below a bf16 weight's rounding step: plain AdamW
    leaves almost every weight where it was; through float32 copies every weight moves."""
    plain, master = _model(), _model()
    before = [p.detach().clone() for p in plain.parameters()]
    _steps(plain, torch.optim.AdamW(plain.parameters(), lr=1e-6), 5)
    mw = MasterWeightAdamW(master.parameters(), lr=1e-6)
    _steps(master, mw, 5)
    moved = lambda m: sum(int((p.detach() != b).sum()) for p, b in zip(m.parameters(), before))  # noqa: E731
    total = sum(b.numel() for b in before)
    assert moved(plain) < 0.05 * total
    copies_moved = sum(int((mw.state[p][MASTER] != b.float()).sum()) for p, b in zip(master.parameters(), before))
    assert copies_moved == total


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_copy_is_float32_adamw_bit_for_bit_and_the_parameter_is_it_rounded(kernel):
    """The float32 copy of each bf16 parameter follows float32 AdamW from the same start exactly,
    the scheduler's lr and weight decay included; the bf16 parameter is the copy rounded."""
    low = _model()
    ref = copy.deepcopy(low).float()
    kw = dict(lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), **KERNELS[kernel])
    opt = MasterWeightAdamW(low.parameters(), **kw)
    ref_opt = torch.optim.AdamW(ref.parameters(), **kw)
    warm = lambda i: min(1.0, (i + 1) / 3)  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warm)
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, warm)
    for i in range(4):
        _grads(low, i)
        for p, q in zip(low.parameters(), ref.parameters()):
            q.grad = p.grad.float()  # the same (bf16-valued) gradient
        opt.step()
        ref_opt.step()
        sched.step()
        ref_sched.step()
    for p, q in zip(low.parameters(), ref.parameters()):
        assert opt.state[p][MASTER].dtype == torch.float32
        assert torch.equal(opt.state[p][MASTER], q.detach())
        assert torch.equal(p.detach(), q.detach().to(torch.bfloat16))
        assert opt.state[p]["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_float32_parameters_step_exactly_as_torch_adamw(kernel):
    a, b = _model(torch.float32), _model(torch.float32)
    kw = dict(lr=1e-3, weight_decay=0.1, **KERNELS[kernel])
    opt = MasterWeightAdamW(a.parameters(), **kw)
    _steps(a, opt, 3)
    _steps(b, torch.optim.AdamW(b.parameters(), **kw), 3)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
        assert MASTER not in opt.state[p]


def test_a_mixed_model_steps_each_parameter_by_its_dtype():
    """bf16 parameters through copies, float32 ones as torch does, in one optimizer."""
    mixed = _model()
    mixed[2].float()
    ref = copy.deepcopy(mixed).float()
    opt = MasterWeightAdamW(mixed.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for i in range(3):
        _grads(mixed, i)
        for p, q in zip(mixed.parameters(), ref.parameters()):
            q.grad = p.grad.float()
        opt.step()
        ref_opt.step()
    for p, q in zip(mixed.parameters(), ref.parameters()):
        assert torch.equal(p.detach().float() if p.dtype == torch.float32 else opt.state[p][MASTER], q.detach())
        assert (MASTER in opt.state[p]) is (p.dtype == torch.bfloat16)


def test_the_copies_survive_a_checkpoint_in_float32():
    """state_dict → a fresh optimizer's load_state_dict → more steps equals the uninterrupted
    run; the loaded copies and moments stay float32 (torch's own load would cast them to bf16)."""
    whole = _model()
    opt = MasterWeightAdamW(whole.parameters(), lr=1e-3)
    _steps(whole, opt, 2)
    saved_model, saved_opt = copy.deepcopy(whole.state_dict()), copy.deepcopy(opt.state_dict())
    _steps(whole, opt, 2)

    resumed = _model(seed=1)
    resumed.load_state_dict(saved_model)
    ropt = MasterWeightAdamW(resumed.parameters(), lr=1e-3)
    ropt.load_state_dict(saved_opt)
    for p in resumed.parameters():
        assert ropt.state[p][MASTER].dtype == torch.float32
        assert ropt.state[p]["exp_avg_sq"].dtype == torch.float32
    _steps(resumed, ropt, 2)
    for p, q in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p][MASTER], ropt.state[q][MASTER])


@pytest.mark.parametrize("master", [True, False])
def test_the_trainer_builds_it_from_the_config(small_overrides, master):
    from replication.config import load_profile
    from replication.train.components import build_components

    cfg = load_profile("smoke", {**small_overrides, "optim.master_weights": master})
    opt = build_components(cfg).optimizer
    assert isinstance(opt, MasterWeightAdamW) is master
    assert isinstance(opt, torch.optim.AdamW)


def test_two_updates_of_the_trainers_bf16_policy_move_it_as_the_float32_policy(small_overrides):
    """Two steps of the trainer's bf16 policy at the papers' lr: plain AdamW moves a few weights,
    the float32 copies move them all, by the float32 policy's mean displacement."""
    from replication.config import load_profile
    from replication.train.components import build_components

    def displacement(dtype, master):
        cfg = load_profile("smoke", {**small_overrides, "model.dtype": dtype, "optim.master_weights": master,
                                     "optim.lr": 1e-6})
        comp = build_components(cfg)
        params = list(comp.model.parameters())
        start = [p.detach().float().clone() for p in params]
        for i in range(2):
            _grads(comp.model, i)
            comp.optimizer.step()
            comp.optimizer.zero_grad()
        now = [comp.optimizer.state[p][MASTER] if master and dtype == "bfloat16" else p.detach().float()
               for p in params]
        moved = sum(int((n != s).sum()) for n, s in zip(now, start)) / sum(s.numel() for s in start)
        mean = torch.cat([(n - s).abs().flatten() for n, s in zip(now, start)]).mean().item()
        return moved, mean

    plain_moved, _ = displacement("bfloat16", False)
    copies_moved, copies_mean = displacement("bfloat16", True)
    _, float_mean = displacement("float32", False)
    assert plain_moved < 0.2
    assert copies_moved > 0.99
    assert copies_mean == pytest.approx(float_mean, rel=0.02)
