"""Held-out sets in headline rows are disjoint from the train pool, for EVERY profile (issue 9.1).

Procedural profiles: the real task suite of the profile is built and every evaluation set that
counts in "average"/"pooled" (not named ``*-indist``) must share no problem with the train pool
(canonical expression text and answer). Math profiles (hub data) are built through the same
``build_data`` path on the repository's small fixtures, and the decontamination step is tested
on a deliberate overlap.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from replication.config import available_profiles, load_profile
from replication.evaluate.metrics import IN_DISTRIBUTION_SUFFIX, headline_sets
from replication.tasks.pools import TaskMixSpec, build_tasks, canonical, overlap, twin_overlap
from replication.tasks.procedural import signed_terms, twin_key, twins

FIX = Path(__file__).parent / "fixtures" / "math"
EVAL_FIXTURES = {
    "aime24": FIX / "aime_2024", "aime25": FIX / "aime25.parquet", "amc23": FIX / "amc23_test.parquet",
    "math500": FIX / "math500_test.jsonl", "minerva": FIX / "minerva_test.jsonl",
    "olympiadbench": FIX / "olympiadbench_test.jsonl", "gpqa_diamond": FIX / "gpqa_diamond.csv",
}
TRAIN_FIXTURES = {"dapo17k": FIX / "dapo17k", "dapo17k_en": FIX / "dapo17k_en"}


def _disjoint_or_indist(train_texts, evals, twin=False) -> None:
    """Procedural sets: disjoint up to the order of signed terms (``twin_key``, issue 20.7)."""
    key = (lambda t: twin_key(canonical(t))) if twin else canonical
    train = {key(t) for t in train_texts}
    for name in headline_sets(evals):
        shared = {key(t) for t in evals[name].texts} & train
        assert not shared, f"{name}: {len(shared)} problems also in the train pool, e.g. {sorted(shared)[:3]}"


@pytest.mark.parametrize("profile", available_profiles())
def test_every_profile_headline_sets_are_disjoint_from_training(profile):
    from replication.tasks.data import build_data

    cfg = load_profile(profile)
    if cfg.task.kind == "procedural":
        data = build_data(cfg)
        assert data.eval_sets, f"{profile}: no evaluation sets"
        _disjoint_or_indist(data.train.texts, data.eval_sets, twin=True)
        # The task suite itself, problem by problem (text and answer), with the profile's options.
        opts = {k: v for k, v in cfg.task.options.items() if k in TaskMixSpec.__dataclass_fields__}
        if opts.get("heldout_levels") is not None:
            opts["heldout_levels"] = tuple(opts["heldout_levels"])
        suite = build_tasks(TaskMixSpec(**opts))
        for name in suite.heldout:
            info = suite.levels[name.rsplit("-", 1)[0]]
            if name.endswith(IN_DISTRIBUTION_SUFFIX):
                assert not info.disjoint and overlap(suite, name), name
            else:
                assert info.disjoint and not overlap(suite, name), name
        return
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("math fixtures are parquet: needs pyarrow (math extra)")
    opts = cfg.task.options
    over = {"task.options.train_path": str(TRAIN_FIXTURES[opts["train"]]),
            "task.options.eval_paths": {n: str(EVAL_FIXTURES[n]) for n in opts["eval"]}}
    data = build_data(load_profile(profile, over))
    assert set(data.eval_sets) == set(opts["eval"])
    _disjoint_or_indist(data.train.texts, data.eval_sets)


def test_tiny_levels_are_labelled_in_distribution_and_left_out_of_headline_rows():
    suite = build_tasks(TaskMixSpec(train_sizes={"add1": 200, "mul1": 100, "add2": 300}, heldout_size=20))
    assert set(suite.heldout) == {"add1-indist", "mul1-indist", "add2-heldout"}
    assert overlap(suite, "add1-indist") and overlap(suite, "mul1-indist")  # the whole space is trained
    assert not overlap(suite, "add2-heldout")
    assert headline_sets(suite.heldout) == ["add2-heldout"]


def test_evaluator_average_and_pooled_skip_in_distribution_sets():
    """The evaluator's "average"/"pooled" are computed over headline sets only."""
    from types import SimpleNamespace

    from replication.evaluate.runner import Evaluator

    class Engine:  # every prompt of set "a" correct, of "b-indist" wrong
        def sync_weights(self, model):
            pass

        def generate(self, ids, inputs, answers, counts, sampling, generator=None, seeds=None, logprobs=True):
            rows = np.repeat(np.arange(len(ids)), counts)
            return SimpleNamespace(completions=[inputs[g] for g in rows], row_answers=[answers[g] for g in rows],
                                   group_index=rows)

    def pset(name, ok):
        return SimpleNamespace(ids=[f"{name}{i}" for i in range(3)], inputs=["x"] * 3,
                               answers=["x" if ok else "y"] * 3, sources=["s"] * 3)

    cfg = SimpleNamespace(k=2, temperature=1.0, top_p=1.0, top_k=0, greedy=False)
    class Verifier:
        def is_correct(self, completions, answers, sources):
            return np.array([c == a for c, a in zip(completions, answers)])

    ev = Evaluator(Engine(), {"a-heldout": pset("a", True), "b-indist": pset("b", False)}, Verifier(), cfg)
    import torch

    res = ev(torch.nn.Linear(1, 1))
    assert res["b-indist"]["mean@2"] == 0.0
    assert res["average"]["mean@2"] == 1.0 and res["pooled"]["n_prompts"] == 3


def test_math_training_pool_drops_evaluation_problems(monkeypatch):
    import replication.tasks.math_datasets as md
    from replication.tasks.math_datasets import MathPrompt

    def fake(cfg, **_):
        if cfg.name == "dapo17k":
            return [MathPrompt(f"d/{i}", q, "1", "dapo17k", q) for i, q in
                    enumerate(["What is 1+1?", "Find  x.", "what is 2+2?"])]
        return [MathPrompt("a/0", "What is 2+2?", "4", cfg.name, "What is 2+2?")]

    monkeypatch.setattr(md, "load_math_dataset", fake)
    from replication.tasks.data import build_data

    cfg = load_profile("paper-vip", {"task.options.eval": ["aime24"]})
    data = build_data(cfg)
    assert data.train.ids == ["d/0", "d/1"]  # "what is 2+2?" is the AIME problem up to case/space


def test_twins_are_the_same_signed_terms_in_another_order():
    assert signed_terms("5-0+3=") == ["+5", "-0", "+3"] and signed_terms("4*1*7=") == ["4", "1", "7"]
    assert twin_key("5-0+3=") == twin_key("3+5-0=") != twin_key("5+0-3=")
    assert twins("5-0+3=") == {"5-0+3=", "3+5-0=", "5+3-0=", "3-0+5="}  # a printed sum starts with a + term
    assert twins("4*1*7=") == {"4*1*7=", "4*7*1=", "1*4*7=", "1*7*4=", "7*4*1=", "7*1*4="}
    assert twins("42-25=") == {"42-25="}  # -25+42 cannot be printed: no twin but itself


def test_default_heldout_sets_have_no_twin_in_the_train_pool_and_the_sft_corpus_line():
    """Issue 20.7: 101 of 200 add1t3-heldout problems had a twin (5-0+3 vs 3+5-0) in the RL pool."""
    cfg = load_profile("default")
    opts = {k: v for k, v in cfg.task.options.items() if k in TaskMixSpec.__dataclass_fields__}
    suite = build_tasks(TaskMixSpec(**opts))
    for name in headline_sets(suite.heldout):
        assert overlap(suite, name) == set(), name
        assert twin_overlap(suite.heldout[name].texts, suite.train.texts) == 0

    reserved = suite.reserved_texts("add1t3")  # what the SFT corpus may not hold
    assert all(t in reserved for h in suite.heldout["add1t3-heldout"].texts for t in twins(h))
