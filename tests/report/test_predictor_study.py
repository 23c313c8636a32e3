"""Predictor study on synthetic records where a moving average is beatable: success depends on
a prompt's topic, which its text reveals, so the embedding predictors (GP, ridge) predict unseen
prompts far better than the moving average's global mean."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from replication.report import predictor_study
from replication.report.predictor_study import mae_by_step, mae_summary, plot_mae, replay_predictors

TOPICS = {  # topic words → true success probability
    "apple banana cherry orchard": 0.9,
    "zebra yak walrus tundra": 0.1,
    "violin cello oboe concert": 0.5,
}


def synthetic_run(pool_per_topic=30, q=12, steps=15, n=8, seed=0):
    rng = np.random.default_rng(seed)
    ids, texts, p = [], {}, {}
    for t, (words, pt) in enumerate(TOPICS.items()):
        for j in range(pool_per_topic):
            pid = f"t{t}-{j:02d}"
            ids.append(pid)
            texts[pid] = f"{words} item {j}"
            p[pid] = pt
    rows = []
    for step in range(steps):
        for pid in rng.choice(ids, q, replace=False):
            rows.append({"step": step, "prompt_id": pid, "n": n, "successes": int(rng.binomial(n, p[pid]))})
    return pd.DataFrame(rows), texts


@pytest.fixture(scope="module")
def replay():
    recs, texts = synthetic_run()
    return replay_predictors(recs, texts, predictor_options={"gp": {"dtype": "float64"}})


def test_replay_uses_only_earlier_steps(replay):
    first = replay[replay["step"] == 0]
    assert not first["seen"].any()
    assert np.allclose(first[first.predictor == "moving-average"]["predicted"], 0.5)  # no history yet
    assert set(replay["predictor"]) == {"gp", "moving-average", "ridge"}
    assert replay["abs_error"].between(0, 1).all()


def test_embedding_predictors_beat_the_moving_average_on_unseen_prompts(replay):
    s = mae_summary(replay).set_index(["subset", "predictor"])["mae"]
    assert s[("unseen", "gp")] < 0.8 * s[("unseen", "moving-average")]
    assert s[("unseen", "ridge")] < 0.8 * s[("unseen", "moving-average")]
    m = mae_by_step(replay)
    assert set(m["subset"]) == {"all", "seen", "unseen"}


def test_needs_texts_and_one_run(tmp_path, replay):
    recs, texts = synthetic_run(steps=2)
    with pytest.raises(ValueError, match="texts"):
        replay_predictors(recs)
    with pytest.raises(ValueError, match="no text"):
        replay_predictors(recs, {k: v for k, v in list(texts.items())[:5]})
    two = pd.concat([recs.assign(arm="a", seed=0), recs.assign(arm="a", seed=1)])
    with pytest.raises(ValueError, match="several runs"):
        replay_predictors(two, texts)
    ma_only = replay_predictors(recs, predictors=("moving-average",))
    assert set(ma_only["predictor"]) == {"moving-average"}
    plot_mae(replay, tmp_path / "mae.png")
    assert (tmp_path / "mae.png").stat().st_size > 1000


def test_gp_options_keeps_only_gp_settings():
    """A VIP arm's allocator.options mix GP settings with allocation ones; the replay takes the
    GP's only."""
    assert predictor_study.gp_options({"bandwidth": 0.4, "lower": 4, "predictor": "gp"}) == {"bandwidth": 0.4}
    assert predictor_study.gp_options(None) == {}


def test_notebook_overrides_reach_the_predictor_studys_texts(monkeypatch):
    """A task override (here the pool seed) keeps the prompt ids but changes every text: the
    predictor study must embed the texts the runs trained on, so ``prompt_texts`` takes the
    notebook's overrides (the VIP notebook passes them) and the replay embeds those texts."""
    from replication.config import load_profile
    from replication.report import pipeline
    from replication.tasks.data import build_data

    over = {"task.options.seed": 7}
    default, overridden = pipeline.prompt_texts("smoke"), pipeline.prompt_texts("smoke", over)
    assert default.keys() == overridden.keys()
    assert all(default[k] != overridden[k] for k in default)
    trained = build_data(load_profile("smoke", over)).train  # the pool a run with the overrides trains on
    assert overridden == dict(zip(trained.ids, trained.texts))
    ids = list(overridden)[:6]
    recs = pd.DataFrame([{"step": s, "prompt_id": pid, "n": 4, "successes": (s + i) % 5}
                         for s in range(3) for i, pid in enumerate(ids)])
    seen = {}
    real = predictor_study.make_embedder

    def recording(name, **opts):
        embed = real(name, **opts)
        return lambda texts: seen.setdefault("texts", list(texts)) and embed(texts)

    monkeypatch.setattr(predictor_study, "make_embedder", recording)
    replay_predictors(recs, overridden, predictors=("gp",))
    assert seen["texts"] == [overridden[i] for i in ids]
