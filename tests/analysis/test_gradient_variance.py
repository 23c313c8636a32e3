"""Gradient-variance measurement: the gradient is the trainer's, the statistics are right, an
oracle-like allocation on a constructed batch lowers the noise, and the CLI runs end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from replication.analysis.gradient_variance import (
    DrawSet,
    GradVarConfig,
    PromptBatch,
    build_method,
    draw_gradients,
    flat_policy_gradient,
    replay_history,
    rollout_gradient,
    summarise_draws,
)
from replication.models import load_policy
from replication.rl import PPOConfig, group_advantages
from replication.rollout.base import SamplingConfig
from replication.rollout.hf_engine import HFRolloutEngine
from replication.train.update import ppo_update

PROMPTS = ["12+34=", "7*8=", "3+4=", "55-21=", "6+2=", "9*3=", "41+17=", "8-5="]
ANSWERS = ["46", "56", "7", "34", "8", "27", "58", "3"]


@pytest.fixture()
def policy(base_model_dir):
    torch.manual_seed(0)
    return load_policy(base_model_dir)


def _batch(model, tok, counts, seed=0):
    engine = HFRolloutEngine(model, tok, seed=0)
    q = len(counts)
    gen = torch.Generator().manual_seed(seed)
    return engine.generate([f"p{i}" for i in range(q)], PROMPTS[:q], ANSWERS[:q], np.asarray(counts),
                           SamplingConfig(1.0, 1.0, 0, 6), generator=gen)


def test_gradient_equals_the_trainers_update(policy):
    """SGD(lr=1) + one mini-batch + no clipping of the norm: θ_before − θ_after is exactly the
    gradient the trainer's ppo_update applied; flat_policy_gradient must reproduce it."""
    model, tok = policy
    counts = np.array([4, 2, 6, 4])
    batch = _batch(model, tok, counts)
    rewards = np.random.default_rng(1).integers(0, 2, size=batch.n_rows).astype(float)
    rewards[:2] = [1.0, 0.0]
    adv = group_advantages(rewards, batch.group_index, "grpo")
    cfg = PPOConfig()
    g = flat_policy_gradient(model, batch, adv, cfg, temperature=1.0)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ppo_update(model, opt, None, batch, adv, cfg, temperature=1.0, mini_batches=1, ppo_epochs=1,
               grad_clip=1e12, rng=np.random.default_rng(0))
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    applied = before - after
    assert applied.abs().max() > 0
    assert torch.allclose(g, applied, atol=1e-6, rtol=1e-4)
    # and the zero-advantage skip is exact: the gradient of the full computation is the same
    adv2 = adv.copy()
    adv2[batch.group_index == 0] = 0.0
    g_skip = flat_policy_gradient(model, batch, adv2, cfg, temperature=1.0)
    assert not torch.allclose(g_skip, g)  # the advantages matter


def _synthetic(d: int, scale: float, signal: np.ndarray, seed: int) -> DrawSet:
    rng = np.random.default_rng(seed)
    x = signal[None, :] + scale * rng.normal(size=(d, len(signal)))
    u = signal / np.linalg.norm(signal)
    return DrawSet(gram=x @ x.T, projection=x @ u, nonzero_share=np.full(d, 0.5),
                   departure_share=np.zeros(d), mean=x.mean(0))


def test_statistics_recover_known_variances():
    """tr Cov = P·σ², signal = ‖μ‖², projected variance = σ²; a 4× noise variance shows as ×4."""
    p, d = 400, 200
    mu = np.full(p, 0.1)  # ‖μ‖² = 4
    sets = {"uniform": _synthetic(d, 1.0, mu, 0), "noisy": _synthetic(d, 2.0, mu, 1)}
    s = summarise_draws(sets, n_boot=300).set_index(["method", "metric"])
    assert s.loc[("uniform", "total_variance"), "value"] == pytest.approx(p * 1.0, rel=0.05)
    assert s.loc[("uniform", "signal"), "value"] == pytest.approx(4.0, abs=0.5)
    assert s.loc[("uniform", "projected_variance"), "value"] == pytest.approx(1.0, rel=0.25)
    r = s.loc[("noisy", "total_variance_vs_uniform")]
    assert r["value"] == pytest.approx(4.0, rel=0.05)
    assert r["lo"] < 4.0 < r["hi"] and r["lo"] > 3.0
    assert s.loc[("uniform", "total_variance_vs_uniform"), "value"] == 1.0


def test_oracle_like_allocation_lowers_noise_on_a_constructed_batch(policy):
    """Half the batch can never be solved (p = 0: the verifier rejects everything), half is
    mixed (reward: the completion starts with an odd digit). Uniform wastes half its rollouts on
    zero-advantage groups; the oracle gives those prompts L and the rest to the mixed ones, so
    more rollouts carry signal and the noise-to-signal ratio of the step falls."""
    model, tok = policy
    engine = HFRolloutEngine(model, tok, seed=0)
    q, nbar, lower, upper = 8, 4, 2, 8
    prompts = PromptBatch([f"p{i}" for i in range(q)], PROMPTS, ANSWERS, ["dead" if i % 2 else "live" for i in range(q)])

    class LiveOddDigit:
        @staticmethod
        def is_correct(texts, answers, sources):
            return np.array([s == "live" and t[:1] in "13579" and t[:1] != "" for t, s in zip(texts, sources)])

    verify = LiveOddDigit()

    sampling = SamplingConfig(1.0, 1.0, 0, 6)

    def gradient(counts, gen):
        return rollout_gradient(model, engine, prompts, counts, verify, "grpo", PPOConfig(), sampling, gen)

    uniform = np.full(q, nbar)
    oracle = np.where(np.arange(q) % 2 == 1, lower, 2 * nbar - lower)  # dead: L, live: 2n̄ − L
    assert oracle.sum() == uniform.sum()
    sets = {"uniform": draw_gradients(lambda: uniform, gradient, 30, [0, 1], nbar),
            "oracle": draw_gradients(lambda: oracle, gradient, 30, [0, 2], nbar)}
    s = summarise_draws(sets, n_boot=300).set_index(["method", "metric"])
    assert s.loc[("oracle", "nonzero_share_vs_uniform"), "value"] > 1.2
    assert s.loc[("oracle", "departure_share"), "value"] == 1.0
    assert s.loc[("uniform", "departure_share"), "value"] == 0.0
    assert s.loc[("oracle", "noise_to_signal_vs_uniform"), "value"] < 0.9


def test_replay_warms_stateful_allocators(base_model_dir):
    """Replaying records gives DynaMO exactly the logged rollout counts as history and moves
    the moving-average VIP away from its cold start."""
    from replication.allocation import PromptPool
    from replication.config import load_profile

    cfg = load_profile("default", {"model.path": base_model_dir, "rollout.prompts_per_step": 4})
    ids = [f"q{i}" for i in range(6)]
    pool = PromptPool(tuple(ids), tuple(f"{i}+1=" for i in range(6)))
    records = pd.DataFrame([
        {"step": 0, "prompt_id": "q0", "n": 4, "successes": 0, "loss": 0.0},
        {"step": 0, "prompt_id": "q1", "n": 4, "successes": 2, "loss": 0.1},
        {"step": 1, "prompt_id": "q0", "n": 4, "successes": 4, "loss": 0.0},
        {"step": 1, "prompt_id": "q2", "n": 4, "successes": 1, "loss": -0.1},
        {"step": 5, "prompt_id": "q3", "n": 4, "successes": 1, "loss": 0.0},
    ])
    dyn = build_method("dynamo", cfg, pool)
    assert replay_history(dyn, records, before_step=2) == 2
    g, k = dyn.history(["q0", "q1", "q2", "q3"])
    assert g.tolist() == [8, 4, 4, 0] and k.tolist() == [4, 2, 1, 0]
    ma = build_method("vip-ma", cfg, pool)
    replay_history(ma, records, before_step=2)
    counts = ma.plan(["q0", "q1", "q2", "q3"], 16)
    assert counts.sum() == 16 and counts.tolist() != [4, 4, 4, 4]


def test_config_errors_name_the_bad_setting():
    with pytest.raises(ValueError, match="unknown method"):
        GradVarConfig(methods=("uniform", "nope"))
    with pytest.raises(ValueError, match="draws"):
        GradVarConfig(draws=2)
    assert GradVarConfig(methods=("dynamo",)).methods[0] == "uniform"
    with pytest.raises(ValueError, match="not measured"):
        GradVarConfig(methods=("dynamo",), method_options={"vip-gp": {"bandwidth": 0.4}})


def test_method_options_reach_the_allocator(base_model_dir):
    """The VIP notebook measures vip-gp with its arm's GP settings (params.yaml's bandwidth), not
    the package default; the options go over METHODS' own."""
    from replication.allocation import PromptPool
    from replication.config import load_profile

    cfg = load_profile("default", {"model.path": base_model_dir})
    pool = PromptPool(("a", "b"), ("1+1=", "2+2="))
    default = build_method("vip-gp", cfg, pool)
    tuned = build_method("vip-gp", cfg, pool, options={"bandwidth": 0.4})
    assert tuned.config.bandwidth == 0.4 and default.config.bandwidth != 0.4
    ma = build_method("vip-ma", cfg, pool, options={"bandwidth": 0.4})
    assert ma.config.predictor == "moving-average" and ma.config.bandwidth == 0.4


def test_cli_end_to_end(small_overrides, tmp_path, capsys):
    from replication.__main__ import main
    from replication.report.gradient_variance import lab_comparison, load_gradient_variance, \
        plot_gradient_variance, variance_table

    sets = []
    for k, v in small_overrides.items():
        sets += ["--set", f"{k}={json.dumps(v) if isinstance(v, dict) else v}"]
    base = ["grad-variance", "--profile", "default", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "gv"),
            "--steps", "0,2,4", "--draws", "3", "--reference-draws", "3", "--oracle-samples", "4",
            "--bootstrap", "100"]
    assert main(base + sets) == 0
    df = load_gradient_variance(tmp_path / "gv")
    assert sorted(df["step"].unique()) == [0, 2, 4]
    assert set(GradVarConfig().methods) <= set(df["method"])
    tab = variance_table(df)
    assert len(tab) == 3 * len(GradVarConfig().methods)
    lab = pd.DataFrame([{"method": "dynamo", "metric": "variance_rloo_vs_uniform", "mean": 0.9, "lo": 0.8, "hi": 1.0}])
    cmp = lab_comparison(df, lab, estimator="rloo").set_index("method")
    assert cmp.loc["dynamo", "lab variance_rloo ×unif"].startswith("0.90")
    assert cmp.loc["rollout-gdro", "lab variance_rloo ×unif"] == "not in lab"
    plot_gradient_variance(df, tmp_path / "gv.png")
    assert (tmp_path / "gv.png").stat().st_size > 0
    # a second call reuses the checkpoints (no training): the run folder's log is unchanged
    log = (tmp_path / "run" / "steps.jsonl").read_text()
    assert main(base + ["--methods", "dynamo"] + sets) == 0
    assert (tmp_path / "run" / "steps.jsonl").read_text() == log


def test_an_arm_with_a_kl_term_is_measured_on_its_policy_gradient(small_overrides, tmp_path):
    """GDRO's arms train with β_KL = 0.001 (params.yaml); the measurement leaves the KL term out
    (no reference log-probs) instead of failing on it."""
    from replication.__main__ import main

    sets = []
    for k, v in {**small_overrides, "rl.kl_coef": 0.001}.items():
        sets += ["--set", f"{k}={json.dumps(v) if isinstance(v, dict) else v}"]
    rc = main(["grad-variance", "--profile", "default", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "gv"),
               "--steps", "0", "--draws", "3", "--reference-draws", "3", "--oracle-samples", "4", "--bootstrap", "100",
               "--methods", "dynamo", *sets])
    assert rc == 0
    df = pd.read_csv(tmp_path / "gv" / "gradient_variance.csv")
    assert set(df["method"]) >= {"uniform", "dynamo"} and np.isfinite(df[df["metric"] == "total_variance"]["value"]).all()


def test_cli_rejects_steps_beyond_the_profile(small_overrides, tmp_path, capsys):
    from replication.__main__ import main

    rc = main(["grad-variance", "--run", str(tmp_path / "r"), "--out", str(tmp_path / "o"), "--steps", "0,99999"])
    assert rc == 2
    assert "--steps" in capsys.readouterr().err


def test_the_pool_is_embedded_once_per_measurement(base_model_dir, monkeypatch):
    """embedded_pool embeds the pool once per embedder setting and hands the same vectors to every
    checkpoint's allocator; the allocator then holds exactly what it would have embedded itself;
    methods that embed nothing get the pool unchanged."""
    import replication.allocation.embeddings as emb_mod
    from replication.allocation import PromptPool
    from replication.analysis.gradient_variance import embedded_pool
    from replication.config import load_profile

    cfg = load_profile("default", {"model.path": base_model_dir})
    pool = PromptPool(tuple(f"q{i}" for i in range(6)), tuple(f"{i}+{i}=" for i in range(6)))
    calls = []
    real = emb_mod.make_embedder

    def counting(name, **opts):
        calls.append(name)
        return real(name, **opts)

    memo: dict = {}
    monkeypatch.setattr(emb_mod, "make_embedder", counting)
    first = embedded_pool("vip-gp", pool, {"bandwidth": 0.4}, memo)
    again = embedded_pool("vip-gp", pool, {"bandwidth": 0.4}, memo)  # the next checkpoint
    assert calls == ["hashed-tfidf"] and again.embeddings is first.embeddings
    assert embedded_pool("vip-ma", pool, None, memo) is pool and embedded_pool("dynamo", pool, None, memo) is pool
    embedded_pool("vip-gp", pool, {"embedder_options": {"dim": 32}}, memo)  # another embedder setting
    assert calls == ["hashed-tfidf", "hashed-tfidf"]
    own = build_method("vip-gp", cfg, pool)  # embeds by itself
    given = build_method("vip-gp", cfg, first)
    assert np.array_equal(own._embeddings(), given._embeddings())
