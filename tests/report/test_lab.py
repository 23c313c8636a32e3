"""The allocation lab: drift fit recovers a known model; small lab runs; oracle VIP never loses
to uniform on the objective it minimises."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import special

from replication.report.lab import DriftModel, LabConfig, _metrics, fit_drift, plot_lab, run_lab, summarise_lab


def simulate_uniform_run(model: DriftModel, pool=600, q=60, steps=60, n=8, seed=0) -> pd.DataFrame:
    """Per-prompt records of a uniform run on a population that follows ``model`` exactly."""
    rng = np.random.default_rng(seed)
    g = model.initial_logits(rng.uniform(size=pool))
    rows, order = [], []
    for t in range(steps):
        if len(order) < q:
            order = list(rng.permutation(pool))
        ids, order = order[:q], order[q:]
        k = rng.binomial(n, special.expit(g)[ids])
        rows += [{"step": t, "prompt_id": f"q{i}", "n": n, "successes": int(kk)} for i, kk in zip(ids, k)]
        g = g + model.mu + model.sigma * rng.normal(size=pool)
    return pd.DataFrame(rows)


def test_fit_recovers_a_known_population():
    true = DriftModel(alpha=0.8, beta=1.2, mu=0.03, sigma=0.15)
    fit = fit_drift(simulate_uniform_run(true, seed=1))
    assert fit.alpha / (fit.alpha + fit.beta) == pytest.approx(0.4, abs=0.06)
    assert fit.mu == pytest.approx(0.03, abs=0.012)
    assert fit.sigma == pytest.approx(0.15, abs=0.04)
    assert fit.notes["n_pairs"] > 1000 and "Beta(" in fit.describe()


def test_fit_without_revisits_sets_sigma_zero():
    recs = simulate_uniform_run(DriftModel(1.0, 1.0, 0.0, 0.1), pool=400, q=40, steps=8)
    fit = fit_drift(recs)
    assert fit.notes["n_pairs"] == 0 and fit.sigma == 0.0


def test_metrics_on_a_hand_example():
    p = np.array([[[0.5, 0.0]]])
    n = np.array([[[4, 4]]])
    k = np.array([[[2, 0]]])
    m = _metrics(p, n, k)
    assert m["variance_rloo"][0] == pytest.approx(0.25 / 3)
    assert m["variance_drgrpo"][0] == pytest.approx(0.25 * 3 / 16)
    assert m["nonzero_expected"][0] == pytest.approx(4 * (1 - 2 * 0.5**4))
    assert m["nonzero_realised"][0] == 4


@pytest.fixture(scope="module")
def small_lab():
    cfg = LabConfig(n_prompts=48, prompts_per_step=8, mean_rollouts=6, lower=3, upper=12, steps=8,
                    seeds=6, gp_seeds=2)
    return run_lab(DriftModel(0.7, 0.9, 0.02, 0.1), cfg, seed=3), cfg


def test_small_lab_frame(small_lab):
    lab, cfg = small_lab
    assert set(lab["method"]) == set(cfg.methods)
    counts = lab[lab.metric == "variance_rloo"].groupby("method").size()
    assert counts["vip-gp"] == 2 and counts["uniform"] == 6
    u = lab[(lab.method == "uniform") & (lab.metric == "variance_rloo_vs_uniform")]["value"]
    assert np.allclose(u, 1.0)
    s = summarise_lab(lab)
    assert {"mean", "lo", "hi", "n"} <= set(s.columns)


def test_oracle_vip_never_above_uniform_on_its_objective(small_lab):
    lab, _ = small_lab
    v = lab[lab.metric == "variance_rloo"].pivot(index="seed", columns="method", values="value")
    assert (v["vip-oracle"] <= v["uniform"] * (1 + 1e-12)).all()
    assert (v["vip-oracle"] < v["uniform"]).any()
    z = lab[lab.metric == "nonzero_expected_vs_uniform"].groupby("method")["value"].mean()
    assert z["vip-oracle"] > 1.0  # fewer rollouts wasted on all-equal groups


def test_plot_lab(small_lab, tmp_path):
    plot_lab(small_lab[0], tmp_path / "lab.png")
    assert (tmp_path / "lab.png").stat().st_size > 1000


def test_lab_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown lab methods"):
        run_lab(cfg=LabConfig(methods=("uniform", "magic"), seeds=1, steps=1))
    with pytest.raises(ValueError, match="lower"):
        run_lab(cfg=LabConfig(lower=1, seeds=1, steps=1))
    with pytest.raises(ValueError, match="mean_rollouts"):
        run_lab(cfg=LabConfig(mean_rollouts=30, seeds=1, steps=1))
    with pytest.raises(ValueError, match="prompts_per_step"):
        run_lab(cfg=LabConfig(n_prompts=10, seeds=1, steps=1))
