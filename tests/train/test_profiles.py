"""Every shipped profile validates; the dry-run prints a plan without a GPU; chat-model options."""

from __future__ import annotations

import json

import pytest

from replication.__main__ import main
from replication.config import available_profiles, load_profile
from replication.tasks.data import build_data
from replication.tasks.verify import last_number


@pytest.mark.parametrize("name", available_profiles())
def test_profile_validates(name):
    cfg = load_profile(name)
    assert cfg.budget == cfg.rollout.prompts_per_step * cfg.rollout.mean_rollouts


@pytest.mark.parametrize("name", ["paper-vip", "paper-dynamo", "paper-gdro"])
def test_dry_run_paper_profiles(name, capsys):
    assert main(["dry-run", "--profile", name]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["budget_per_step"] == plan["prompts_per_step"] * load_profile(name).rollout.mean_rollouts
    assert plan["memory"]["parameters"] > 1e9  # the papers' 1.5B-8B models, known offline


def test_paper_profiles_follow_the_papers():
    vip, dyn, gdro = (load_profile(n) for n in ("paper-vip", "paper-dynamo", "paper-gdro"))
    assert (vip.rollout.prompts_per_step, vip.rollout.mean_rollouts, vip.rollout.lower) == (256, 8, 4)
    assert vip.rl.estimator == "rloo" and vip.rl.dual_clip == 10.0 and vip.optim.lr == 1e-6
    assert (dyn.rollout.prompts_per_step, dyn.rollout.mean_rollouts, dyn.rollout.lower, dyn.rollout.upper) == (512, 16, 8, 24)
    assert dyn.rl.modulation == "dynamo" and dyn.rl.clip_high == 0.28
    assert (gdro.rollout.mean_rollouts, gdro.rollout.lower, gdro.rollout.upper) == (4, 2, 12)
    assert gdro.rl.kl_coef == 0.001 and gdro.rollout.sampling.top_k == 20 and gdro.eval.k == 8
    assert all(p.optim.fused for p in (vip, dyn, gdro))  # GPU profiles: the fused AdamW kernel


@pytest.mark.parametrize("text, expect", [
    ("The answer is 17.", "17"), ("-3", "-3"), ("2 + 3 = 5", "5"), ("no digits", ""), (None, ""),
    ("x" * 100_000 + " 42", "42"),
])
def test_last_number(text, expect):
    assert last_number(text) == expect


def test_chat_question_prompts_and_last_number_reward():
    cfg = load_profile("smollm2", {"task.options.train_sizes": {"add1": 20}, "task.options.heldout_levels": ["add1"],
                                   "task.options.heldout_size": 5})
    data = build_data(cfg)
    assert data.train.texts[0].startswith("State the final answer")  # the natural question
    assert data.formatter_name == "chat" and data.formatter_options["system"]
    s = data.eval_sets["add1-heldout"]
    ok = data.verifier.is_correct([f"The answer is {s.answers[0]}.", "The answer is 123456."],
                                  [s.answers[0]] * 2, [s.sources[0]] * 2)
    assert ok.tolist() == [True, False]


def test_unknown_task_option_is_a_config_error():
    with pytest.raises(ValueError, match="answer"):
        build_data(load_profile("default", {"task.options.answer": "bogus"}))
