"""The replicated policy's collectives, on 2 real gloo ranks (one short subprocess pair):
DDP with the SUM hook gives the whole batch's gradient; numbers travel as tensors, never
through pickled ``all_gather_object``; the update's diagnostics combine to the 1-process ones.

The end-to-end "2 ranks equal 1 process" runs are in test_distributed.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dist_helpers import run_two_ranks

RANKS = r"""
import json, math, sys
import numpy as np
import torch
import torch.distributed as dist
from replication.rl import PPOConfig
from replication.train.ddp import replicate_policy
from replication.train.distributed import World
from replication.train.update_stats import combine_over_ranks

world = World.from_env()
r = world.rank
def no_pickles(*a, **k):
    raise AssertionError("a pickled gather of numbers")
dist.all_gather_object = no_pickles
out = {}

# -- numbers as tensors: unequal lengths, dtypes kept
parts = {0: [True, False, True], 1: [False]}
out["bool"] = [a.tolist() for a in world.gather_arrays(np.array(parts[r]))]
out["bool_dtype"] = str(world.concat(np.array(parts[r]), [3, 1]).dtype)
ints = np.array([2**40 + r, -r], dtype=np.int64)
out["ints"] = world.concat(ints).tolist()
out["floats"] = world.concat(np.array([0.1 * (r + 1)] * (r + 1))).tolist()
out["sum"] = world.sum(3 + r)
out["sum_type"] = type(world.sum(3 + r)).__name__
out["min"], out["max"] = world.min(0.5 + r), world.max(0.5 + r)
out["reduce"] = world.reduce([1.0 + r, -r], "min").tolist()
out["comm_seconds"] = world.clock.take()

# -- DDP with the SUM hook: rank r backpropagates half the rows over the GLOBAL row count
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
full = [p.detach().clone() for p in model.parameters()]
ddp = replicate_policy(model, world)
mine = x[:3] if r == 0 else x[3:]
(ddp(mine).pow(2).sum() / 6).backward()
got = [p.grad.clone() for p in model.parameters()]
ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
with torch.no_grad():
    for p, w in zip(ref.parameters(), full):
        p.copy_(w)
(ref(x).pow(2).sum() / 6).backward()
out["grad_err"] = max(float((a - p.grad).abs().max()) for a, p in zip(got, ref.parameters()))

# -- diagnostics: mini-batch 0 trained on both ranks, 1 on rank 0 only, 2 nowhere
cfg = PPOConfig()
keys = {"n_tokens": 0.0, "clipfrac": 0.0, "clipfrac_high": 0.0, "clipfrac_low": 0.0, "clipfrac_dual": 0.0,
        "approx_kl": 0.0, "ratio_mean": 1.0, "ratio_min": 1.0, "ratio_max": 1.0, "pg_loss": 0.0, "loss": 0.0}
mb0 = {**keys, "n_tokens": 4.0 + r, "clipfrac": 0.5 * r, "ratio_min": 0.9 - r * 0.1, "loss": 0.25,
       "entropy": 1.0 + r, "grad_norm": 2.0}
mb1 = {**keys, "n_tokens": 3.0, "clipfrac": 0.2, "loss": 0.5, "entropy": 0.7, "grad_norm": 1.5} if r == 0 \
    else {"entropy": float("nan"), "grad_norm": 1.5}
per_mb = [(mb0, 4.0 + r, {}), (mb1, 3.0 if r == 0 else 0.0, {}), ({"grad_norm": 0.0}, None, None)]
out["stats"] = combine_over_ranks(world, per_mb, cfg, use_kl=False, modulation=None)
json.dump(out, open(sys.argv[1] + f"/rank{r}.json", "w"))
world.close()
"""


def test_ddp_sum_and_tensor_collectives(tmp_path):
    res = run_two_ranks(RANKS, tmp_path)
    for o in res:  # every rank gets the same, rank-ordered answers
        assert o["bool"] == [[True, False, True], [False]] and o["bool_dtype"] == "bool"
        assert o["ints"] == [2**40, 0, 2**40 + 1, -1]  # integers exact
        assert np.allclose(o["floats"], [0.1, 0.2, 0.2])
        assert o["sum"] == 7 and o["sum_type"] == "int" and (o["min"], o["max"]) == (0.5, 1.5)
        assert o["reduce"] == [1.0, -1.0]
        assert o["comm_seconds"] > 0  # the step's comm figure counts these
        # DDP averages; the SUM hook makes the ranks' halves the whole batch's gradient
        assert o["grad_err"] < 1e-6, o["grad_err"]
    s0, s1, s2 = res[0]["stats"]
    assert res[0]["stats"] == res[1]["stats"]
    assert s0["n_tokens"] == 9.0 and s0["loss"] == 0.5  # summed: already over the global denominator
    assert s0["clipfrac"] == (0.0 * 4 + 0.5 * 5) / 9  # token-weighted mean
    assert s0["ratio_min"] == 0.8 and s0["grad_norm"] == 2.0
    assert s0["entropy"] == (1.0 * 4 + 2.0 * 5) / 9
    assert s1["n_tokens"] == 3.0 and s1["clipfrac"] == pytest.approx(0.2) and s1["entropy"] == pytest.approx(0.7)  # rank 1 left out
    assert s2 == {"grad_norm": 0.0}


def test_stat_names_cover_what_the_update_reports():
    """The names the diagnostics table is laid out by are the loss functions' own."""
    from replication.rl import DynaMOConfig, PPOConfig, ppo_clip_loss
    from replication.train.update_stats import stat_names

    cfg = PPOConfig(kl_coef=0.1)
    x = torch.randn(2, 3)
    res = ppo_clip_loss(x, x, x, torch.ones(2, 3), cfg, ref_logp=x)
    assert set(res.stats) <= set(stat_names(cfg, use_kl=True, modulation=None))
    assert "kl" not in stat_names(PPOConfig(), use_kl=False, modulation=None)
    assert {"beta_comp_mean", "entropy_min"} <= set(stat_names(PPOConfig(), use_kl=False, modulation=DynaMOConfig()))
