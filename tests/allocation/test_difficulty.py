"""DifficultyClassifier: bins, window, hysteresis, unseen policy, keyed by id, state."""

import json

import numpy as np
import pytest

from replication.allocation.difficulty import DifficultyClassifier, DifficultyConfig, any_correct


def feed(clf, pid, hits):
    for h in hits:
        clf.update([pid], [h])


def test_bin_edges_and_orientation():
    clf = DifficultyClassifier()
    assert clf.edges == pytest.approx(np.arange(1, 10) / 10)
    # bin 0 = lowest pass rate; an estimate on an edge belongs to the upper bin
    assert [clf.bin_of_score(s) for s in (0.0, 0.05, 0.1, 0.3, 0.55, 0.9, 1.0)] == [0, 0, 1, 3, 5, 9, 9]
    assert DifficultyClassifier(n_bins=4).bin_of_score(0.5) == 2


def test_cumulative_mean_by_default():
    clf = DifficultyClassifier()
    feed(clf, "a", [1, 0, 0, 0, 0, 0, 0, 0, 0, 0])  # 1/10 -> edge 0.1 -> bin 1
    assert clf.score("a") == pytest.approx(0.1)
    assert clf.bins(["a"]).tolist() == [1]
    feed(clf, "a", [0] * 90)  # 1/100: nothing is ever forgotten
    assert clf.score("a") == pytest.approx(0.01)
    assert clf.bins(["a"]).tolist() == [0]


def test_sliding_window_forgets():
    clf = DifficultyClassifier(window=3)
    feed(clf, 7, [1, 1, 1, 0, 0])
    assert clf.score(7) == pytest.approx(1 / 3)
    assert clf.bins([7]).tolist() == [3]
    feed(clf, 7, [0])
    assert clf.score(7) == 0.0 and clf.bins([7]).tolist() == [0]


def test_unseen_policies():
    assert DifficultyClassifier().bins(["new"]).tolist() == [5]  # prior bin default B // 2
    assert DifficultyClassifier(prior_bin=2).bins(["new"]).tolist() == [2]
    assert DifficultyClassifier(unseen="zero_score").bins(["new"]).tolist() == [0]
    assert np.isnan(DifficultyClassifier().score("new"))


def test_hysteresis_delays_moves_both_ways():
    clf = DifficultyClassifier(window=100, hysteresis=0.03)
    feed(clf, "p", [1] * 3 + [0] * 7)  # 0.30 -> bin 3 (first label is raw)
    assert clf.bins(["p"]).tolist() == [3]
    feed(clf, "p", [0])  # 3/11 = 0.273: below edge 0.3 but not by 0.03 -> stays
    assert clf.bins(["p"]).tolist() == [3]
    feed(clf, "p", [0])  # 3/12 = 0.25 < 0.27 -> moves down to bin 2
    assert clf.bins(["p"]).tolist() == [2]
    feed(clf, "p", [1, 1])  # 5/14 = 0.357: above 0.3 (+0.03 = 0.33) -> bin 3
    assert clf.bins(["p"]).tolist() == [3]
    no_h = DifficultyClassifier(window=100)
    feed(no_h, "p", [1] * 3 + [0] * 8)
    assert no_h.bins(["p"]).tolist() == [2]  # 0.273 without hysteresis


def test_hysteresis_multi_bin_jump_lands_by_delta():
    clf = DifficultyClassifier(window=2, hysteresis=0.03)
    feed(clf, "p", [0, 0])  # bin 0
    feed(clf, "p", [1, 1])  # 1.0 -> crossed every edge by more than δ -> bin 9
    assert clf.bins(["p"]).tolist() == [9]


def test_keyed_by_id_not_position():
    rng = np.random.default_rng(0)
    ids = [f"q{i}" for i in range(40)]
    truth = {pid: rng.uniform() for pid in ids}
    a, b = DifficultyClassifier(window=5), DifficultyClassifier(window=5)
    for _ in range(12):
        hits = {pid: rng.uniform() < truth[pid] for pid in ids}
        a.update(ids, [hits[p] for p in ids])
        perm = [ids[i] for i in rng.permutation(len(ids))]
        b.update(perm, [hits[p] for p in perm])
    query = [ids[i] for i in rng.permutation(len(ids))]
    assert a.bins(query).tolist() == b.bins(query).tolist()
    assert np.allclose(a.scores(query), b.scores(query))


def test_state_round_trip_json():
    clf = DifficultyClassifier(window=4, hysteresis=0.03)
    for t in range(6):
        clf.update([1, "x", 3], [t % 2, 1, 0])
    clone = DifficultyClassifier(window=4, hysteresis=0.03)
    clone.load_state_dict(json.loads(json.dumps(clf.state_dict())))
    for t in range(3):
        clf.update([1, "x"], [1, 0])
        clone.update([1, "x"], [1, 0])
    assert clone.bins([1, "x", 3]).tolist() == clf.bins([1, "x", 3]).tolist()
    assert np.allclose(clone.scores([1, "x", 3]), clf.scores([1, "x", 3]))
    with pytest.raises(ValueError, match="different DifficultyConfig"):
        DifficultyClassifier().load_state_dict(clf.state_dict())


def test_any_correct_from_flat_rewards():
    counts = np.array([2, 3, 1])
    rewards = np.array([-1, -1, -1, 1, -1, 0])
    assert any_correct(counts, rewards).tolist() == [False, True, False]


@pytest.mark.parametrize(
    "opts, key",
    [
        ({"n_bins": 0}, "n_bins"),
        ({"window": 0}, "window"),
        ({"hysteresis": -0.1}, "hysteresis"),
        ({"unseen": "mean"}, "unseen"),
        ({"prior_bin": 10}, "prior_bin"),
    ],
)
def test_bad_config_names_key(opts, key):
    with pytest.raises(ValueError, match=key):
        DifficultyClassifier(DifficultyConfig(**opts))


def test_update_validation():
    clf = DifficultyClassifier()
    with pytest.raises(ValueError, match="any_correct"):
        clf.update([1, 2], [1])
    with pytest.raises(ValueError, match="duplicate"):
        clf.update([1, 1], [1, 0])


# --------------------------------------------------------------------------- official-code binning
# kishanpb/verl-gdro, group_dro_grpo.py PassKOnlineClassifier (docs/fidelity/gdro.md #11a); the
# expected bins below are worked out by hand from that code's rules.
CODE_SOFTF = dict(n_bins=8, edges=[0.01, 0.2, 0.4, 0.6, 0.8, 0.99], exclude_extremes=True, window=100,
                  hysteresis=0.03, hysteresis_rule="code", unseen="zero_score")


def test_code_edges_and_excluded_class():
    clf = DifficultyClassifier(**CODE_SOFTF)
    assert clf.excluded_bin == 7 and clf.unseen_bin == 7  # unseen scores 0 -> excluded
    # an estimate on an edge belongs to the upper bin (code: acc < edge)
    assert [clf.bin_of_score(s) for s in (0.005, 0.01, 0.2, 0.5, 0.79, 0.8, 0.99, 0.995)] == [0, 1, 2, 3, 4, 5, 6, 6]
    feed(clf, "p", [1])
    assert clf.bins(["p"]).tolist() == [7]  # 1/1 is exactly 1
    feed(clf, "p", [0])
    assert clf.bins(["p"]).tolist() == [3]  # 1/2
    feed(clf, "q", [0] * 3)
    assert clf.bins(["q"]).tolist() == [7]  # 0/3 is exactly 0


def test_code_window_is_the_last_100_visits():
    clf = DifficultyClassifier(**CODE_SOFTF)
    feed(clf, "p", [0] + [1] * 99)
    # 0.99 is on the edge of bin 6, but from bin 5 the code's hysteresis needs 0.99 + 0.03
    assert clf.score("p") == pytest.approx(0.99) and clf.bins(["p"]).tolist() == [5]
    feed(clf, "p", [1])  # the miss leaves the window: 100/100
    assert clf.score("p") == 1.0 and clf.bins(["p"]).tolist() == [7]


@pytest.mark.parametrize("edges, hits, code_bin, nearest_bin", [
    # up from bin 0 to 0.5 (raw 2): the code measures δ from the FIRST boundary above (0.3)
    ([0.3, 0.48, 0.7], [0, 0, 1], 2, 1),
    # down from 1.0 (bin 3) to 0.5 (raw 1): the code needs δ below 0.52, the edge above raw
    ([0.3, 0.52, 0.7], [1, 1, 1, 0], 3, 2),
])
def test_code_hysteresis_rule_on_multi_bin_jumps(edges, hits, code_bin, nearest_bin):
    out = {}
    for rule in ("code", "nearest"):
        clf = DifficultyClassifier(n_bins=4, edges=edges, window=2, hysteresis=0.03, hysteresis_rule=rule)
        feed(clf, "p", hits)
        out[rule] = clf.bins(["p"]).tolist()[0]
    assert out == {"code": code_bin, "nearest": nearest_bin}


def test_code_hysteresis_keeps_the_last_ranked_bin_through_the_excluded_class():
    opts = dict(n_bins=4, edges=[0.3, 0.74], exclude_extremes=True, window=4, hysteresis=0.03, hysteresis_rule="code")
    clf = DifficultyClassifier(**opts)
    feed(clf, "p", [1, 0])  # 1.0 -> excluded, then 0.5 -> bin 1 (first label)
    assert clf.bins(["p"]).tolist() == [1]
    feed(clf, "p", [1, 1, 1, 1])  # 0.67, 0.75 (< 0.74 + δ: stays 1), 0.75, then 1.0 -> excluded
    assert clf.bins(["p"]).tolist() == [3]
    feed(clf, "p", [0])  # 0.75 again: measured from bin 1, not a fresh first label -> 1
    assert clf.bins(["p"]).tolist() == [1]
    no_h = DifficultyClassifier(**{**opts, "hysteresis": 0.0})
    feed(no_h, "p", [1, 0, 1, 1, 1, 1, 0])
    assert no_h.bins(["p"]).tolist() == [2]  # without hysteresis 0.75 is bin 2
    clone = DifficultyClassifier(**opts)
    clone.load_state_dict(json.loads(json.dumps(clf.state_dict())))
    feed(clf, "p", [1])
    feed(clone, "p", [1])
    assert clone.bins(["p"]).tolist() == clf.bins(["p"]).tolist()


def test_code_rule_unseen_zero_score_anchors_at_bin_0():
    # the code's classify of the unseen prompt stores bin 0 as its last bin: a first visit of 1.0
    # must then pass 0.99 + 0.03, which it cannot
    code = DifficultyClassifier(n_bins=2, edges=[0.99], hysteresis=0.03, hysteresis_rule="code", unseen="zero_score")
    nearest = DifficultyClassifier(n_bins=2, edges=[0.99], hysteresis=0.03, unseen="zero_score")
    feed(code, "p", [1])
    feed(nearest, "p", [1])
    assert code.bins(["p"]).tolist() == [0] and nearest.bins(["p"]).tolist() == [1]


@pytest.mark.parametrize("opts, msg", [
    (dict(n_bins=3, edges=[0.5, 0.4]), "strictly increasing"),
    (dict(n_bins=3, edges=[0.0, 0.5]), "inside"),
    (dict(n_bins=3, edges=[0.5, 1.0]), "inside"),
    (dict(n_bins=3, edges="0.5"), "edges"),
    (dict(n_bins=7, edges=[0.01, 0.2, 0.4, 0.6, 0.8, 0.99], exclude_extremes=True), r"= 8"),
    (dict(n_bins=8, edges=[0.01, 0.2, 0.4, 0.6, 0.8, 0.99]), r"= 7"),
    (dict(n_bins=1, exclude_extremes=True), "exclude_extremes"),
    (dict(hysteresis_rule="verl"), "hysteresis_rule"),
])
def test_code_options_bad_values_name_the_problem(opts, msg):
    with pytest.raises(ValueError, match=msg):
        DifficultyConfig(**opts).validate()


def test_default_edges_with_excluded_class():
    clf = DifficultyClassifier(n_bins=6, exclude_extremes=True)  # 5 ranked bins + class 5
    assert clf.edges == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert DifficultyClassifier().excluded_bin is None


def test_prompt_gdro_code_weights_focus_before_the_mean_1_rescale():
    """The code multiplies q by the focus mask, THEN rescales to mean 1 over the rows (masked rows
    hand their mass to the others); with every row masked every weight is 0."""
    from replication.allocation.prompt_gdro import PromptGDRO, PromptGDROConfig

    pg = PromptGDRO(n_bins=3, mode="q_mean1", exploration="present_bins", focus_map={0: 0.0})
    pg.observe(["a", "b", "c"], [0, 1, 2], [0.0, 0.0, 0.0])  # step 1 > warm-up 0: mask on
    # scores 0 -> q = 1/3 each; mask -> (0, 1/3, 1/3); rows 12, mass 4 * 2/3 -> 1/3 * 12 / (8/3)
    assert pg.weights(["a", "b", "c"], [0, 1, 2], [4, 4, 4]).tolist() == pytest.approx([0.0, 1.5, 1.5])
    assert pg.weights(["a", "b"], [0, 0], [4, 4]).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="classifier.n_bins = 8 but n_bins = 10"):
        PromptGDROConfig(classifier=CODE_SOFTF)
    with pytest.raises(ValueError, match="edges"):
        PromptGDROConfig(n_bins=8, classifier={**CODE_SOFTF, "edges": [0.5]})
    assert PromptGDROConfig(n_bins=8, classifier=CODE_SOFTF).classifier == CODE_SOFTF
