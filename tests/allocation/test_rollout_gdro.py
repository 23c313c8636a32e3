"""Rollout-GDRO: exact-budget joint-argmax DP, ±1 fallback, dual ascent, id keying, state."""

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.allocation import make_allocator
from replication.allocation.rollout_gdro import (
    RolloutGDRO,
    fallback_prompt_loss,
    max_joint_probability_config,
)


def brute_force(sizes, log_probs, lower, budget):
    best = -np.inf
    k = log_probs.shape[1]
    for arms in itertools.product(range(k), repeat=len(sizes)):
        if sum(s * (a + lower) for s, a in zip(sizes, arms)) == budget:
            best = max(best, sum(log_probs[b, a] for b, a in enumerate(arms)))
    return best


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_dp_matches_brute_force(data):
    n_bins = data.draw(st.integers(1, 4))
    k = data.draw(st.integers(1, 5))
    lower = data.draw(st.integers(1, 3))
    sizes = np.array(data.draw(st.lists(st.integers(1, 5), min_size=n_bins, max_size=n_bins)))
    raw = np.array(data.draw(st.lists(st.floats(0.01, 1.0), min_size=n_bins * k, max_size=n_bins * k)))
    log_probs = np.log(raw.reshape(n_bins, k))
    budget = data.draw(st.integers(lower * sizes.sum(), (lower + k - 1) * sizes.sum()))
    arms, total = max_joint_probability_config(sizes, log_probs, lower, budget)
    assert int((sizes * arms).sum()) == total
    assert np.all((arms >= lower) & (arms < lower + k))
    best = brute_force(sizes, log_probs, lower, budget)
    if np.isfinite(best):
        assert total == budget
        assert log_probs[np.arange(n_bins), arms - lower].sum() == pytest.approx(best)
    else:  # no exact configuration: the closest reachable total
        reachable = {
            sum(s * (a + lower) for s, a in zip(sizes, c))
            for c in itertools.product(range(k), repeat=n_bins)
        }
        assert abs(total - budget) == min(abs(t - budget) for t in reachable)


def test_dp_prefers_joint_argmax_over_marginals():
    # Marginal argmaxes (12, 12) overspend; the best exact pair for sizes (1, 1), budget 8:
    sizes = np.array([1, 1])
    lp = np.log(np.array([[0.1, 0.3, 0.6], [0.5, 0.1, 0.4]]))  # arms 3, 4, 5
    arms, total = max_joint_probability_config(sizes, lp, 3, 8)
    assert total == 8 and arms.tolist() == [5, 3]


def set_preference(alloc, bin_, arm, strength=20.0):
    """Make bin ``bin_``'s bandit strongly prefer ``arm`` (a rollout count)."""
    scores = np.full(len(alloc.arms), strength)
    scores[arm - alloc.config.lower] = 0.0
    alloc.bandits[bin_].scores = scores


def ids_in_bins(alloc, layout):
    """Give prompts histories that put them in the requested bins; return ids in batch order."""
    ids = []
    for b, n in layout.items():
        for j in range(n):
            pid = f"b{b}-{j}"
            hits = [1] * b + [0] * (10 - b)  # rate b/10 -> bin b
            for h in hits:
                alloc.classifier.update([pid], [h])
            ids.append(pid)
    return ids


def test_plan_is_joint_argmax_and_exact():
    alloc = RolloutGDRO()
    ids = ids_in_bins(alloc, {1: 3, 5: 2, 8: 3})  # Q = 8, n̄ = 4 -> budget 32
    set_preference(alloc, 1, 2)
    set_preference(alloc, 5, 4)
    set_preference(alloc, 8, 6)  # 3*2 + 2*4 + 3*6 = 32 exactly
    counts = alloc.plan(ids, 32)
    assert counts.tolist() == [2, 2, 2, 4, 4, 6, 6, 6]
    det = alloc.plan_details()
    assert det["bin"].tolist() == [1, 1, 1, 5, 5, 8, 8, 8]
    assert det["mu"].tolist() == [0.0] * 8


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_plan_invariants_any_budget(data):
    alloc = RolloutGDRO(seed=data.draw(st.integers(0, 5)))
    layout = data.draw(st.dictionaries(st.integers(0, 9), st.integers(1, 6), min_size=1, max_size=4))
    ids = ids_in_bins(alloc, layout)
    for b in layout:
        alloc.bandits[b].scores = np.array(data.draw(st.lists(st.floats(-5, 5), min_size=11, max_size=11)))
    q = len(ids)
    budget = data.draw(st.integers(2 * q, 12 * q))
    counts = alloc.plan(ids, budget)  # plan() itself asserts sum and bounds
    assert counts.sum() == budget and counts.min() >= 2 and counts.max() <= 12


def test_parity_fallback_adjusts_single_prompts():
    alloc = RolloutGDRO()
    ids = [f"new{i}" for i in range(4)]  # all unseen -> one bin of size 4
    set_preference(alloc, 5, 4)
    counts = alloc.plan(ids, 18)  # multiples of 4 only: 16 or 20 -> closest, then +1 +1
    assert counts.sum() == 18
    assert sorted(counts.tolist()) == [4, 4, 5, 5]


def test_dual_ascent_direction():
    up = RolloutGDRO()
    ids = [f"p{i}" for i in range(8)]
    set_preference(up, 5, 12)  # bandit demands 12 > n̄ = 4
    counts = up.plan(ids, 32)
    up.observe(ids, counts, np.zeros(int(counts.sum())), prompt_losses=np.zeros(8))
    assert up.mu > 0
    down = RolloutGDRO(mu_init=0.5)
    set_preference(down, 5, 2)  # demands 2 < 4
    counts = down.plan(ids, 32)
    down.observe(ids, counts, np.zeros(int(counts.sum())), prompt_losses=np.zeros(8))
    assert down.mu < 0.5
    still = RolloutGDRO(mu_init=0.5, dual_signal="realised")
    set_preference(still, 5, 12)
    counts = still.plan(ids, 32)
    still.observe(ids, counts, np.zeros(int(counts.sum())), prompt_losses=np.zeros(8))
    assert still.mu == 0.5  # an exact-budget plan realises n̄: the literal update never moves
    capped = RolloutGDRO(mu_lr=10.0, mu_max=0.3)
    set_preference(capped, 5, 12)
    counts = capped.plan(ids, 32)
    capped.observe(ids, counts, np.zeros(int(counts.sum())), prompt_losses=np.zeros(8))
    assert capped.mu == 0.3


@pytest.mark.parametrize("mu_cost", ["all_arms", "played_arm"])
def test_observe_updates_played_arm_with_lagrangian_loss(mu_cost):
    alloc = RolloutGDRO(mu_init=0.1, arm_ema=None, gamma=0.0, mu_cost=mu_cost)
    ids = ids_in_bins(alloc, {2: 2, 7: 2})
    counts = alloc.plan(ids, 16)
    p_before = alloc.bandits[2].probabilities().copy()
    losses = np.array([0.2, 0.4, -1.0, -1.0])
    alloc.observe(ids, counts, np.ones(16), prompt_losses=losses)
    arm = int(counts[0])
    scores = alloc.bandits[2].scores
    if mu_cost == "played_arm":  # (mean loss + μ n) / P on the played arm only
        assert scores[arm - 2] == pytest.approx((0.3 + 0.1 * arm) / p_before[arm - 2])
        assert np.count_nonzero(scores) == 1
    else:  # mean loss / P on the played arm, plus the known price μ n on every arm
        expected = 0.1 * alloc.arms
        expected[arm - 2] += 0.3 / p_before[arm - 2]
        assert scores.tolist() == pytest.approx(expected.tolist())


def test_price_lowers_demand_for_large_arms():
    alloc = RolloutGDRO(mu_init=0.5)
    ids = [f"p{i}" for i in range(8)]
    demand0 = alloc.bandits[5].probabilities() @ alloc.arms
    counts = alloc.plan(ids, 32)
    alloc.observe(ids, counts, np.zeros(32), prompt_losses=np.zeros(8))
    assert alloc.bandits[5].probabilities() @ alloc.arms < demand0


def test_fallback_signals():
    counts = np.array([2, 3, 2])
    rewards = np.array([1, 1, 1, 0, 0, 0, 0], dtype=float)
    assert fallback_prompt_loss(counts, rewards, "nonzero_advantage").tolist() == pytest.approx([0, -1, 0])
    assert fallback_prompt_loss(counts, rewards, "success_variance").tolist() == pytest.approx([0, -2 / 9, 0])
    alloc = RolloutGDRO(arm_ema=None)
    ids = ["a", "b"]
    c = alloc.plan(ids, 8)
    alloc.observe(ids, c, np.array([1, 0, 1, 0, 1, 0, 1, 0]))  # no losses: mixed groups
    assert alloc.bandits[5].scores.min() < 0  # −1 per prompt: the played arm looks good


@pytest.mark.parametrize("signal", ["nonzero_advantage", "success_variance"])
def test_success_signal_selectable_in_training_config(signal):
    """``allocator.options.signal`` passes the config's validation and makes the bandits learn from
    the success-based signal although the trainer passes its losses: the bandits end exactly as
    those of an allocator that got no losses and fell back to the same signal, and unlike those of
    the paper's default, which learns from the losses."""
    from replication.config import load_profile

    cfg = load_profile("smoke", {"allocator.name": "rollout-gdro", "allocator.options": {"signal": signal}})
    chosen = make_allocator("rollout-gdro", seed=0, **cfg.allocator.options)
    fallback = make_allocator("rollout-gdro", seed=0, fallback_signal=signal)
    paper = make_allocator("rollout-gdro", seed=0)
    rng = np.random.default_rng(0)
    ids = list(range(12))
    for _ in range(4):
        counts = chosen.plan(ids, 48)
        assert np.array_equal(counts, fallback.plan(ids, 48)) and np.array_equal(counts, paper.plan(ids, 48))
        rewards = (rng.uniform(size=48) < 0.5).astype(float)
        losses = rng.normal(size=len(ids))
        chosen.observe(ids, counts, rewards, prompt_losses=losses)
        fallback.observe(ids, counts, rewards)  # no losses: the fallback
        paper.observe(ids, counts, rewards, prompt_losses=losses)
    scores = lambda a: np.stack([b.scores for b in a.bandits])  # noqa: E731
    assert np.array_equal(scores(chosen), scores(fallback))
    assert not np.allclose(scores(chosen), scores(paper))


def run_steps(alloc, ids, steps, rng):
    plans = []
    for _ in range(steps):
        batch = [ids[i] for i in rng.permutation(len(ids))[:10]]
        counts = alloc.plan(batch, 41)  # odd budget: exercises the fallback and the rng
        rewards = (rng.uniform(size=int(counts.sum())) < 0.4).astype(float)
        alloc.observe(batch, counts, rewards, prompt_losses=rng.normal(size=len(batch)))
        plans.append(dict(zip(batch, counts.tolist())))
    return plans


def test_state_round_trip_gives_identical_plans():
    ids = list(range(30))
    a = make_allocator("rollout-gdro", seed=3, hysteresis=0.03)
    run_steps(a, ids, 5, np.random.default_rng(0))
    b = make_allocator("rollout-gdro", seed=11, hysteresis=0.03)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.mu == a.mu
    assert run_steps(a, ids, 5, np.random.default_rng(1)) == run_steps(b, ids, 5, np.random.default_rng(1))


def test_keyed_by_id_under_shuffles():
    rng = np.random.default_rng(5)
    ids = [f"q{i}" for i in range(12)]
    a, b = RolloutGDRO(), RolloutGDRO()
    for _ in range(4):
        counts = a.plan(ids, 48)
        rewards = (rng.uniform(size=48) < 0.5).astype(float)
        losses = rng.normal(size=12)
        a.observe(ids, counts, rewards, prompt_losses=losses)
        perm = rng.permutation(12)
        layout = np.repeat(np.arange(12), counts)
        row_perm = np.concatenate([np.flatnonzero(layout == i) for i in perm])
        b_counts = b.plan([ids[i] for i in perm], 48)
        assert b_counts.tolist() == counts[perm].tolist()
        b.observe([ids[i] for i in perm], counts[perm], rewards[row_perm], prompt_losses=losses[perm])
    assert a.classifier.bins(ids).tolist() == b.classifier.bins(ids).tolist()
    assert a.mu == b.mu
    assert all(np.allclose(x.scores, y.scores) for x, y in zip(a.bandits, b.bandits))


@pytest.mark.parametrize(
    "opts, key",
    [
        ({"lower": 0}, "lower"),
        ({"upper": 1}, "upper"),
        ({"eta": 0.0}, "eta"),
        ({"gamma": -0.1}, "gamma"),
        ({"arm_ema": 1.5}, "ema"),
        ({"mu_lr": -1.0}, "mu_lr"),
        ({"mu_max": -1.0}, "mu_max"),
        ({"dual_signal": "x"}, "dual_signal"),
        ({"mu_cost": "x"}, "mu_cost"),
        ({"fallback_signal": "x"}, "fallback_signal"),
        ({"signal": "x"}, "signal"),
        ({"hysteresis": 2.0}, "hysteresis"),
        ({"n_bins": 0}, "n_bins"),
        ({"colour": 1}, "colour"),
    ],
)
def test_bad_config_names_key(opts, key):
    with pytest.raises(ValueError, match=key):
        make_allocator("rollout-gdro", **opts)


def test_infeasible_budget_raises():
    with pytest.raises(ValueError, match="infeasible"):
        RolloutGDRO().plan(["a", "b"], 30)


# ----------------------------------------------------------------------------- square-root law
# gdro-sqrt-law is Rollout-GDRO's theoretical target (Thm 4.2), so its tests live here.


def sqrt_law(**opts):
    return make_allocator("gdro-sqrt-law", **opts)


def test_sqrt_law_hand_example():
    alloc = sqrt_law()
    ids = ids_in_bins(alloc, {1: 2, 6: 2})
    alloc.stat[[1, 6]] = [0.5, 0.5 * (1 - np.sqrt(0.75))]  # v = 0.25 and 0.0625: √v = 0.5, 0.25
    assert alloc.bin_variance()[[1, 6]].tolist() == pytest.approx([0.25, 0.0625])
    # n̄ = 6, shares 1/2: n = 6·√v / (0.5·0.5 + 0.5·0.25) = 8 and 4
    assert alloc.plan(ids, 24).tolist() == [8, 8, 4, 4]
    assert alloc.plan_details()["bin"].tolist() == [1, 1, 6, 6]


def test_sqrt_law_with_active_bounds():
    alloc = sqrt_law()
    ids = ids_in_bins(alloc, {1: 2, 6: 2})
    alloc.stat[[1, 6]] = [0.5, 0.0]  # law: n = (8, 0); 0 < lower -> clip(c √v, 2, 12)
    assert alloc.plan(ids, 16).tolist() == [6, 6, 2, 2]
    assert alloc.plan(ids, 44).tolist() == [12, 12, 10, 10]  # upper binds too


def test_sqrt_law_uniform_without_statistics():
    alloc = sqrt_law()
    assert alloc.plan(list("abcd"), 16).tolist() == [4, 4, 4, 4]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_sqrt_law_exact_budget_and_ordering(data):
    alloc = sqrt_law()
    layout = data.draw(st.dictionaries(st.integers(0, 9), st.integers(1, 6), min_size=1, max_size=5))
    ids = ids_in_bins(alloc, layout)
    for b in layout:
        alloc.stat[b] = data.draw(st.floats(0.0, 0.5))  # p ≤ 0.5: v increases with p
    q = len(ids)
    budget = data.draw(st.integers(2 * q, 12 * q))
    counts = alloc.plan(ids, budget)
    assert counts.sum() == budget and counts.min() >= 2 and counts.max() <= 12
    v = alloc.bin_variance()[alloc.plan_details()["bin"]]
    higher = v[:, None] > v[None, :]
    assert np.all((counts[:, None] >= counts[None, :])[higher])  # more variance, never fewer


def test_sqrt_law_observe_pass_rate_ema():
    alloc = sqrt_law(stat_ema=0.5)
    ids = ["a", "b"]  # both unseen -> prior bin 5 at plan and observe time
    alloc.observe(ids, [2, 2], [1, 0, 0, 0])
    assert alloc.stat[5] == pytest.approx(0.25)
    alloc.classifier = type(alloc.classifier)(alloc.classifier.config)  # back to unseen
    alloc.observe(ids, [2, 2], [1, 1, 1, 0])
    assert alloc.stat[5] == pytest.approx(0.5 * 0.25 + 0.5 * 0.75)


def test_sqrt_law_loss_spread():
    alloc = sqrt_law(variance="loss_spread")
    with pytest.raises(ValueError, match="prompt_losses"):
        alloc.observe(["a", "b"], [2, 2], [1, 0, 0, 0])
    alloc.observe(["a", "b", "c"], [2, 2, 2], np.zeros(6), prompt_losses=[0.0, 1.0, 2.0])
    assert alloc.stat[5] == pytest.approx(1.0)  # unbiased variance of (0, 1, 2)


def test_sqrt_law_state_round_trip():
    ids = list(range(30))
    a = sqrt_law(seed=1, window=3)
    run_steps(a, ids, 4, np.random.default_rng(0))
    b = sqrt_law(seed=2, window=3)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert run_steps(a, ids, 4, np.random.default_rng(1)) == run_steps(b, ids, 4, np.random.default_rng(1))


@pytest.mark.parametrize(
    "opts, key",
    [({"variance": "x"}, "variance"), ({"stat_ema": 0.0}, "stat_ema"), ({"window": 0}, "window")],
)
def test_sqrt_law_bad_config_names_key(opts, key):
    with pytest.raises(ValueError, match=key):
        sqrt_law(**opts)


def test_bin_loss_ema_official_code_option_sets_first_value_then_ema(monkeypatch):
    """bin_loss_ema=0.4 (official code): the bandit sees an EMA of the bin's loss, S = m at first."""
    from replication.allocation import make_allocator
    from replication.allocation.exp3p import EXP3P

    seen = []
    monkeypatch.setattr(EXP3P, "update", lambda self, arm, loss, prob=None, known=None: seen.append(loss))
    alloc = make_allocator("rollout-gdro", n_bins=1, bin_loss_ema=0.4, arm_ema=None)
    ids = ["a", "b"]
    for loss in (1.0, 0.0):
        counts = alloc.plan(ids, 8)
        alloc.observe(ids, counts, np.zeros(int(counts.sum())), prompt_losses=np.array([loss, loss]))
    assert seen == pytest.approx([1.0, 0.6])
    with pytest.raises(ValueError, match="bin_loss_ema"):
        make_allocator("rollout-gdro", bin_loss_ema=1.5)
