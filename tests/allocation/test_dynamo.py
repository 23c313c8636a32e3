"""DynaMO Dynamic Rollout Allocation (replication/allocation/dynamo.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from replication.allocation import make_allocator
from replication.allocation.dynamo import OFFICIAL_CODE_OPTIONS, floor_proportional_allocation
from replication.allocation.variance import bernoulli_variance
from replication.allocation.water_level import water_level_allocation


def observe_groups(alloc, groups: dict, order=None):
    """groups: id -> list of 0/1 rewards; laid out as np.repeat(ids, counts)."""
    ids = list(groups) if order is None else order
    counts = [len(groups[i]) for i in ids]
    rewards = np.concatenate([np.asarray(groups[i], dtype=float) for i in ids])
    alloc.observe(ids, counts, rewards)


def test_bookkeeping_is_by_id_under_shuffles_and_variable_counts():
    rng = np.random.default_rng(0)
    alloc = make_allocator("dynamo", lower=1, upper=12)
    pool = [f"q{i}" for i in range(10)] + list(range(5))
    tally = {pid: [0, 0] for pid in pool}
    for _ in range(15):
        batch = list(rng.permutation(np.array(pool, dtype=object))[: rng.integers(3, 12)])
        counts = rng.integers(0, 9, len(batch))
        rewards = rng.choice([-1.0, 1.0], counts.sum())
        alloc.observe(batch, counts, rewards)
        owner = np.repeat(np.arange(len(batch)), counts)
        for j, pid in enumerate(batch):
            tally[pid][0] += int(counts[j])
            tally[pid][1] += int((rewards[owner == j] > 0).sum())
    order = list(rng.permutation(np.array(pool, dtype=object)))
    g, k = alloc.history(order)
    np.testing.assert_array_equal(g, [tally[p][0] for p in order])
    np.testing.assert_array_equal(k, [tally[p][1] for p in order])
    # numpy integer ids find the same entries as Python ints
    assert alloc.history([np.int64(3)])[0][0] == tally[3][0]


def test_plan_is_neyman_water_level_on_cumulative_variance():
    alloc = make_allocator("dynamo", lower=2, upper=12, proxy_power=0.5)  # the Neyman reading
    observe_groups(alloc, {"a": [1, 0, 1, 0], "b": [1, 1, 1, 0], "c": [1, 1, 1, 1]})
    observe_groups(alloc, {"b": [0, 0], "a": [1, 1]})
    ids = ["c", "a", "b", "new"]
    budget = 24
    counts = alloc.plan(ids, budget)
    p = bernoulli_variance([4, 4, 3], [4, 6, 6])
    sigma = np.append(np.sqrt(p), 0.5)  # unseen: optimistic sqrt(0.25)
    np.testing.assert_array_equal(counts, water_level_allocation(sigma, budget, 2, 12))
    d = alloc.plan_details()
    np.testing.assert_allclose(d["sigma"], sigma)
    assert list(d["seen"]) == [True, True, True, False]
    assert counts[0] == 2  # zero variance -> G_min


def test_proxy_power_and_batch_max_unseen():
    alloc = make_allocator("dynamo", lower=1, upper=20, proxy_power=1.0, unseen="batch_max")
    observe_groups(alloc, {0: [1, 0, 0, 0], 1: [1, 1, 0, 0]})
    alloc.plan([0, 1, 2], 12)
    d = alloc.plan_details()
    p = bernoulli_variance([1, 2], [4, 4])
    np.testing.assert_allclose(d["sigma"], [p[0], p[1], p.max()])


def test_refresh_epoch_buffers_until_end_epoch_and_refresh_every():
    alloc = make_allocator("dynamo", lower=1, upper=10, refresh="epoch")
    observe_groups(alloc, {"x": [1, 1, 1, 1], "y": [1, 0, 1, 0]})
    assert alloc.history(["x", "y"])[0].tolist() == [0, 0]
    np.testing.assert_array_equal(alloc.plan(["x", "y"], 8), [4, 4])  # both unseen
    alloc.end_epoch()
    assert alloc.history(["x", "y"])[0].tolist() == [4, 4]
    assert alloc.plan(["x", "y"], 8).tolist() == [1, 7]

    auto = make_allocator("dynamo", lower=1, upper=10, refresh="epoch", refresh_every=2)
    observe_groups(auto, {"x": [1, 0]})
    assert auto.history(["x"])[0][0] == 0 and auto.epoch == 0
    observe_groups(auto, {"x": [1, 0]})
    assert auto.history(["x"])[0][0] == 4 and auto.epoch == 1


def test_uniform_first_epoch_and_mastery():
    alloc = make_allocator("dynamo", lower=1, upper=10, uniform_first_epoch=True)
    observe_groups(alloc, {"x": [1, 1, 1, 1], "y": [1, 0, 1, 0], "z": [1, 0, 0, 0]})
    np.testing.assert_array_equal(alloc.plan(["x", "y", "z"], 10), [4, 3, 3])
    alloc.end_epoch()
    assert alloc.plan(["x", "y", "z"], 10)[0] == 1

    m = make_allocator("dynamo", lower=1, upper=10, mastery_threshold=0.75, priority_floor=0.01)
    observe_groups(m, {"x": [1, 1, 1, 0], "y": [1, 0, 1, 0]})
    m.plan(["x", "y"], 8)
    np.testing.assert_allclose(m.plan_details()["priority"], [0.01, bernoulli_variance(2, 4)])


def test_state_round_trip_json_gives_identical_plans():
    rng = np.random.default_rng(1)
    for options in ({}, OFFICIAL_CODE_OPTIONS | {"refresh_every": 3}):
        a = make_allocator("dynamo", seed=3, **(options or {"lower": 2, "upper": 12}))
        lo, hi = a.config.lower, a.config.upper
        pool = ["s1", "s2", 7, 8, 9, "s3"]
        for _ in range(4):
            ids = list(rng.permutation(np.array(pool, dtype=object))[:4])
            counts = a.plan(ids, 4 * (lo + hi) // 2)
            a.observe(ids, counts, rng.choice([0.0, 1.0], counts.sum()))
        state = json.loads(json.dumps(a.state_dict()))
        b = make_allocator("dynamo", seed=99, **(options or {"lower": 2, "upper": 12}))
        b.load_state_dict(state)
        for _ in range(3):
            ids = list(rng.permutation(np.array(pool, dtype=object))[:5])
            budget = 5 * (lo + hi) // 2
            ca, cb = a.plan(ids, budget), b.plan(ids, budget)
            np.testing.assert_array_equal(ca, cb)
            r = rng.choice([0.0, 1.0], ca.sum())
            a.observe(ids, ca, r)
            b.observe(ids, cb, r)


# ----------------------------------------------------------------------------- official code


def test_floor_proportional_hand_example():
    # lower 2 each (8), then 8 left: round 1 ideal 8*w/1.76 = [4.545, 2.273, 0.045, 1.136]
    # -> floor [4,2,0,1] + the leftover unit to the largest fraction (index 0) -> [5,2,0,1],
    # capped at 6-2=4 -> [6,4,2,3]; round 2 over indices 1..3 gives the last unit to index 1.
    np.testing.assert_array_equal(floor_proportional_allocation([1.0, 0.5, 0.01, 0.25], 16, 2, 6), [6, 5, 2, 3])
    # exploration: fewer than max(lower, 4) past rollouts -> topped up to 4 - history first
    np.testing.assert_array_equal(
        floor_proportional_allocation([1, 1, 1], 12, 2, 8, history=[0, 10, 3], initial_budget=4), [6, 3, 3]
    )
    # exploration overshooting the budget is scaled down
    np.testing.assert_array_equal(
        floor_proportional_allocation([1, 1, 1], 12, 2, 8, history=[0, 0, 0], initial_budget=6), [4, 4, 4]
    )
    # no eligible weight: round robin in index order, never above upper
    np.testing.assert_array_equal(floor_proportional_allocation([0.0, 0.0, 0.0], 10, 2, 4), [4, 3, 3])


def test_official_options_reproduce_official_priorities_and_split():
    alloc = make_allocator("dynamo", **OFFICIAL_CODE_OPTIONS)
    ids = ["p0", "p1", "p2", "p3"]
    np.testing.assert_array_equal(alloc.plan(ids, 48), [12, 12, 12, 12])  # epoch 1: uniform
    hist = {"p0": [1] * 8 + [0] * 8, "p1": [1] * 4 + [0] * 12, "p2": [1] * 14 + [0] * 2, "p3": [0] * 16}
    observe_groups(alloc, hist)
    alloc.end_epoch()
    counts = alloc.plan(ids, 48)
    # verl/utils/dataset/rl_dataset.py::update_rank: P = k(G-k)/(G(G-1)) + (1-acc)·1e-6, floored
    # at 0.01; mastered (acc >= 0.85) -> 0.01: [64/240, 48/240, .01, .01]
    pr = alloc.plan_details()["priority"]
    np.testing.assert_allclose(pr, [64 / 240 + 0.5e-6, 48 / 240 + 0.75e-6, 0.01, 0.01])
    # 8 each, then 16 by priority: [8.77, 6.58, .33, .33] -> [9, 7, 0, 0]
    np.testing.assert_array_equal(counts, [17, 15, 8, 8])
    # G < 4: priority -1 in the code, i.e. 0 here, never eligible for extra rollouts
    observe_groups(alloc, {"p4": [1, 0]})
    alloc.end_epoch()
    counts = alloc.plan(["p0", "p4"], 24)
    assert alloc.plan_details()["priority"][1] == 0.0 and counts.tolist() == [16, 8]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "options,msg",
    [
        ({"rule": "neyman"}, "rule"),
        ({"proxy": "biased"}, "proxy"),
        ({"refresh": "never"}, "refresh"),
        ({"unseen": "never"}, "unseen"),
        ({"proxy_power": 0.0}, "proxy_power"),
        ({"priority_floor": -0.1}, "priority_floor"),
        ({"mastery_threshold": 1.5}, "mastery_threshold"),
        ({"initial_budget": -1}, "initial_budget"),
        ({"refresh_every": 1.5}, "refresh_every"),
        ({"lower": 0}, "lower"),
        ({"lower": 9, "upper": 8}, "upper"),
        ({"colour": "red"}, "unknown option"),
    ],
)
def test_config_errors(options, msg):
    with pytest.raises(ValueError, match=msg):
        make_allocator("dynamo", **options)


def test_runtime_errors():
    alloc = make_allocator("dynamo", lower=2, upper=4)
    with pytest.raises(ValueError, match="infeasible budget"):
        alloc.plan(["a", "b"], 9)
    with pytest.raises(ValueError, match="duplicate"):
        alloc.plan(["a", "a"], 6)
    with pytest.raises(ValueError, match="rewards has"):
        alloc.observe(["a"], [3], [1.0, 0.0])
    with pytest.raises(ValueError, match="not 'dynamo'"):
        alloc.load_state_dict(make_allocator("uniform").state_dict())
    bad = alloc.state_dict()
    bad["state"]["visible"] = {"ids": ["a"], "rollouts": [], "successes": []}
    with pytest.raises(ValueError, match="differ in length"):
        alloc.load_state_dict(bad)


def test_default_allocates_proportional_to_p_as_the_readme_and_code():
    alloc = make_allocator("dynamo", lower=1, upper=20)
    observe_groups(alloc, {0: [1, 0, 0, 0], 1: [1, 1, 0, 0]})
    alloc.plan([0, 1], 8)
    p = bernoulli_variance([1, 2], [4, 4])
    np.testing.assert_allclose(alloc.plan_details()["sigma"], p)  # sigma = P, not sqrt(P)


def test_recipe_proxy_keeps_the_unused_files_form():
    alloc = make_allocator("dynamo", lower=1, upper=20, proxy="recipe")
    observe_groups(alloc, {0: [1, 0, 0, 0]})
    alloc.plan([0], 4)
    np.testing.assert_allclose(alloc.plan_details()["priority"], [4 * 0.25 * 0.75])
