"""Evaluation asks the engine for completions only (issue 19, point 5): with the vLLM engine and
``old_logprobs=recompute`` (the default) no trainer log-prob pass runs during an evaluation,
while training's generate still recomputes π_old."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from replication.evaluate.runner import Evaluator

from .vllm_fakes import SAMPLING, FakeVLLM, TinyLM, make_engine


class Verifier:
    def is_correct(self, completions, answers, sources):
        return np.array([c.endswith(a) for c, a in zip(completions, answers)])


def _eval_sets():
    return {name: SimpleNamespace(ids=[f"{name}{i}" for i in range(5)],
                                  inputs=["ab", "c", "de", "fgh", "i"], answers=["1"] * 5,
                                  sources=["s"] * 5)
            for name in ("x-heldout", "y-indist")}


def _counting_recompute(monkeypatch, engine):
    """Count the engine's recompute calls and every ``token_logprobs_and_entropy`` pass."""
    counts = {"recompute": 0, "logprob_passes": 0}
    recompute = engine.recompute_old_logprobs

    def counted_recompute(*a, **kw):
        counts["recompute"] += 1
        return recompute(*a, **kw)

    import replication.rl as rl

    passes = rl.token_logprobs_and_entropy

    def counted_passes(*a, **kw):
        counts["logprob_passes"] += 1
        return passes(*a, **kw)

    monkeypatch.setattr(engine, "recompute_old_logprobs", counted_recompute)
    monkeypatch.setattr(rl, "token_logprobs_and_entropy", counted_passes)
    return counts


def test_evaluation_runs_no_old_logprob_pass(monkeypatch):
    policy = TinyLM(vocab=93, seed=1)
    engine = make_engine(old_logprobs="recompute", llm=FakeVLLM(model=TinyLM(vocab=93, seed=2)))
    engine.policy = policy
    counts = _counting_recompute(monkeypatch, engine)
    cfg = SimpleNamespace(k=3, temperature=1.0, top_p=1.0, top_k=0, greedy=True)
    result = Evaluator(engine, _eval_sets(), Verifier(), cfg, max_new_tokens=4)(policy, seed=0)
    assert result["x-heldout"]["n_prompts"] == 5 and "greedy" in result["x-heldout"]
    n_calls = len(engine.llm.calls)
    assert n_calls >= 3  # sampled and greedy (the two small sets in one call each), plus the sync check's probe
    assert counts == {"recompute": 0, "logprob_passes": 0}
    # the control: a training rollout from the same engine recomputes π_old (one pass)
    engine.generate(["a"], ["xy"], ["1"], np.array([2]), SAMPLING,
                    generator=torch.Generator().manual_seed(0))
    assert counts == {"recompute": 1, "logprob_passes": 1}


def test_completions_only_gives_the_same_samples():
    """``logprobs=False`` changes what is computed, never what is drawn."""
    engine = make_engine(old_logprobs="recompute")
    engine.policy = TinyLM(vocab=93)
    args = (["a", "b"], ["xy", "z"], ["1", "2"], np.array([3, 2]), SAMPLING)
    full = engine.generate(*args, seeds=np.array([10, 20]))
    only = engine.generate(*args, seeds=np.array([10, 20]), logprobs=False)
    assert only.completions == full.completions and torch.equal(only.input_ids, full.input_ids)
    assert not torch.equal(only.old_logprobs, full.old_logprobs)  # vLLM's, not the trainer's
