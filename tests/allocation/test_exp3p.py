"""EXP3P: probabilities, importance-weighted updates, regret on a stationary bandit, state."""

import json

import numpy as np
import pytest

from replication.allocation.exp3p import EXP3P, EXP3PConfig


def test_initial_distribution_is_uniform():
    assert np.allclose(EXP3P(4).probabilities(), 0.25)


def test_mixing_floor_and_normalisation():
    b = EXP3P(5, gamma=0.1, ema=None)
    b.scores = np.array([100.0, 0.0, 100.0, 100.0, 100.0])
    p = b.probabilities()
    assert p.sum() == pytest.approx(1.0)
    assert p.min() == pytest.approx(0.1 / 5)
    assert p[1] == pytest.approx(0.9 + 0.02)


def test_importance_weighted_update_cumulative_and_ema():
    cum = EXP3P(4, eta=1.0, gamma=0.0, ema=None)
    cum.update(2, 0.5)  # p = 1/4 -> estimate 0.5 / 0.25 = 2 on arm 2 only
    assert cum.scores.tolist() == pytest.approx([0, 0, 2.0, 0])
    ema = EXP3P(4, eta=1.0, gamma=0.0, ema=0.4)
    ema.scores = np.array([1.0, 1.0, 1.0, 1.0])
    ema.update(1, 0.5)  # all arms decay; the played one adds 0.4 * 2
    assert ema.scores.tolist() == pytest.approx([0.6, 0.6 + 0.8, 0.6, 0.6])
    known = EXP3P(3, gamma=0.0, ema=None)
    known.update(0, 0.3, known=np.array([0.0, 1.0, 2.0]))  # price known for every arm
    assert known.scores.tolist() == pytest.approx([0.9, 1.0, 2.0])
    with pytest.raises(ValueError, match="known"):
        known.update(0, 0.3, known=np.array([0.0, 1.0]))
    bonus = EXP3P(2, gamma=0.0, ema=None, bonus=0.1)
    bonus.update(0, 0.0)  # every arm gets −β / p_a: optimism for all
    assert bonus.scores.tolist() == pytest.approx([-0.2, -0.2])


def play(bandit, means, horizon, rng):
    regret = 0.0
    for _ in range(horizon):
        a = bandit.sample()
        bandit.update(a, float(rng.uniform() < means[a]))  # Bernoulli loss
        regret += means[a] - means.min()
    return regret / horizon


def test_regret_falls_well_below_uniform():
    means = np.array([0.6, 0.6, 0.2, 0.6, 0.6])
    uniform_regret = means.mean() - means.min()
    horizon, seeds = 600, 5
    regrets, best_prob = [], []
    for seed in range(seeds):
        bandit = EXP3P(len(means), eta=0.05, gamma=0.05, ema=None, seed=seed)
        regrets.append(play(bandit, means, horizon, np.random.default_rng(100 + seed)))
        best_prob.append(bandit.probabilities()[2])
    assert np.mean(regrets) < 0.4 * uniform_regret
    assert np.mean(best_prob) > 0.8


def test_paper_setting_ema_still_prefers_best_arm():
    # η = 0.65, γ = 0.01, EMA 0.4 tracks recent losses; on average it favours the better arm.
    means = np.array([0.9, 0.1])
    probs = []
    for seed in range(10):
        bandit = EXP3P(2, seed=seed)
        play(bandit, means, 200, np.random.default_rng(seed))
        probs.append(bandit.probabilities()[1])
    assert np.mean(probs) > 0.5


def test_state_round_trip():
    a = EXP3P(3, seed=4)
    for t in range(5):
        a.update(a.sample(), 0.1 * t)
    b = EXP3P(3, seed=99)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    seq_a = [a.sample() for _ in range(20)]
    seq_b = [b.sample() for _ in range(20)]
    assert seq_a == seq_b
    assert np.allclose(a.probabilities(), b.probabilities())
    with pytest.raises(ValueError, match="arms"):
        EXP3P(4).load_state_dict(a.state_dict())


@pytest.mark.parametrize(
    "opts, key",
    [({"eta": 0}, "eta"), ({"gamma": 1.5}, "gamma"), ({"ema": 0.0}, "ema"), ({"bonus": -1}, "bonus")],
)
def test_bad_config_names_key(opts, key):
    with pytest.raises(ValueError, match=key):
        EXP3P(3, EXP3PConfig(**opts))


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_arms"):
        EXP3P(0)
    b = EXP3P(3)
    with pytest.raises(ValueError, match="arm"):
        b.update(3, 0.0)
    with pytest.raises(ValueError, match="loss"):
        b.update(0, float("nan"))
