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


def test_seeds_are_replayed_apart_and_the_gp_tested_over_seeds():
    """issue 20.5: the check carries a CI over seeds. Each seed's run is replayed on its own (a
    prompt seen in seed 0 is unseen in seed 1), the per-seed MAEs are averaged with equal weight,
    and the GP − moving-average difference is paired over seeds."""
    runs = [synthetic_run(steps=6, seed=s) for s in (3, 4, 5)]
    texts = runs[0][1]
    recs = pd.concat([r.assign(arm="RLOO", seed=s) for (r, _), s in zip(runs, (3, 4, 5))], ignore_index=True)
    opts = {"gp": {"dtype": "float64"}}
    replays = predictor_study.replay_seeds(recs, texts, [3, 4, 5], predictor_options=opts)
    assert sorted(replays["seed"].unique()) == [3, 4, 5]
    # the prompts are embedded once for all seeds (TF-IDF's vocabulary is the union's): same embeddings
    from replication.allocation.embeddings import make_embedder

    ids = list(dict.fromkeys(recs["prompt_id"]))
    emb = dict(zip(ids, make_embedder("hashed-tfidf")([texts[i] for i in ids])))
    alone = replay_predictors(recs[recs["seed"] == 4], embeddings=emb, predictor_options=opts)
    same = replays[replays["seed"] == 4].drop(columns="seed").reset_index(drop=True)
    pd.testing.assert_frame_equal(same, alone)  # one seed's replay never sees another seed's records
    by_seed = predictor_study.mae_by_seed(replays)
    summary = predictor_study.seed_mean_summary(by_seed)
    gp_all = summary[(summary.predictor == "gp") & (summary.subset == "all")].iloc[0]
    assert gp_all["seeds"] == 3
    assert gp_all["mae"] == pytest.approx(by_seed[(by_seed.predictor == "gp") & (by_seed.subset == "all")]["mae"].mean())
    paired = predictor_study.paired_mae(by_seed).set_index("subset")
    assert set(paired.index) == {"all", "seen", "unseen"}
    row = paired.loc["unseen"]
    assert row["n"] == 3 and row["lo"] <= row["diff"] <= row["hi"]
    assert row["diff"] == pytest.approx(row["mae"] - row["reference_mae"])
    assert row["hi"] < 0  # the topic words make the GP far better on unseen prompts, on every seed
    with pytest.raises(ValueError, match=r"no records for seed\(s\) \[7\]"):
        predictor_study.replay_seeds(recs, texts, [3, 7])
