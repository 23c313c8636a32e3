"""Evaluation metrics: pass@k vs brute-force enumeration, maj@k / best@k on hand examples,
best@k reproduces verl's bootstrap stream."""

import itertools
import math

import numpy as np
import pytest

from replication.evaluate import best_at_k_bootstrap, maj_at_k, mean_at_k, pass_at_k


def brute_pass_at_k(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_vectorised_and_large_n():
    n = np.array([10, 10, 1000, 1000, 32])
    c = np.array([0, 3, 1, 500, 1])
    k = np.array([1, 5, 1, 100, 32])
    got = pass_at_k(n, c, k)
    want = [1 - math.comb(int(a - b), int(kk)) / math.comb(int(a), int(kk)) for a, b, kk in zip(n, c, k)]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert isinstance(pass_at_k(5, 2, 1), float) and pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(8, np.arange(9), 8).tolist() == [0.0] + [1.0] * 8  # GDRO's pooled pass@8
    np.testing.assert_allclose(pass_at_k(16, 4, np.arange(1, 17)),
                               [brute_pass_at_k(16, 4, kk) for kk in range(1, 17)], atol=1e-12)


@pytest.mark.parametrize("n, c, k", [(4, 1, 5), (4, 5, 1), (-1, 0, 1), (4, -1, 1), (4, 1, 0), (4.5, 1, 1)])
def test_pass_at_k_errors(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_at_k():
    assert mean_at_k([[1, 0, 0, 1], [1, 1, 1, 1]]) == pytest.approx(0.75)
    assert mean_at_k([True, False]) == 0.5
    assert mean_at_k([[1, 0], [1, 1, 1, 0]]) == pytest.approx((0.5 + 0.75) / 2)  # ragged
    with pytest.raises(ValueError):
        mean_at_k([])


def test_maj_at_k_hand_examples():
    answers = ["a", "b", "a", "c", "b", "b"]
    truth = {"a": True}
    assert maj_at_k(answers, truth, 3) == 1.0  # a:2, b:1
    assert maj_at_k(answers, truth, 6) == 0.0  # b:3 beats a:2
    assert maj_at_k(answers, truth, 2) == 1.0  # a:1, b:1 tie -> first seen ("a")
    assert maj_at_k(["b", "a", "a", "b"], truth, 4) == 0.0  # tie -> "b" seen first
    assert maj_at_k(answers, lambda x: x == "b", 6) == 1.0
    flags = [True, False, True, False, False, False]
    assert maj_at_k(answers, flags, 4) == 1.0
    assert maj_at_k([None, None, "a"], truth, 3) == 0.0  # "no answer" is a vote, as in verl
    with pytest.raises(ValueError):
        maj_at_k(answers, truth, 7)
    with pytest.raises(ValueError):
        maj_at_k(answers, [True], 2)


def verl_like_bootstrap(values, subset_size, reduce_fn, n_bootstrap=1000, seed=42):
    """verl's bootstrap_metric procedure (global seed, one choice() per resample), re-typed."""
    state = np.random.get_state()
    np.random.seed(seed)
    out = []
    for _ in range(n_bootstrap):
        idx = np.random.choice(len(values), size=subset_size, replace=True)
        out.append(reduce_fn([values[i] for i in idx]))
    np.random.set_state(state)
    return float(np.mean(out))


def test_best_at_k_reproduces_verl_stream():
    rng = np.random.default_rng(0)
    correct = rng.random((5, 32)) < np.array([[0.02], [0.1], [0.5], [0.0], [1.0]])
    want = np.mean([verl_like_bootstrap(list(row.astype(float)), 32, np.max) for row in correct])
    assert best_at_k_bootstrap(correct, 32) == pytest.approx(want, abs=1e-12)
    ragged = [correct[0][:8], correct[2][:16]]
    want = np.mean([verl_like_bootstrap(list(r.astype(float)), 4, np.max) for r in ragged])
    assert best_at_k_bootstrap(ragged, 4, n_bootstrap=1000, seed=42) == pytest.approx(want, abs=1e-12)


def test_best_at_k_hand_examples_and_expectation():
    assert best_at_k_bootstrap([[1, 1, 1, 1]], 4) == 1.0
    assert best_at_k_bootstrap([0, 0, 0, 0], 4) == 0.0
    row = np.zeros(32, bool)
    row[0] = True  # c = 1 of 32: plain any-correct-of-32 is 1, the bootstrap is ~1 − (31/32)^32
    got = best_at_k_bootstrap(row, 32, n_bootstrap=20000, seed=1)
    expected = 1 - (31 / 32) ** 32
    assert abs(got - expected) < 4 * math.sqrt(expected * (1 - expected) / 20000)
    assert got < pass_at_k(32, 1, 32)
    state = np.random.get_state()[1].copy()
    best_at_k_bootstrap(row, 8)
    assert np.array_equal(np.random.get_state()[1], state)  # global RNG untouched


def test_maj_at_k_bootstrap_matches_verl_procedure():
    answers = ["a", "b", "a", "c", "b", "b", "a", "d"]
    flags = [a == "a" for a in answers]

    def calc_maj(sub):
        counts, first = {}, {}
        for pred, val in sub:
            counts[pred] = counts.get(pred, 0) + 1
            first.setdefault(pred, val)
        return first[max(counts, key=counts.get)]

    data = list(zip(answers, flags))
    want = verl_like_bootstrap(data, 4, calc_maj)
    assert maj_at_k(answers, flags, 4, n_bootstrap=1000, seed=42) == pytest.approx(want, abs=1e-12)
