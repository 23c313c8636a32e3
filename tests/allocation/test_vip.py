"""VIP allocators (vip.py), the exact separable solver, and the prompt embedders."""

from __future__ import annotations

import itertools
import socket

import numpy as np
import pytest

from replication.allocation import PromptPool, make_allocator, solve_integer
from replication.allocation.embeddings import make_embedder
from replication.allocation.variance import get_variance_estimator
from replication.allocation.vip import allocate_separable, linear_costs, official_code_options


def cluster_pool(p_of_cluster, per_cluster=20, d=16, seed=0):
    """Orthogonal cluster directions + small noise: the GP can learn p per cluster."""
    rng = np.random.default_rng(seed)
    rows, p = [], []
    for c, pc in enumerate(p_of_cluster):
        centre = np.zeros(d)
        centre[c] = 1.0
        rows.append(centre + 0.05 * rng.normal(size=(per_cluster, d)))
        p += [pc] * per_cluster
    x = np.vstack(rows)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    n = len(x)
    pool = PromptPool(tuple(f"q{i}" for i in range(n)), tuple(f"text {i}" for i in range(n)), x.astype(np.float32))
    return pool, np.array(p)


def rewards_for(rng, p, counts):
    return np.concatenate([(rng.random(c) < pi).astype(float) for pi, c in zip(p, counts)])


def run_steps(alloc, pool, p_true, steps, batch, budget, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        sel = rng.choice(len(pool.ids), batch, replace=False)
        ids = [pool.ids[i] for i in sel]
        counts = alloc.plan(ids, budget)
        out.append((ids, counts, alloc.plan_details()["predicted_p"]))
        alloc.observe(ids, counts, rewards_for(rng, p_true[sel], counts))
    return out


# ----------------------------------------------------------------------------- VIP behaviour


@pytest.mark.parametrize("estimator", ["drgrpo", "rloo"])
def test_vip_gives_more_rollouts_to_uncertain_prompts(estimator):
    pool, p_true = cluster_pool([0.02, 0.5, 0.98])
    alloc = make_allocator("vip", pool=pool, estimator=estimator, lower=4, upper=24)
    run_steps(alloc, pool, p_true, steps=4, batch=30, budget=240)
    ids = list(pool.ids)
    counts = alloc.plan(ids, 8 * len(ids))
    assert alloc.last_mode == "vip"
    mid = counts[p_true == 0.5].mean()
    assert mid > counts[p_true == 0.02].mean() + 2 and mid > counts[p_true == 0.98].mean() + 2
    p_hat = alloc.plan_details()["predicted_p"]
    assert np.abs(p_hat - p_true).mean() < 0.15


def test_vip_allocation_is_the_exact_solver_on_predicted_p():
    pool, p_true = cluster_pool([0.1, 0.4, 0.7], per_cluster=10)
    alloc = make_allocator("vip", pool=pool, estimator="drgrpo", warmup_steps=0)
    run_steps(alloc, pool, p_true, steps=2, batch=15, budget=120)
    ids = list(pool.ids[:12])
    counts = alloc.plan(ids, 96)
    p = np.clip(alloc.plan_details()["predicted_p"], 1e-6, 1 - 1e-6)
    np.testing.assert_array_equal(counts, solve_integer(p * (1 - p), 96, 4, 32, "drgrpo"))


def test_warmup_then_vip():
    pool, p_true = cluster_pool([0.05, 0.5])
    alloc = make_allocator("vip", pool=pool, warmup_steps=2)
    modes = []
    rng = np.random.default_rng(1)
    for _ in range(3):
        ids = list(pool.ids[:7])
        counts = alloc.plan(ids, 60)
        modes.append(alloc.last_mode)
        if alloc.last_mode == "warmup":
            np.testing.assert_array_equal(counts, [9, 9, 9, 9, 8, 8, 8])  # even split, remainder first
        alloc.observe(ids, counts, rewards_for(rng, p_true[:7], counts))
    assert modes == ["warmup", "warmup", "vip"]


def test_degenerate_predictions_fall_back_to_uniform():
    pool, _ = cluster_pool([0.3, 0.6])
    alloc = make_allocator("vip", pool=pool, warmup_steps=0)
    counts = alloc.plan(list(pool.ids[:10]), 80)  # nothing observed: every p is the prior's
    assert alloc.last_mode == "degenerate"
    np.testing.assert_array_equal(counts, np.full(10, 8))
    np.testing.assert_allclose(alloc.plan_details()["predicted_p"], 0.5)
    oracle = make_allocator("oracle", success_probability=lambda pid: 0.3)
    np.testing.assert_array_equal(oracle.plan(["a", "b", "c"], 20), [7, 7, 6])
    assert oracle.last_mode == "degenerate"


def test_hashed_tfidf_embeddings_are_computed_when_the_pool_has_none():
    texts = tuple(f"Compute {i} + {i % 5} = ?" for i in range(12))
    pool = PromptPool(tuple(range(12)), texts)
    alloc = make_allocator("vip", pool=pool)
    emb = alloc.predictor.gp._x.numpy()
    np.testing.assert_allclose(emb, make_embedder("hashed-tfidf")(list(texts)), atol=1e-6)
    alloc.observe([0, 1], [4, 4], np.r_[np.ones(4), np.zeros(4)])
    assert alloc.predict([0])[0] > alloc.predict([1])[0]


def test_moving_average_predictor_needs_no_embeddings():
    pool = PromptPool(("a", "b", "c"), ("", "", ""))
    alloc = make_allocator("vip", pool=pool, predictor="moving-average", warmup_steps=0,
                           embedder="no-such-embedder")  # never called
    alloc.observe(["a", "b"], [4, 4], np.r_[np.ones(4), [1, 0, 1, 0]])
    np.testing.assert_allclose(alloc.predict(["a", "b", "c"]), [1.0, 0.5, 0.75])
    counts = alloc.plan(["a", "b", "c"], 15)
    assert counts[1] == counts.max()


# ----------------------------------------------------------------------------- ablations


@pytest.mark.parametrize("name", ["vip-inverse-accuracy", "vip-inverse-variance"])
def test_ablations_give_corner_solutions(name):
    pool, p_true = cluster_pool([0.05, 0.3, 0.6, 0.9], per_cluster=8)
    alloc = make_allocator(name, pool=pool, warmup_steps=0, lower=4, upper=20)
    run_steps(alloc, pool, p_true, steps=3, batch=20, budget=160)
    ids = list(pool.ids)
    counts = alloc.plan(ids, 8 * len(ids))
    p = np.clip(alloc.plan_details()["predicted_p"], 1e-6, 1 - 1e-6)
    key = np.log(p) if name.endswith("accuracy") else np.log(p * (1 - p))
    # LP corner: all at L or U except at most one, and every U prompt has a lower key than every L
    assert np.sum((counts > 4) & (counts < 20)) <= 1
    assert key[counts == 20].max() <= key[counts == 4].min()
    assert counts.sum() == 8 * len(ids)


def test_vip_ridge_uses_the_ridge_predictor():
    pool, p_true = cluster_pool([0.05, 0.5, 0.95])
    alloc = make_allocator("vip-ridge", pool=pool, predictor_options={"alpha": 0.1})
    assert type(alloc.predictor).__name__ == "RidgePredictor"
    run_steps(alloc, pool, p_true, steps=4, batch=30, budget=240)
    counts = alloc.plan(list(pool.ids), 8 * len(pool.ids))
    assert counts[p_true == 0.5].mean() > counts[p_true != 0.5].mean() + 2


def test_oracle_with_mapping_and_pool():
    pool = PromptPool(("a", "b", "c", "d"), ("",) * 4)
    truth = {"a": 0.5, "b": 0.01, "c": 0.99, "d": 0.3}
    alloc = make_allocator("oracle", pool=pool, success_probability=truth, estimator="rloo")
    counts = alloc.plan(["a", "b", "c", "d"], 32)
    p = np.array(list(truth.values()))
    np.testing.assert_array_equal(counts, solve_integer(p * (1 - p), 32, 4, 32, "rloo"))
    with pytest.raises(ValueError, match="'zz'"):
        alloc.plan(["a", "zz"], 8)
    bare = make_allocator("oracle", success_probability=truth)
    with pytest.raises(ValueError, match="'e'"):
        bare.plan(["a", "e"], 8)


# ----------------------------------------------------------------------------- grpo extension and tilt


def brute_force(costs, budget, lower):
    q, w = costs.shape
    best, arg = np.inf, None
    for js in itertools.product(range(w), repeat=q):
        if sum(js) + q * lower != budget:
            continue
        v = sum(costs[i, j] for i, j in enumerate(js))
        if v < best - 1e-15:
            best, arg = v, np.array(js) + lower
    return best, arg


def cost_of(costs, n, lower):
    return sum(costs[i, k - lower] for i, k in enumerate(n))


@pytest.mark.parametrize("seed", range(4))
def test_allocate_separable_is_exact(seed):
    rng = np.random.default_rng(seed)
    lower, upper, q = 2, 7, 4
    levels = np.arange(lower, upper + 1)
    p = rng.uniform(0.01, 0.99, q)
    grpo = get_variance_estimator("grpo").term(p[:, None] * (1 - p[:, None]), levels[None, :])
    convex = (p * (1 - p))[:, None] * (levels - 1) / levels**2 + 0.01 * np.log(p)[:, None] * levels
    linear = linear_costs(np.log(p), lower, upper)
    for costs in (grpo, convex, linear):
        budget = int(rng.integers(q * lower, q * upper + 1))
        n = allocate_separable(costs, budget, lower)
        assert n.sum() == budget and n.min() >= lower and n.max() <= upper
        assert cost_of(costs, n, lower) == pytest.approx(brute_force(costs, budget, lower)[0], abs=1e-14)


def test_allocate_separable_agrees_with_solve_integer():
    rng = np.random.default_rng(9)
    p = rng.uniform(size=64)
    a = p * (1 - p)
    levels = np.arange(4, 33)
    for est in ("drgrpo", "rloo"):
        costs = get_variance_estimator(est).term(a[:, None], levels[None, :])
        np.testing.assert_array_equal(allocate_separable(costs, 512, 4), solve_integer(a, 512, 4, 32, est))


def test_grpo_estimator_and_tilt_through_the_oracle():
    truth = {0: 0.02, 1: 0.5, 2: 0.9, 3: 0.2}
    p = np.array(list(truth.values()))
    grpo = make_allocator("oracle", success_probability=truth, estimator="grpo", lower=2, upper=8)
    n = grpo.plan([0, 1, 2, 3], 20)
    costs = get_variance_estimator("grpo").term((p * (1 - p))[:, None], np.arange(2, 9)[None, :])
    assert cost_of(costs, n, 2) == pytest.approx(brute_force(costs, 20, 2)[0], abs=1e-15)
    plain = make_allocator("oracle", success_probability=truth, estimator="rloo").plan([0, 1, 2, 3], 40)
    tilted = make_allocator("oracle", success_probability=truth, estimator="rloo", tilt_gamma=7e-3)
    tilted = tilted.plan([0, 1, 2, 3], 40)
    assert tilted[0] > plain[0] and tilted.sum() == 40


# ----------------------------------------------------------------------------- errors and state


def test_value_errors():
    pool, _ = cluster_pool([0.5])
    with pytest.raises(ValueError, match="lower >= 3"):
        make_allocator("vip", pool=pool, estimator="drgrpo", lower=2)
    with pytest.raises(ValueError, match="needs pool"):
        make_allocator("vip")
    with pytest.raises(ValueError, match="estimator"):
        make_allocator("vip", pool=pool, estimator="ppo")
    with pytest.raises(ValueError, match="unknown predictor"):
        make_allocator("vip", pool=pool, predictor="knn")
    with pytest.raises(ValueError, match="top-level"):
        make_allocator("vip", pool=pool, predictor_options={"bandwidth": 0.4})
    with pytest.raises(ValueError, match="unknown option"):
        make_allocator("vip", pool=pool, lengthscale=0.4)
    with pytest.raises(ValueError, match="success_probability"):
        make_allocator("oracle")
    alloc = make_allocator("vip", pool=pool)
    with pytest.raises(ValueError, match="'nope'"):
        alloc.plan(["q0", "nope"], 8)
    with pytest.raises(ValueError, match="'nope'"):
        alloc.observe(["nope"], [4], np.ones(4))
    # the inverse ablations do not need L >= 3: their objective is linear
    make_allocator("vip-inverse-accuracy", pool=pool, estimator="drgrpo", lower=1)


@pytest.mark.parametrize("name,opts", [("vip", {}), ("vip", {"covariance": "carry"}), ("vip-ridge", {}),
                                       ("vip", {"predictor": "moving-average"})])
def test_state_round_trip_gives_identical_later_plans(name, opts):
    pool, p_true = cluster_pool([0.1, 0.5, 0.8], per_cluster=10)
    a = make_allocator(name, pool=pool, seed=3, **opts)
    run_steps(a, pool, p_true, steps=3, batch=12, budget=96, seed=1)
    b = make_allocator(name, pool=pool, seed=99, **opts)
    b.load_state_dict(a.state_dict())
    ra = run_steps(a, pool, p_true, steps=3, batch=12, budget=96, seed=2)
    rb = run_steps(b, pool, p_true, steps=3, batch=12, budget=96, seed=2)
    for (ia, ca, pa), (ib, cb, pb) in zip(ra, rb):
        assert ia == ib
        np.testing.assert_array_equal(ca, cb)
        np.testing.assert_array_equal(pa, pb)
    other, _ = cluster_pool([0.5], per_cluster=5)
    with pytest.raises(ValueError, match="pool"):
        make_allocator(name, pool=other, **opts).load_state_dict(a.state_dict())


def test_official_code_options_build_and_plan():
    pool, p_true = cluster_pool([0.05, 0.5])
    alloc = make_allocator("vip", pool=pool, **official_code_options("drgrpo"))
    run_steps(alloc, pool, p_true, steps=2, batch=10, budget=80)
    assert alloc.last_mode == "warmup"  # 15 warm-up plans
    with pytest.raises(ValueError):
        official_code_options("grpo")


# ----------------------------------------------------------------------------- embedders


def test_hashed_tfidf_is_deterministic_unit_norm_and_offline(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the default embedder must not touch the network")

    monkeypatch.setattr(socket, "socket", no_network)
    texts = ["Solve 12 + 35.", "Solve 12 + 36.", "How many primes are below 100?", ""]
    emb = make_embedder("hashed-tfidf", dim=64)
    x = emb(texts)
    assert x.dtype == np.float32 and x.shape == (4, 64)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(x, make_embedder("hashed-tfidf", dim=64)(texts))
    assert x[0] @ x[1] > x[0] @ x[2]  # lexical neighbours are kernel neighbours
    assert not np.array_equal(x, make_embedder("hashed-tfidf", dim=64, seed=1)(texts))
    svd = make_embedder("hashed-tfidf", dim=64, reduction="svd")(texts)
    assert svd.shape == (4, 3)  # LSA rank is capped at pool size - 1
    np.testing.assert_allclose(np.linalg.norm(svd, axis=1), 1.0, atol=1e-6)


def test_sentence_transformers_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="model_path"):
        make_embedder("sentence-transformers")
    with pytest.raises(ValueError, match="model_path"):
        make_embedder("sentence-transformers", model_path=str(tmp_path / "missing"))
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="sentence-transformers"):
            make_embedder("sentence-transformers", model_path=str(tmp_path))
    with pytest.raises(ValueError, match="unknown embedder"):
        make_embedder("word2vec")


def test_policy_hidden_embedder_with_a_tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg)

    def tokenizer(text):
        return {"input_ids": [1] + [3 + (ord(ch) % 37) for ch in text]}

    emb = make_embedder("policy-hidden", model=model, tokenizer=tokenizer, batch_size=3)
    texts = ["1+2=", "a much longer prompt text", "7*8="]
    x = emb(texts)
    assert x.shape == (3, 32) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
    # right padding must not change a prompt's embedding: alone == inside a padded batch
    np.testing.assert_allclose(emb(["1+2="])[0], x[0], atol=1e-5)
    # reference: mean of the last hidden state over the prompt's tokens
    with torch.no_grad():
        h = model(input_ids=torch.tensor([tokenizer("7*8=")["input_ids"]]), output_hidden_states=True).hidden_states[-1]
    ref = h[0].mean(0).numpy()
    np.testing.assert_allclose(x[2], ref / np.linalg.norm(ref), atol=1e-5)
    with pytest.raises(ValueError, match="model"):
        make_embedder("policy-hidden")
