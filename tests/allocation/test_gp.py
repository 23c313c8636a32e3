"""The recursive GP (gp.py) against closed-form numpy, and the other success predictors."""

from __future__ import annotations

import numpy as np
import pytest

from replication.allocation.gp import GPConfig, RecursiveGP, logit_targets, median_heuristic
from replication.allocation.predictors import make_predictor


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def rbf(x: np.ndarray, h: float) -> np.ndarray:
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / (2 * h * h))


def random_steps(rng, n_pool, n_steps, batch, max_n=8):
    steps = []
    for _ in range(n_steps):
        idx = rng.choice(n_pool, batch, replace=False)
        n = rng.integers(1, max_n + 1, batch)
        k = rng.binomial(n, rng.uniform(size=batch))
        steps.append((idx, k, n))
    return steps


def reference_recursion(K, steps, r, prior, eps, carry, set_target):
    """Closed form, one direct solve per step: m ← m + Σ_{·B}(Σ_BB + rI)⁻¹(ĝ_B − m_B)."""
    m = np.full(K.shape[0], prior, dtype=np.float64)
    sigma = K.copy()
    for idx, k, n in steps:
        p = np.clip(k / n, eps, 1 - eps)
        y = np.log(p / (1 - p))
        s = sigma if carry else K
        a = s[np.ix_(idx, idx)] + r * np.eye(len(idx))
        m = m + s[:, idx] @ np.linalg.solve(a, y - m[idx])
        if carry:
            sigma = sigma - s[:, idx] @ np.linalg.solve(a, s[idx, :])
        if set_target:
            m[idx] = y
    return m, sigma


@pytest.mark.parametrize("block_mb", [64.0, 1e-3])  # whole pool in one block / many row blocks
@pytest.mark.parametrize("set_target", [False, True])
@pytest.mark.parametrize("covariance", ["reset", "carry"])
def test_mean_matches_closed_form_over_sequential_updates(covariance, set_target, block_mb):
    rng = np.random.default_rng(0)
    x = unit_rows(rng, 120, 8)
    cfg = GPConfig(dtype="float64", noise=0.3, prior_mean=-1.5, clip_eps=0.02, covariance=covariance,
                   set_observed_to_target=set_target, block_mb=block_mb)
    gp = RecursiveGP(x, cfg)
    steps = random_steps(rng, 120, 5, 25)
    for idx, k, n in steps:
        gp.observe(idx, k, n)
    ref, sigma = reference_recursion(rbf(x, gp.bandwidth), steps, 0.3 + 1e-4, -1.5, 0.02,
                                     covariance == "carry", set_target)
    np.testing.assert_allclose(gp.mean, ref, atol=1e-9)
    probe = np.arange(0, 120, 7)
    np.testing.assert_allclose(gp.posterior_covariance(probe), sigma[np.ix_(probe, probe)], atol=1e-10)


def test_carry_equals_batch_posterior_on_all_observations():
    # The exact Kalman recursion must give the one-shot GP posterior given every observation,
    # repeated prompts included as separate noisy observations.
    rng = np.random.default_rng(1)
    x = unit_rows(rng, 60, 5)
    gp = RecursiveGP(x, GPConfig(dtype="float64", noise=0.5, prior_mean=0.7, covariance="carry"))
    steps = random_steps(rng, 60, 6, 20)
    for idx, k, n in steps:
        gp.observe(idx, k, n)
    obs = np.concatenate([s[0] for s in steps])
    y = np.concatenate([logit_targets(s[1], s[2], 0.01) for s in steps])
    K = rbf(x, gp.bandwidth)
    r = 0.5 + 1e-4
    post = 0.7 + K[:, obs] @ np.linalg.solve(K[np.ix_(obs, obs)] + r * np.eye(len(obs)), y - 0.7)
    np.testing.assert_allclose(gp.mean, post, atol=1e-9)


@pytest.mark.parametrize("block_mb", [64.0, 0.3])
def test_float32_fast_path_close_to_float64(block_mb):
    rng = np.random.default_rng(2)
    x = unit_rows(rng, 3000, 32).astype(np.float32)
    steps = random_steps(rng, 3000, 3, 128)
    gps = [RecursiveGP(x, GPConfig(dtype=dt, block_mb=block_mb)) for dt in ("float32", "float64")]
    for gp in gps:
        for idx, k, n in steps:
            gp.observe(idx, k, n)
    np.testing.assert_allclose(gps[0].mean, gps[1].mean, atol=1e-4)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_fast_kernel_matvec_matches_gpytorch_kernel(scale):
    # The augmented-GEMM kernel must equal gpytorch's RBFKernel, unit norm or not.
    rng = np.random.default_rng(3)
    x = unit_rows(rng, 50, 6) * scale * rng.uniform(0.5, 1.5, size=(50, 1))
    gp = RecursiveGP(x, GPConfig(dtype="float64", bandwidth=0.9, block_mb=1e-4))
    cols = np.array([3, 17, 40])
    v = np.array([0.5, -2.0, 1.0])
    want = gp.kernel(np.arange(50), cols).numpy() @ v
    np.testing.assert_allclose(gp.kernel_matvec(cols, v), want, atol=1e-12)
    np.testing.assert_allclose(gp.kernel(np.arange(50), cols).numpy(), rbf(x, 0.9)[:, cols], atol=1e-12)


def test_median_heuristic():
    rng = np.random.default_rng(4)
    x = unit_rows(rng, 40, 5)
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))[np.triu_indices(40, 1)]
    assert median_heuristic(x) == pytest.approx(np.median(d), rel=1e-12)
    # subsampled: deterministic for a seed, and the median of the chosen rows' distances
    big = unit_rows(rng, 500, 5)
    h1, h2 = median_heuristic(big, 100, seed=7), median_heuristic(big, 100, seed=7)
    rows = np.sort(np.random.default_rng(7).choice(500, 100, replace=False))
    sub = big[rows]
    ds = np.sqrt(((sub[:, None] - sub[None]) ** 2).sum(-1))[np.triu_indices(100, 1)]
    assert h1 == h2 == pytest.approx(np.median(ds), rel=1e-10)
    assert median_heuristic(x[:1]) == 1.0
    assert median_heuristic(np.ones((5, 3))) == 1.0
    assert RecursiveGP(x, GPConfig()).bandwidth == pytest.approx(np.median(d), rel=1e-12)
    assert RecursiveGP(x, GPConfig(bandwidth=0.4)).bandwidth == 0.4


def test_logit_clipping():
    eps = 0.01
    g = logit_targets(np.array([0, 8, 4, 3]), np.array([8, 8, 8, 4]), eps)
    np.testing.assert_allclose(g, [np.log(eps / (1 - eps)), np.log((1 - eps) / eps), 0.0, np.log(3)])
    assert np.all(np.isfinite(logit_targets(np.array([0, 1]), np.array([1, 1]), 1e-6)))


def test_prior_prediction_and_zero_count_prompts_are_skipped():
    rng = np.random.default_rng(5)
    x = unit_rows(rng, 30, 4)
    a = RecursiveGP(x, GPConfig(prior_mean=-2.0, dtype="float64"))
    np.testing.assert_allclose(a.predict(np.arange(30)), 1 / (1 + np.exp(2.0)))
    b = RecursiveGP(x, GPConfig(prior_mean=-2.0, dtype="float64"))
    a.observe(np.array([1, 2, 3]), np.array([2, 0, 5]), np.array([4, 0, 8]))
    b.observe(np.array([1, 3]), np.array([2, 5]), np.array([4, 8]))
    np.testing.assert_array_equal(a.mean, b.mean)
    with pytest.raises(ValueError, match="same prompt twice"):
        a.observe(np.array([1, 1]), np.array([0, 1]), np.array([2, 2]))


@pytest.mark.parametrize("covariance", ["reset", "carry"])
def test_state_round_trip(covariance):
    rng = np.random.default_rng(6)
    x = unit_rows(rng, 80, 6)
    steps = random_steps(rng, 80, 4, 15)
    a = RecursiveGP(x, GPConfig(covariance=covariance))
    for s in steps[:2]:
        a.observe(*s)
    # a different configured bandwidth is overridden by the saved one
    b = RecursiveGP(x, GPConfig(covariance=covariance, bandwidth=0.123))
    b.load_state_dict(a.state_dict())
    assert b.bandwidth == a.bandwidth
    for s in steps[2:]:
        a.observe(*s)
        b.observe(*s)
    np.testing.assert_array_equal(a.mean, b.mean)
    with pytest.raises(ValueError, match="covariance"):
        other = "carry" if covariance == "reset" else "reset"
        RecursiveGP(x, GPConfig(covariance=other)).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="pool has|prompts"):
        RecursiveGP(x[:10], GPConfig(covariance=covariance)).load_state_dict(a.state_dict())


@pytest.mark.parametrize(
    "bad", [{"bandwidth": 0.0}, {"noise": -1.0}, {"noise": 0.0, "jitter": 0.0}, {"clip_eps": 0.5},
            {"covariance": "full"}, {"dtype": "float16"}]
)
def test_gp_config_validation(bad):
    with pytest.raises(ValueError):
        RecursiveGP(np.eye(3), GPConfig(**bad))


# ----------------------------------------------------------------------------- other predictors


def test_ridge_equals_closed_form_refit():
    rng = np.random.default_rng(7)
    x = unit_rows(rng, 50, 4)
    steps = random_steps(rng, 50, 3, 12)
    pr = make_predictor("ridge", embeddings=x, alpha=0.7)
    np.testing.assert_allclose(pr.predict(np.arange(5)), 0.5)  # prior before any data
    for s in steps:
        pr.observe(*s)
    rows = np.concatenate([s[0] for s in steps])
    y = np.concatenate([logit_targets(s[1], s[2], 0.01) for s in steps])
    xa = np.hstack([x[rows], np.ones((len(rows), 1))])
    reg = np.diag([0.7] * 4 + [0.0])
    w = np.linalg.solve(xa.T @ xa + reg, xa.T @ y)
    want = 1 / (1 + np.exp(-(np.hstack([x, np.ones((50, 1))]) @ w)))
    np.testing.assert_allclose(pr.predict(np.arange(50)), want, atol=1e-10)


def test_ridge_decay_and_probability_target():
    rng = np.random.default_rng(8)
    x = unit_rows(rng, 20, 3)
    pr = make_predictor("ridge", embeddings=x, alpha=0.0, decay=1e-9, target="probability")
    pr.observe(np.arange(20), np.zeros(20, int), np.full(20, 4))
    pr.observe(np.arange(20), np.full(20, 3), np.full(20, 4))  # old data forgotten
    np.testing.assert_allclose(pr.predict(np.arange(20)), 0.75, atol=1e-6)
    with pytest.raises(ValueError, match="decay"):
        make_predictor("ridge", embeddings=x, decay=0.0)


def test_moving_average():
    ema = make_predictor("moving-average", n_pool=5, ema=0.5)
    np.testing.assert_allclose(ema.predict(np.arange(5)), 0.5)
    ema.observe(np.array([0, 1]), np.array([4, 0]), np.array([4, 4]))
    ema.observe(np.array([0]), np.array([0]), np.array([4]))
    # prompt 0: first value 1.0 taken as is, then 0.5·1 + 0.5·0; unseen prompts: mean of rates
    np.testing.assert_allclose(ema.predict(np.array([0, 1, 2])), [0.5, 0.0, (1 + 0 + 0) / 3])
    run = make_predictor("moving-average", n_pool=3, ema=None, unseen="prior", prior_p=0.2)
    run.observe(np.array([0]), np.array([1]), np.array([4]))
    run.observe(np.array([0, 1]), np.array([3, 2]), np.array([4, 0]))  # n=0 is skipped
    np.testing.assert_allclose(run.predict(np.arange(3)), [0.5, 0.2, 0.2])
    st = run.state_dict()
    again = make_predictor("moving-average", n_pool=3, ema=None, unseen="prior", prior_p=0.2)
    again.load_state_dict(st)
    np.testing.assert_array_equal(again.predict(np.arange(3)), run.predict(np.arange(3)))


def test_make_predictor_errors():
    with pytest.raises(ValueError, match="unknown predictor"):
        make_predictor("knn", n_pool=3)
    with pytest.raises(ValueError, match="unknown option"):
        make_predictor("ridge", embeddings=np.eye(3), lengthscale=1.0)
    with pytest.raises(ValueError, match="needs embeddings"):
        make_predictor("ridge", n_pool=3)
    with pytest.raises(ValueError, match="unknown option"):
        make_predictor("gp", embeddings=np.eye(3), alpha=1.0)
