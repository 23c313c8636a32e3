"""Micro-batches (``rl.micro_batch_rows``, train/update.py): a rank's share of a PPO mini-batch
split into passes of at most k rows gives the unsplit update — the parameters after the step,
each row's loss and KL, and the logged diagnostics — to float summation order, for plain GRPO,
with a KL term to a reference policy, and with DynaMO's modulation (whose H_min/H_max and max Ξ
stay the mini-batch's). Two gloo ranks with micro-batches give the 1-process run."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from replication.models import load_policy
from replication.rl import DynaMOConfig, PPOConfig, group_advantages
from replication.rollout.base import SamplingConfig
from replication.rollout.hf_engine import HFRolloutEngine
from replication.train.update import micro_batches, ppo_update
from replication.train.update_stats import combine_parts

from dist_helpers import _jsonl, _run, _same_run, _train_args

TOL = 1e-5
"""Relative (floor 1e-6 absolute) on parameters, row losses and diagnostics: the passes differ from
the unsplit one only in summation order and the padding width each pass's rows are cut to."""


@pytest.fixture(scope="module")
def policy_and_batch(base_model_dir):
    torch.manual_seed(0)
    model, tok = load_policy(base_model_dir)
    engine = HFRolloutEngine(model, tok, seed=0)
    prompts = ["12+34=", "7*8=", "3+4=", "55-21=", "9+9=", "6*7="]
    counts = np.array([4, 2, 5, 3, 1, 4])
    batch = engine.generate([f"p{i}" for i in range(len(prompts))], prompts, ["46", "56", "7", "34", "18", "42"],
                            counts, SamplingConfig(1.0, 1.0, 0, 6), generator=torch.Generator().manual_seed(0))
    rewards = np.random.default_rng(3).integers(0, 2, size=batch.n_rows).astype(float)
    rewards[:4] = [1.0, 0.0, 1.0, 0.0]  # mixed groups; the others may be constant (advantage 0)
    adv = group_advantages(rewards, batch.group_index, "grpo")
    assert (adv == 0).any() and (adv != 0).any()
    return model, batch, adv


CASES = {
    "grpo": dict(ppo=PPOConfig(dual_clip=10.0)),
    "kl": dict(ppo=PPOConfig(dual_clip=3.0, kl_coef=0.05), ref=True),
    "dynamo": dict(ppo=PPOConfig(dual_clip=10.0), modulation=DynaMOConfig()),
    "dynamo-sequence-sum": dict(ppo=PPOConfig(), modulation=DynaMOConfig(delta_h="sequence_sum", tau=0.9)),
}


def _update(model0, batch, adv, case: str, micro: int, rows_seen: list | None = None):
    """One update of a copy of ``model0`` (2 mini-batches, 2 PPO epochs, SGD): (parameters, result)."""
    spec = CASES[case]
    model = copy.deepcopy(model0)
    ref = None
    if spec.get("ref"):  # a reference policy a little away from the policy: the KL is not 0
        ref = copy.deepcopy(model0).eval()
        with torch.no_grad():
            g = torch.Generator().manual_seed(7)
            for p in ref.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=g))
                p.requires_grad_(False)
    if rows_seen is not None:
        for m in [model] + ([ref] if ref is not None else []):
            m.register_forward_pre_hook(lambda mod, args, kw: rows_seen.append(kw["input_ids"].shape[0]),
                                        with_kwargs=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    res = ppo_update(model, opt, None, batch, adv, spec["ppo"], temperature=1.0, mini_batches=2, ppo_epochs=2,
                     grad_clip=1e9, rng=np.random.default_rng(11), modulation=spec.get("modulation"),
                     ref_model=ref, micro_batch_rows=micro)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, res


def _close(a: float, b: float) -> bool:
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= TOL * max(abs(a), 0.1)


@pytest.mark.parametrize("case", list(CASES))
def test_micro_batches_equal_the_unsplit_update(policy_and_batch, case):
    model, batch, adv = policy_and_batch
    whole_w, whole = _update(model, batch, adv, case, 0)
    start = {k: v.detach() for k, v in model.state_dict().items()}
    assert max(float((whole_w[k] - start[k]).abs().max()) for k in start) > 1e-3  # the step moved it
    if CASES[case].get("ref"):
        assert np.abs(whole.row_kl).max() > 1e-4
    if CASES[case].get("modulation"):
        assert whole.stats["beta_stab_min"] < 0.99 and whole.stats["beta_comp_mean"] > 1.0
    for micro in (1, 2, 3):
        seen: list[int] = []
        w, res = _update(model, batch, adv, case, micro, seen)
        assert max(seen) <= micro  # every pass, the reference's and DynaMO's extent pass too
        worst = max(float((w[k] - whole_w[k]).abs().max()) for k in w)
        assert worst <= TOL, (micro, worst)
        assert np.allclose(res.row_loss, whole.row_loss, rtol=TOL, atol=1e-7), micro
        assert np.allclose(res.row_kl, whole.row_kl, rtol=TOL, atol=1e-7), micro
        assert set(res.stats) == set(whole.stats)
        bad = {k: (res.stats[k], whole.stats[k]) for k in whole.stats if not _close(res.stats[k], whole.stats[k])}
        assert not bad, (micro, bad)


@pytest.mark.parametrize("micro", [1, 2])
def test_dynamo_skips_the_passes_of_zero_advantages(policy_and_batch, micro):
    """With micro-batches, DynaMO keeps every row for its extent (one no-grad pass over all of
    them) but a micro-batch whose advantages are all 0 has a zero gradient: it gets no forward or
    backward, its losses and diagnostics come from the extent pass's values, and the update equals
    the unsplit one (test above). Passes: the extent's over every micro-batch, then one per
    micro-batch holding a non-zero advantage."""
    model, batch, adv = policy_and_batch
    seen: list[int] = []
    _update(model, batch, adv, "dynamo", micro, seen)
    order = np.random.default_rng(11)  # _update's plan: 2 epochs of 2 mini-batches
    want = every = 0
    for _ in range(2):
        perm = order.permutation(batch.n_rows)
        for mb in np.array_split(perm, 2):
            parts = micro_batches(np.sort(mb), micro)
            want += len(parts) + sum(bool((adv[p] != 0).any()) for p in parts)
            every += 2 * len(parts)  # extent and gradient passes over every micro-batch
    assert len(seen) == want, (len(seen), want)
    assert want < every if micro == 1 else want <= every  # one row per pass: each zero row skipped


def test_the_unsplit_update_runs_one_pass_per_mini_batch(policy_and_batch):
    """``micro_batch_rows`` 0 (the default) and a count at least the share's: one pass per
    mini-batch and epoch, no DynaMO extent pass: the path the golden runs pin."""
    model, batch, adv = policy_and_batch
    for micro in (0, batch.n_rows):
        seen: list[int] = []
        _update(model, batch, adv, "dynamo", micro, seen)
        assert len(seen) == 4 and sum(seen) == 2 * batch.n_rows, seen  # DynaMO keeps every row


def test_dynamo_extent_is_the_mini_batch_s():
    """Split by hand: modulating each micro-batch with the extent over all of them is modulating
    the whole (the per-micro-batch extent would not be)."""
    from replication.rl import modulate_advantages
    from replication.train.update import _local_extent

    g = torch.Generator().manual_seed(0)
    n, L = 6, 7
    mask = (torch.rand(n, L, generator=g) > 0.2).float()
    logp = -torch.rand(n, L, generator=g) * 3 * mask
    old = logp + 0.05 * torch.randn(n, L, generator=g) * mask
    ent = torch.rand(n, L, generator=g) * 4 * mask
    adv = torch.randn(n, generator=g)[:, None] * mask
    cfg, ppo = DynaMOConfig(), PPOConfig()
    whole, _ = modulate_advantages(adv, logp, old, ent, mask, cfg, ppo)
    parts = [slice(0, 2), slice(2, 5), slice(5, 6)]
    ext = [_local_extent(adv[s], logp[s], old[s], ent[s], mask[s], ppo, cfg.delta_h) for s in parts]
    extent = {"entropy_range": (min(e[0] for e in ext), max(e[1] for e in ext)), "xi_max": max(e[2] for e in ext)}
    split = torch.cat([modulate_advantages(adv[s], logp[s], old[s], ent[s], mask[s], cfg, ppo, **extent)[0]
                       for s in parts])
    assert torch.equal(split, whole)
    own = torch.cat([modulate_advantages(adv[s], logp[s], old[s], ent[s], mask[s], cfg, ppo)[0] for s in parts])
    assert not torch.allclose(own, whole)


def test_micro_batch_split_and_stat_combination():
    rows = np.array([3, 5, 8, 9, 12])
    assert [p.tolist() for p in micro_batches(rows, 2)] == [[3, 5], [8, 9], [12]]
    assert [p.tolist() for p in micro_batches(rows, 0)] == [rows.tolist()]
    assert [p.tolist() for p in micro_batches(rows, 9)] == [rows.tolist()]
    assert micro_batches(np.zeros(0, np.int64), 2) == []
    a = ({"n_tokens": 4.0, "loss": 0.25, "clipfrac": 0.5, "ratio_min": 0.9, "ratio_max": 1.1,
          "entropy": 1.0, "beta_comp_pos_mean": 1.1}, 4.0, {"beta_comp_pos_mean": 2.0})
    b = ({"n_tokens": 6.0, "loss": 0.5, "clipfrac": 0.0, "ratio_min": 0.95, "ratio_max": 1.3,
          "entropy": 2.0, "beta_comp_pos_mean": 1.0}, 6.0, {"beta_comp_pos_mean": 0.0})
    empty = ({"n_tokens": 0.0, "loss": 0.0, "clipfrac": 0.0, "ratio_min": 1.0, "ratio_max": 1.0,
              "entropy": 0.0, "beta_comp_pos_mean": 1.0}, 0.0, {"beta_comp_pos_mean": 0.0})
    stats, weight, weights = combine_parts([a, empty, b])
    assert weight == 10.0 and weights == {"beta_comp_pos_mean": 2.0}
    assert stats["n_tokens"] == 10.0 and stats["loss"] == 0.75  # summed: over the global denominator
    assert stats["clipfrac"] == pytest.approx(0.2) and stats["entropy"] == pytest.approx(1.6)  # token-weighted
    assert (stats["ratio_min"], stats["ratio_max"]) == (0.9, 1.3)  # the empty pass's 1.0 left out
    assert stats["beta_comp_pos_mean"] == pytest.approx(1.1)  # over positive tokens only
    assert combine_parts([a]) is a


def test_micro_batch_rows_is_validated(small_overrides):
    from replication.config import ConfigError, load_profile

    assert load_profile("default").rl.micro_batch_rows == 0
    assert load_profile("default", {"rl.micro_batch_rows": 4}).rl.micro_batch_rows == 4
    with pytest.raises(ConfigError, match="rl.micro_batch_rows"):
        load_profile("default", {"rl.micro_batch_rows": -1})


def test_vllm_recompute_passes_take_the_configured_rows():
    """The old-log-prob recompute forwards ``rl.log_prob_micro_batch_rows`` rows a pass (else
    ``rl.micro_batch_rows``, else 64), with the same log-probs as one pass."""
    from rollout.vllm_fakes import TinyLM, make_engine

    from replication.rollout.vllm_engine import RECOMPUTE_ROWS

    calls: list[int] = []

    class CountingLM(TinyLM):
        def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
            calls.append(input_ids.shape[0])
            return super().forward(input_ids, attention_mask, position_ids, **kw)

    args = (["a", "b"], ["xy", "z"], ["1", "2"], np.array([2, 3]))
    from rollout.vllm_fakes import SAMPLING

    out = {}
    for rows in (0, 2):
        engine = make_engine(old_logprobs="recompute")
        engine.policy = CountingLM(vocab=93)
        engine.recompute_rows = rows or RECOMPUTE_ROWS
        calls.clear()
        out[rows] = engine.generate(*args, SAMPLING, generator=torch.Generator().manual_seed(0)).old_logprobs
        assert calls == ([5] if rows == 0 else [2, 2, 1]), calls
    assert torch.allclose(out[0], out[2], atol=1e-6)


@pytest.mark.parametrize("paper", ["vip", "dynamo", "gdro"])
def test_the_memory_rule_counts_one_micro_batch(paper):
    """dry-run's largest pass is one micro-batch: the paper profiles' settings fit an 80 GB GPU
    (no warning); the whole share in one pass does not, and the warning names the setting."""
    from replication.config import load_profile
    from replication.launch.memory import gpu_memory
    from replication.train.plan import plan

    cfg = load_profile(f"paper-{paper}")
    assert cfg.rl.micro_batch_rows >= 1 and cfg.rl.log_prob_micro_batch_rows >= 1
    out = plan(cfg, gpus=8)
    assert out["warnings"] == [], out["warnings"]
    p = out["memory"]["largest_pass"]
    assert p["rows"] == max(cfg.rl.micro_batch_rows, cfg.rl.log_prob_micro_batch_rows)
    whole = load_profile(f"paper-{paper}", {"rl.micro_batch_rows": 0, "rl.log_prob_micro_batch_rows": 0})
    line = gpu_memory(whole, 8, 80.0).pass_warning(whole.profile)
    assert line and "rows x" in line and "set rl." in line and "micro_batch_rows to at most" in line, line
    assert plan(whole, gpus=8)["warnings"] == [line]


# ------------------------------------------------------------------------- real multi-process runs
@pytest.mark.slow
@pytest.mark.parametrize("case,common,split", [
    # DDP: no_sync but on the last pass, the ranks' pass counts unequal; DynaMO's extent pass
    ("dynamo+modulation", (), ("--set", "rl.micro_batch_rows=1")),
    # FSDP: only trainable rows are dealt, so the ranks' shares (and pass counts) differ: every
    # rank runs the most passes, the extra ones zero-weight
    ("vip", (), ("--set", "rl.micro_batch_rows=1", "--set", "model.sharding=fsdp")),
    # FSDP with the sharded reference policy's pass per micro-batch
    ("rollout-gdro+prompt-gdro", ("--set", "rl.kl_coef=0.05"),
     ("--set", "rl.micro_batch_rows=1", "--set", "model.sharding=fsdp")),
    # FSDP with DynaMO's extent pass over every row, then gradient passes over the rows with a
    # non-zero advantage only (the ranks' counts differ: every rank runs the most)
    ("dynamo+modulation", (), ("--set", "rl.micro_batch_rows=1", "--set", "model.sharding=fsdp")),
    # FSDP with DynaMO's extent pass and a short last micro-batch
    ("dynamo+modulation", (), ("--set", "rl.micro_batch_rows=3", "--set", "model.sharding=fsdp")),
], ids=["ddp-dynamo-1", "fsdp-vip-1", "fsdp-kl-1", "fsdp-dynamo-1", "fsdp-dynamo-3"])
def test_two_processes_with_micro_batches_equal_one_without(small_overrides, tmp_path, case, common, split):
    """2 gloo ranks splitting their shares into micro-batches give the 1-process run of the whole
    batch in one pass per mini-batch (tolerance: tests/dist_helpers.py)."""
    one, two = tmp_path / "one", tmp_path / "two"
    _run(1, _train_args(small_overrides, one, case, *common))
    _run(2, _train_args(small_overrides, two, case, *common, *split))
    assert json.loads((two / "config.json").read_text())["rl"]["micro_batch_rows"] in (1, 3)
    assert len(_jsonl(two / "steps.jsonl")) == 3
    _same_run(one, two)
