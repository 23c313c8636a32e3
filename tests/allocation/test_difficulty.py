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
