"""VIP's Maj@32 and "Pass@32" (verl's bootstrapped maj@k and best@k) reach the evaluation's output
(``eval.bootstrap``; issue 36's rehearsal found them defined in evaluate/metrics.py and computed
nowhere): each prompt's samples are scored and voted in the engine's order, and a set's figure is
the average over its prompts of the functions verl's own numbers are checked against."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from replication.evaluate.metrics import best_at_k_bootstrap, maj_at_k
from replication.evaluate.runner import Evaluator

COMPLETIONS = {  # prompt id -> its k = 4 samples, in the order the engine returns them
    "a": ["7", "7", "3", ""],      # majority 7 (right): maj 1 without bootstrap
    "b": ["5", "9", "9", "9"],     # majority 9 (wrong), one right sample
    "c": ["", "", "1", "2"],       # no answer wins the vote
}
ANSWERS = {"a": "7", "b": "5", "c": "2"}


class Engine:
    def sync_weights(self, model):
        pass

    def generate(self, ids, inputs, answers, counts, sampling, generator=None, seeds=None, logprobs=True):
        comps = [c for i in ids for c in COMPLETIONS[i][: int(counts[list(ids).index(i)])]]
        return SimpleNamespace(completions=comps, group_index=np.repeat(np.arange(len(ids)), counts),
                               row_answers=[a for a, n in zip(answers, counts) for _ in range(n)])


class Verifier:
    def is_correct(self, completions, answers, sources):
        return np.array([c == a for c, a in zip(completions, answers)])

    def extracted(self, completions):
        return [c or None for c in completions]


class Model:
    training = False

    def eval(self):
        pass


def _evaluate(bootstrap: int) -> dict:
    ids = list(COMPLETIONS)
    sets = {"set-heldout": SimpleNamespace(ids=ids, inputs=ids, answers=[ANSWERS[i] for i in ids],
                                           sources=["s"] * 3)}
    cfg = SimpleNamespace(k=4, temperature=1.0, top_p=1.0, top_k=0, greedy=False, bootstrap=bootstrap)
    return Evaluator(Engine(), sets, Verifier(), cfg, max_new_tokens=4)(Model(), seed=0)


def test_best_and_maj_at_k_are_verls_bootstrap_over_each_prompts_samples():
    row = _evaluate(1000)["set-heldout"]
    ok = [np.array([c == ANSWERS[i] for c in COMPLETIONS[i]]) for i in COMPLETIONS]
    votes = [[c or None for c in COMPLETIONS[i]] for i in COMPLETIONS]
    assert row["best@4"] == pytest.approx(best_at_k_bootstrap(ok, 4, 1000))
    assert row["maj@4"] == pytest.approx(np.mean([maj_at_k(v, o.tolist(), 4, 1000) for v, o in zip(votes, ok)]))
    assert 0 < row["maj@4"] < row["best@4"] < 1  # a, b sometimes right; the vote loses b's right sample
    assert row["mean@4"] == pytest.approx((2 / 4 + 1 / 4 + 1 / 4) / 3)
    # without resampling the vote is a's 7 (right), b's 9 and c's None (wrong): verl's plain maj@4
    assert np.mean([maj_at_k(v, o.tolist(), 4) for v, o in zip(votes, ok)]) == pytest.approx(1 / 3)
    result = _evaluate(1000)
    assert set(result["average"]) >= {"best@4", "maj@4"} and result["average"]["maj@4"] == row["maj@4"]


def test_without_bootstrap_the_output_is_unchanged():
    row = _evaluate(0)["set-heldout"]
    assert set(row) == {"mean@4", "pass@4", "pass@1", "n_prompts"}


def test_a_negative_bootstrap_is_refused_before_any_compute():
    from replication.config import ConfigError, load_profile

    with pytest.raises(ConfigError, match="eval.bootstrap"):
        load_profile("smoke", {"eval.bootstrap": -1})
    assert load_profile("paper-vip").eval.bootstrap == 1000 and load_profile("paper-dynamo").eval.bootstrap == 0


def test_the_math_verifier_votes_on_normalised_extracted_answers():
    from replication.tasks.math_reward import MathRewardConfig, MathVerifier

    v = MathVerifier(MathRewardConfig(extraction="boxed"))
    try:
        got = v.extracted(["so \\boxed{7}", "no box here", "\\boxed{ 7 }"])
    finally:
        v.close()
    assert got[1] is None and got[0] == got[2] == "7"
