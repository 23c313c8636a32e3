"""Properties every registered allocator must have (base.py's contract), checked generically.

New allocators are covered as soon as they register. One that needs more than bounds + pool to
be built names its extra options in EXTRA_OPTIONS.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.allocation import PromptPool, available_allocators, make_allocator

LOWER, UPPER = 4, 12

EXTRA_OPTIONS = {
    # a function of the pool ids, so that mappings can cover every id
    "oracle": lambda ids: {"success_probability": {pid: (i % 7) / 6 for i, pid in enumerate(ids)}},
}


@st.composite
def scenarios(draw):
    """A pool, a seed and a few steps (batch of distinct ids, budget, rewards seed)."""
    kind = draw(st.sampled_from(["int", "str"]))
    size = draw(st.integers(4, 12))
    ids = list(range(100, 100 + size)) if kind == "int" else [f"prompt-{i}" for i in range(size)]
    steps = []
    for _ in range(draw(st.integers(3, 5))):
        batch = draw(st.permutations(ids))[: draw(st.integers(1, size))]
        budget = draw(st.integers(len(batch) * LOWER, len(batch) * UPPER))
        steps.append((batch, budget, draw(st.integers(0, 2**31 - 1))))
    return ids, draw(st.integers(0, 1000)), steps


def build(name: str, ids: list, seed: int):
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(len(ids), 8))
    pool = PromptPool(tuple(ids), tuple(f"question {i}?" for i in ids), emb / np.linalg.norm(emb, axis=1, keepdims=True))
    extra = EXTRA_OPTIONS.get(name, lambda _ids: {})(ids)
    return make_allocator(name, seed=seed, pool=pool, lower=LOWER, upper=UPPER, **extra)


def plan(alloc, batch, budget, p=None):
    """``alloc.plan``; an allocator told p by a probe (``wants_probe``, vip-probe) first gets the
    successes of m samples at ``p`` (seeded by the batch; default p drawn uniformly), as the
    trainer's probe (train/probe.py) tells it."""
    m = getattr(alloc, "wants_probe", 0)
    if m:
        rng = np.random.default_rng([len(batch), int(budget)])
        alloc.tell_probe(batch, rng.binomial(m, rng.random(len(batch)) if p is None else p), m)
    return alloc.plan(batch, budget)


def run_step(alloc, batch, budget, reward_seed):
    counts = plan(alloc, batch, budget)
    rng = np.random.default_rng(reward_seed)
    signed = bool(reward_seed % 2)  # both reward conventions: {0,1} and {-1,+1}
    rewards = rng.choice([-1.0, 1.0] if signed else [0.0, 1.0], int(counts.sum()))
    alloc.observe(batch, counts, rewards, prompt_losses=rng.normal(size=len(batch)))
    return counts


@pytest.mark.parametrize("name", available_allocators())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_invariants(name, scenario):
    ids, seed, steps = scenario
    a, b = build(name, ids, seed), build(name, ids, seed)
    half = len(steps) // 2 + 1
    for batch, budget, rseed in steps[:half]:
        counts = run_step(a, batch, budget, rseed)
        # exact budget, bounds, dtype
        assert counts.dtype == np.int64 and counts.shape == (len(batch),)
        assert int(counts.sum()) == budget
        assert counts.min() >= LOWER and counts.max() <= UPPER
        # determinism under the same seed and history
        np.testing.assert_array_equal(run_step(b, batch, budget, rseed), counts)
    # resume: a fresh instance loaded from the (pickled) state continues identically
    c = build(name, ids, seed)
    c.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    for batch, budget, rseed in steps[half:] + steps[:1]:
        np.testing.assert_array_equal(run_step(c, batch, budget, rseed), run_step(a, batch, budget, rseed))


UNIFORM = {"uniform"}
"""Allocators that give every prompt the same count by design; every other one must adapt."""


@pytest.mark.parametrize("name", [n for n in available_allocators() if n not in UNIFORM])
def test_adaptive_allocators_give_non_uniform_counts_on_a_heterogeneous_batch(name):
    """Prompts that always fail, always succeed, or succeed half the time: after a few observed
    steps an adaptive allocator must not give them all the same count (a secretly uniform
    allocator passes every budget check but fails here)."""
    ids = list(range(24))
    p_true = np.array([0.0, 0.5, 1.0] * 8)
    rng = np.random.default_rng(0)
    alloc = build(name, ids, seed=0)
    budget = len(ids) * 6
    for _ in range(6):
        counts = plan(alloc, ids, budget, p_true)
        rewards = (rng.random(int(counts.sum())) < np.repeat(p_true, counts)).astype(float)
        alloc.observe(ids, counts, rewards)
    counts = plan(alloc, ids, budget, p_true)
    assert counts.sum() == budget
    assert counts.min() < counts.max(), f"{name} gave every prompt {counts[0]} rollouts"
