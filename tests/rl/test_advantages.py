"""Group advantages: vectorised estimators vs a plain per-group loop, on variable group sizes."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.rl import ADVANTAGE_ESTIMATORS, group_advantages, register_advantage


def loop_reference(rewards, group_ids, estimator):
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(rewards)
    for g in set(group_ids):
        idx = [i for i, x in enumerate(group_ids) if x == g]
        r = rewards[idx]
        n = len(r)
        if n == 1 or np.all(r == r[0]):
            continue  # no group-relative signal: 0
        if estimator == "grpo":
            out[idx] = (r - r.mean()) / (np.std(r, ddof=1) + 1e-6)
        elif estimator == "drgrpo":
            out[idx] = r - r.mean()
        elif estimator == "rloo":
            out[idx] = [r[j] - np.delete(r, j).mean() for j in range(n)]
    return out


@st.composite
def grouped_rewards(draw):
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=7))
    ids = draw(st.lists(st.integers(-10**9, 10**9), min_size=len(sizes), max_size=len(sizes), unique=True))
    binary = draw(st.booleans())
    elem = st.sampled_from([-1.0, 1.0]) if binary else st.floats(-100, 100, allow_nan=False)
    group_ids = [g for g, s in zip(ids, sizes) for _ in range(s)]
    rewards = draw(st.lists(elem, min_size=len(group_ids), max_size=len(group_ids)))
    perm = draw(st.permutations(range(len(group_ids))))
    return [rewards[p] for p in perm], [group_ids[p] for p in perm]


@settings(max_examples=150, deadline=None)
@given(grouped_rewards(), st.sampled_from(["grpo", "drgrpo", "rloo"]))
def test_matches_per_group_loop(data, estimator):
    rewards, group_ids = data
    got = group_advantages(np.array(rewards), np.array(group_ids), estimator)
    want = loop_reference(rewards, group_ids, estimator)
    assert got.dtype == np.float64 and got.shape == (len(rewards),)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo"])
def test_group_of_one_and_constant_group_get_exactly_zero(estimator):
    adv = group_advantages([1.0, 0.1, 0.1, 0.1, 0.7, 0.0], [5, 9, 9, 9, 2, 2], estimator)
    assert adv[0] == 0.0 and np.all(adv[1:4] == 0.0)
    assert adv[4] > 0 > adv[5]


def test_grpo_uses_unbiased_std_plus_1e6():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0], "grpo")
    # mean 0.25; unbiased std = sqrt((0.75² + 3·0.25²)/3) = 0.5 (population std would be 0.433)
    assert adv[0] == pytest.approx(0.75 / (0.5 + 1e-6), rel=1e-12)
    assert adv[1] == pytest.approx(-0.25 / (0.5 + 1e-6), rel=1e-12)


def test_rloo_is_leave_one_out_and_drgrpo_is_centred():
    r = [1.0, 0.0, 1.0, 1.0, 0.0]
    g = [3, 3, 3, 7, 7]
    rloo = group_advantages(r, g, "rloo")
    assert rloo[:3] == pytest.approx([1 - 0.5, 0 - 1.0, 1 - 0.5])
    assert rloo[3:] == pytest.approx([1.0, -1.0])
    assert group_advantages(r, g, "drgrpo") == pytest.approx([1 / 3, -2 / 3, 1 / 3, 0.5, -0.5])


def test_torch_in_torch_out():
    r = torch.tensor([1.0, -1.0, 1.0, 1.0], dtype=torch.float32)
    adv = group_advantages(r, torch.tensor([4, 4, 1, 1]), "drgrpo")
    assert isinstance(adv, torch.Tensor) and adv.dtype == torch.float32
    assert adv.tolist() == [1.0, -1.0, 0.0, 0.0]
    adv_int = group_advantages(torch.tensor([1, 0]), [0, 0], "drgrpo")
    assert adv_int.dtype == torch.get_default_dtype()


@pytest.mark.parametrize(
    "rewards, ids, estimator",
    [
        ([1.0, np.nan], [0, 0], "grpo"),
        ([1.0, np.inf], [0, 0], "grpo"),
        ([1.0, 0.0], [0], "grpo"),
        ([], [], "grpo"),
        ([1.0], [0], "nope"),
        ([[1.0]], [[0]], "grpo"),
    ],
)
def test_errors(rewards, ids, estimator):
    with pytest.raises(ValueError):
        group_advantages(rewards, ids, estimator)


def test_registry_one_decorated_function():
    name = "_test_plain_reward"
    if name not in ADVANTAGE_ESTIMATORS:

        @register_advantage(name)
        def plain(rewards, group_index, sizes):
            return rewards * sizes[group_index]

    assert group_advantages([1.0, 2.0, 3.0], [0, 0, 1], name).tolist() == [2.0, 4.0, 3.0]
    with pytest.raises(ValueError):
        register_advantage(name)(lambda r, g, s: r)
