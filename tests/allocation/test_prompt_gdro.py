"""Prompt-GDRO: score EMA, debiasing, ω and q_mean1 weights on hand examples, soft worst group."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replication.allocation.prompt_gdro import PromptGDRO, PromptGDROConfig, soft_worst_group


def test_starts_neutral():
    pg = PromptGDRO()
    assert np.allclose(pg.weights(["a", "b"], [0, 9], [4, 4]), 1.0)
    assert np.allclose(pg.distribution(), 0.1)


def test_score_ema_and_omega_weights_by_hand():
    pg = PromptGDRO(n_bins=3, debias=False)
    # bin 0: losses 1 and 3 -> mean 2; bin 2: 0.5; bin 1 absent -> untouched
    pg.observe(["a", "b", "c"], [0, 0, 2], [1.0, 3.0, 0.5])
    assert pg.scores.tolist() == pytest.approx([0.12 * 2, 0.0, 0.12 * 0.5])
    w = pg.weights(["x", "y", "z"], [0, 1, 2], [2, 4, 6])
    assert w.tolist() == pytest.approx([math.exp(0.65 * 0.24), 1.0, math.exp(0.65 * 0.06)])
    pg.observe(["a"], [0], [0.0])
    assert pg.scores[0] == pytest.approx(0.88 * 0.24)


def test_debias_divides_by_floored_share():
    pg = PromptGDRO(n_bins=2, debias=True, share_floor=0.3, beta=1.0)
    ids = list(range(10))
    bins = [0] * 9 + [1]  # shares 0.9 and 0.1 (floored to 0.3)
    pg.observe(ids, bins, [1.0] * 10)
    assert pg.scores.tolist() == pytest.approx([1 / 0.9, 1 / 0.3])


def test_bin_means_is_what_observe_feeds_the_scores():
    """The debiased bin mean is exposed once (report/gdro_signal.py reads it): 0 and not present
    for absent bins, divided by the floored share under debias, raw without it; with beta = 1 the
    scores after observe are exactly these means."""
    ids, bins, losses = list(range(10)), [0] * 9 + [1], [1.0] * 9 + [2.0]
    pg = PromptGDRO(n_bins=3, debias=True, share_floor=0.3, beta=1.0)
    means, present = pg.bin_means(ids, bins, losses)
    assert present.tolist() == [True, True, False]
    assert means.tolist() == pytest.approx([1 / 0.9, 2 / 0.3, 0.0])
    pg.observe(ids, bins, losses)
    assert pg.scores.tolist() == pytest.approx(means.tolist())
    raw, _ = PromptGDRO(n_bins=3, debias=False).bin_means(ids, bins, losses)
    assert raw.tolist() == pytest.approx([1.0, 2.0, 0.0])
    with pytest.raises(ValueError, match="prompt_losses has 1 entries"):
        pg.bin_means([1, 2], [0, 1], [0.1])


def test_clip_default_keeps_omega_within_cap():
    pg = PromptGDRO(n_bins=2)
    pg.scores = np.array([100.0, -100.0])
    assert pg.clip_value == pytest.approx(math.log(15) / 0.65)
    assert pg.omega().tolist() == pytest.approx([15.0, 1 / 15])
    small_clip = PromptGDRO(n_bins=2, clip=1.0)
    small_clip.scores = np.array([100.0, 0.0])
    assert small_clip.omega()[0] == pytest.approx(math.exp(0.65))


def test_cap_applies_in_omega_mode():
    pg = PromptGDRO(n_bins=2, clip=10.0, omega_max=5.0)
    pg.scores = np.array([10.0, 0.0])
    assert pg.weights([1, 2], [0, 1], [1, 1]).tolist() == pytest.approx([5.0, 1.0])


def test_q_mean1_mode_by_hand():
    pg = PromptGDRO(n_bins=2, gamma=0.0, mode="q_mean1", clip=10.0)
    pg.scores = np.array([math.log(3) / 0.65, 0.0])  # ω = (3, 1) -> q = (0.75, 0.25)
    counts = np.array([2, 6])  # rows: 8; Σ n q = 1.5 + 1.5 = 3
    w = pg.weights(["a", "b"], [0, 1], counts)
    assert w.tolist() == pytest.approx([0.75 * 8 / 3, 0.25 * 8 / 3])
    assert float((w * counts).sum() / counts.sum()) == pytest.approx(1.0)  # mean 1 over ROWS
    assert pg.bin_mass().tolist() == pytest.approx([0.5, 0.5])


def test_q_mean1_gamma_and_cap():
    pg = PromptGDRO(n_bins=4, gamma=0.2, mode="q_mean1", omega_max=1.5, clip=10.0)
    pg.scores = np.array([3.0, 0.0, 0.0, 0.0])
    q = pg.distribution()
    w0 = np.exp(0.65 * 3.0)
    assert q[0] == pytest.approx(0.8 * w0 / (w0 + 3) + 0.05)
    w = pg.weights([1, 2], [0, 1], [1, 1])
    raw = q[[0, 1]] * 2 / q[[0, 1]].sum()
    assert w.tolist() == pytest.approx(np.minimum(raw, 1.5).tolist())


def test_bin_mass_in_omega_mode():
    pg = PromptGDRO(n_bins=3)
    pg.scores = np.array([0.0, math.log(2) / 0.65, 0.0])  # ω = (1, 2, 1)
    pg.weights(["a", "b", "c"], [0, 1, 1], [4, 2, 2])  # mass 4, 8, 0
    assert pg.bin_mass().tolist() == pytest.approx([4 / 12, 8 / 12, 0.0])


def test_state_round_trip():
    a = PromptGDRO(debias=True)
    a.observe(range(5), [0, 1, 1, 3, 9], [0.3, -0.1, 0.2, 0.5, 0.0])
    b = PromptGDRO(debias=True)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for pg in (a, b):
        pg.observe(range(3), [1, 1, 9], [0.1, 0.4, -0.2])
    assert a.weights(range(4), [0, 1, 3, 9], [2, 2, 2, 2]).tolist() == b.weights(
        range(4), [0, 1, 3, 9], [2, 2, 2, 2]
    ).tolist()
    with pytest.raises(ValueError, match="different PromptGDROConfig"):
        PromptGDRO(debias=False).load_state_dict(a.state_dict())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=12),
    st.floats(0.01, 20.0),
)
def test_soft_worst_group_bounds(losses, eta):
    r = soft_worst_group(losses, eta)
    top = max(losses)
    assert top - 1e-9 <= r <= top + math.log(len(losses)) / eta + 1e-9


def test_soft_worst_group_limits():
    assert soft_worst_group([1.0, 1.0], 2.0) == pytest.approx(1.0 + math.log(2) / 2)
    assert soft_worst_group([0.0, 3.0, 1.0], 1e4) == pytest.approx(3.0, abs=1e-3)
    with pytest.raises(ValueError, match="eta"):
        soft_worst_group([1.0], 0.0)


@pytest.mark.parametrize(
    "opts, key",
    [
        ({"n_bins": 0}, "n_bins"),
        ({"beta": 0.0}, "beta"),
        ({"eta": -1.0}, "eta"),
        ({"gamma": 2.0}, "gamma"),
        ({"clip": 0.0}, "clip"),
        ({"omega_max": 0.0}, "omega_max"),
        ({"share_floor": 0.0}, "share_floor"),
        ({"mode": "softmax"}, "mode"),
    ],
)
def test_bad_config_names_key(opts, key):
    with pytest.raises(ValueError, match=key):
        PromptGDRO(PromptGDROConfig(**opts))


def test_bad_inputs():
    pg = PromptGDRO(n_bins=3)
    with pytest.raises(ValueError, match="bins"):
        pg.weights([1, 2], [0, 3], [1, 1])
    with pytest.raises(ValueError, match="counts"):
        pg.weights([1, 2], [0, 1], [1])
    with pytest.raises(ValueError, match="prompt_losses"):
        pg.observe([1, 2], [0, 1], [0.1])
    with pytest.raises(ValueError, match="duplicate"):
        pg.observe([1, 1], [0, 1], [0.1, 0.2])


def test_default_is_the_papers_debiased_gdro():
    assert PromptGDROConfig().debias is True


def test_official_code_options_first_value_no_clip_present_bin_exploration():
    pg = PromptGDRO(n_bins=3, debias=False, first_score="first_value")
    pg.observe(["a", "b"], [0, 2], [2.0, 0.5])
    assert pg.scores.tolist() == pytest.approx([2.0, 0.0, 0.5])  # S = m at first observation
    pg.observe(["a"], [0], [0.0])
    assert pg.scores[0] == pytest.approx(0.88 * 2.0)  # EMA afterwards
    no_clip = PromptGDRO(n_bins=2, clip_scores=False)
    no_clip.scores = np.array([10.0, 0.0])
    assert no_clip.omega()[0] == pytest.approx(math.exp(6.5))  # beyond the default clip ln(15)/0.65
    pres = PromptGDRO(n_bins=4, gamma=0.2, exploration="present_bins")
    q = pres.distribution(np.array([True, True, False, False]))
    assert q.tolist() == pytest.approx([0.8 / 4 + 0.1, 0.8 / 4 + 0.1, 0.2, 0.2])
    with pytest.raises(ValueError, match="exploration"):
        PromptGDRO(exploration="nope")


def test_focus_map_official_code_schedule_by_hand():
    """The code's hardf/softf focus schedule: multiplier 1 through the warm-up, then linear to the
    target over the ramp, applied after the cap; bins outside the map keep their weight."""
    pg = PromptGDRO(n_bins=3, focus_map={"0": 0.0, 2: 0.5}, focus_warmup_steps=2, focus_ramp_steps=4)
    assert pg.config.focus_map == {0: 0.0, 2: 0.5}  # YAML/JSON string keys normalised
    seen = []
    for _ in range(8):
        seen.append(pg.weights(["a", "b", "c"], [0, 1, 2], [4, 4, 4]).tolist())
        pg.observe(["a", "b", "c"], [0, 1, 2], [0.0, 0.0, 0.0])
    # steps observed before each call: 0, 1, 2 -> warm-up; 3..6 -> t = 1/4 .. 1; 7 -> 1
    assert seen[0] == seen[2] == [1.0, 1.0, 1.0]
    assert seen[3] == pytest.approx([0.75, 1.0, 1 - 0.25 * 0.5])
    assert seen[5] == pytest.approx([0.25, 1.0, 1 - 0.75 * 0.5])
    assert seen[6] == seen[7] == pytest.approx([0.0, 1.0, 0.5])
    assert pg.bin_mass().tolist() == pytest.approx([0.0, 1 / 1.5, 0.5 / 1.5])


def test_focus_map_off_by_default_and_state_round_trip_through_json():
    assert PromptGDROConfig().focus_map is None
    assert np.all(PromptGDRO().focus() == 1.0)
    pg = PromptGDRO(n_bins=2, focus_map={1: 0.0}, mode="q_mean1")
    pg.observe(["a"], [1], [0.1])
    state = json.loads(json.dumps(pg.state_dict()))  # int keys become strings in JSON
    other = PromptGDRO(n_bins=2, focus_map={1: 0.0}, mode="q_mean1")
    other.load_state_dict(state)
    assert other.weights(["a", "b"], [0, 1], [4, 4]).tolist() == pg.weights(["a", "b"], [0, 1], [4, 4]).tolist()
    assert other.weights(["a", "b"], [0, 1], [4, 4])[1] == 0.0


@pytest.mark.parametrize("opts, msg", [
    (dict(focus_map={3: 0.0}), "outside"),
    (dict(focus_map={0: -1.0}), "multiplier"),
    (dict(focus_map={0: float("nan")}), "multiplier"),
    (dict(focus_map={"x": 1.0}), "integer bins"),
    (dict(focus_map=[0, 1]), "mapping"),
    (dict(focus_warmup_steps=-1), "focus_warmup_steps"),
    (dict(focus_ramp_steps=1.5), "focus_ramp_steps"),
])
def test_focus_map_bad_values_name_the_problem(opts, msg):
    with pytest.raises(ValueError, match=msg):
        PromptGDROConfig(n_bins=3, **opts)
