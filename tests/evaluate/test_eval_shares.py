"""How the evaluator spreads the held-out prompts over the ranks (Evaluator.shares): the sets'
prompts in set order form one list cut into contiguous shares, one per engine group, so that
several small sets (a rehearsal's one problem per set) keep every rank busy, while each set comes
back whole and in order when gathered in rank order."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from replication.evaluate.runner import Evaluator
from replication.train.distributed import World


def _sets(*sizes: int) -> dict:
    return {f"set{j}": SimpleNamespace(ids=[f"s{j}p{i}" for i in range(n)]) for j, n in enumerate(sizes)}


def _shares(sets: dict, size: int, group_size: int = 1) -> list[dict[str, range]]:
    return [Evaluator(None, sets, None, None, world=World(rank=r, size=size), group_size=group_size).shares()
            for r in range(size)]


@pytest.mark.parametrize("sizes", [(1,) * 7, (3, 2), (5,), (0, 4, 1), (64, 1, 1, 30), (1,)])
@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_every_prompt_once_in_set_order(sizes, size):
    sets = _sets(*sizes)
    shares = _shares(sets, size)
    for name, data in sets.items():
        got = [i for s in shares for i in s[name]]  # rank order
        assert got == list(range(len(data.ids))), (name, got)
    load = [sum(len(r) for r in s.values()) for s in shares]
    assert max(load) - min(load) <= 1  # balanced over all the sets together


def test_one_process_takes_every_set_whole():
    sets = _sets(3, 70, 1)
    (share,) = _shares(sets, 1)
    assert share == {name: range(len(d.ids)) for name, d in sets.items()}


def test_one_problem_per_set_spreads_over_the_ranks():
    """A rehearsal's seven one-problem sets on 2 ranks: 4 and 3 sets, not 7 and 0 (each set cut on
    its own gave rank 0 every problem and left rank 1 idle)."""
    shares = _shares(_sets(*(1,) * 7), 2)
    assert [sorted(n for n, r in s.items() if len(r)) for s in shares] == [
        ["set0", "set1", "set2", "set3"], ["set4", "set5", "set6"]]


def test_ranks_sharing_an_engine_share_their_prompts():
    shares = _shares(_sets(2, 3), 4, group_size=2)
    assert shares[0] == shares[1] and shares[2] == shares[3] and shares[0] != shares[2]
    assert [len(r) for r in shares[0].values()] + [len(r) for r in shares[2].values()] == [2, 1, 0, 2]


def test_call_generates_each_rank_s_share(monkeypatch):
    """__call__ asks the engine for this rank's share of each set only, and every set's counts come
    back whole (the gather's other part stands in for the other rank)."""
    calls = []

    class Engine:
        def sync_weights(self, model):
            pass

        def generate(self, ids, inputs, answers, counts, sampling, generator=None, seeds=None, logprobs=True):
            calls.append(list(ids))
            rows = np.repeat(np.arange(len(ids)), counts)
            return SimpleNamespace(completions=["1"] * len(rows), row_answers=["1"] * len(rows), group_index=rows)

    class Verifier:
        def is_correct(self, completions, answers, sources):
            return [True] * len(completions)

    def data(n, j):
        return SimpleNamespace(ids=[f"s{j}p{i}" for i in range(n)], inputs=["x"] * n, answers=["1"] * n,
                               sources=["s"] * n)

    sets = {"a": data(1, 0), "b": data(1, 1), "c": data(1, 2)}
    world = World(rank=1, size=2)
    # rank 1's view of a gather: rank 0 generated the other part of the set (empty if none)
    monkeypatch.setattr(World, "gather_arrays", lambda self, part, lengths=None: [np.full(1 - len(part), 2.0), part])
    monkeypatch.setattr(World, "concat", lambda self, part, lengths=None: np.concatenate(
        [np.full(1 - len(part), 2.0), part]))
    model = SimpleNamespace(training=False, eval=lambda: None)
    cfg = SimpleNamespace(k=2, temperature=1.0, top_p=1.0, top_k=0, greedy=False, bootstrap=0)
    out = Evaluator(Engine(), sets, Verifier(), cfg, world=world, max_new_tokens=4)(model, seed=0)
    assert calls == [["s2p0"]]  # rank 1 of 2: the third set's only problem
    assert all(out[name]["mean@2"] == 1.0 and out[name]["n_prompts"] == 1 for name in sets)


class _Recorder:
    """An engine that records each call's prompt ids and seeds; sample j of a prompt succeeds
    iff (seed + j) is even, so a result depends on the prompt's own seed only."""

    def __init__(self):
        self.calls = []

    def sync_weights(self, model):
        pass

    def generate(self, ids, inputs, answers, counts, sampling, generator=None, seeds=None, logprobs=True):
        self.calls.append((list(ids), [int(x) for x in seeds]))
        rows = np.repeat(np.arange(len(ids)), counts)
        j = np.concatenate([np.arange(c) for c in counts])
        ok = [str((int(seeds[g]) + int(i)) % 2 == 0) for g, i in zip(rows, j)]
        return SimpleNamespace(completions=ok, row_answers=ok, group_index=rows)


class _Truth:
    def is_correct(self, completions, answers, sources):
        return [c == "True" for c in completions]


def _math_sets(*sizes):
    return {f"set{j}": SimpleNamespace(ids=[f"s{j}p{i}" for i in range(n)], inputs=["x"] * n, answers=["a"] * n,
                                       sources=["s"] * n) for j, n in enumerate(sizes)}


def _evaluate(sets, chunk=64):
    engine = _Recorder()
    cfg = SimpleNamespace(k=3, temperature=1.0, top_p=1.0, top_k=0, greedy=True, bootstrap=0)
    model = SimpleNamespace(training=False, eval=lambda: None)
    out = Evaluator(engine, sets, _Truth(), cfg, max_new_tokens=4, chunk_prompts=chunk)(model, seed=5)
    return engine.calls, out


def test_small_sets_share_one_engine_call_with_their_own_seeds():
    """A few small sets (a rehearsal's one problem per set) decode together: one call for the
    samples and one for greedy, each prompt seeded by its own set's stream, so the scores are
    those of one call per set."""
    sets = _math_sets(1, 2, 1)
    calls, merged = _evaluate(sets)
    assert len(calls) == 2 and calls[0][0] == ["s0p0", "s1p0", "s1p1", "s2p0"]
    per_set_calls, per_set = _evaluate(sets, chunk=1)  # 1 prompt per call: set by set, prompt by prompt
    assert len(per_set_calls) == 8 and all(len(c[0]) == 1 for c in per_set_calls)
    assert sorted(s for c in per_set_calls for s in c[1]) == sorted(s for c in calls for s in c[1])
    assert merged == per_set


def test_large_sets_go_set_by_set():
    """Sets that do not fit one call together keep today's calls: set by set, chunk by chunk."""
    calls, _ = _evaluate(_math_sets(40, 30))
    assert [len(c[0]) for c in calls] == [40, 40, 30, 30]  # each set's samples, then its greedy pass
    calls, _ = _evaluate(_math_sets(40, 30), chunk=32)
    assert [len(c[0]) for c in calls] == [32, 8, 32, 8, 30, 30]  # chunk by chunk
