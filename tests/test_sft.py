"""SFT warm start: a few steps produce a loadable HF folder and a report; helpers behave."""

import json

import numpy as np
import pytest

from replication.models import build_char_tokenizer, load_policy
from replication.sft import SFTConfig, build_corpus, lr_at, p_histogram, run_sft
from replication.tasks import TaskMixSpec, build_tasks

TASKS = TaskMixSpec(train_sizes={"add1": 50, "add2": 100, "mul2": 50}, heldout_size=20)
TINY = SFTConfig(steps=6, batch_size=16, mix={"add1": 1.0, "add2": 2.0, "mul2": 1.0}, corpus_per_level=200,
                 probe_prompts=24, probe_samples=4, eval_k=2, eval_prompts=8, max_new_tokens=6)


def test_smoke_run_writes_loadable_folder(tmp_path):
    report = run_sft(TINY, tmp_path, TASKS, progress=False)
    model, tok = load_policy(tmp_path)
    assert type(model).__name__ == "LlamaForCausalLM" and tok.eos_token_id is not None
    saved = json.loads((tmp_path / "sft_report.json").read_text())
    assert saved["train_pool"]["n_prompts"] == 24
    assert abs(sum(saved["train_pool"]["hist"].values()) - 1) < 1e-3
    assert set(saved["heldout"]) == {"add1-heldout", "add2-heldout", "mul2-heldout"}
    assert np.isfinite(report["final_loss"]) and report["parameters"] > 0


def test_corpus_labels_only_on_answers_and_no_reserved_texts():
    tok = build_char_tokenizer()
    suite = build_tasks(TASKS)
    c = build_corpus(TINY, suite, tok)
    # add1 (200 problems) has room here: the warm start skips its 20 held-out and 50 train ones
    # and their twins (the same signed terms in another order, issue 20.7)
    reserved = suite.reserved_texts("add1")
    assert len(reserved) > 70 and c.sizes["add1"] == 200 - len(reserved) and c.sizes["mul2"] == 200
    row = 0
    ids, labels = c.input_ids[row], c.labels[row]
    text = tok.decode(ids[c.attention_mask[row].bool()], skip_special_tokens=True)
    answer = tok.decode(labels[labels >= 0], skip_special_tokens=True)
    assert text.endswith("=" + answer) and labels[labels >= 0][-1] == tok.eos_token_id
    assert abs(c.row_prob.sum() - 1) < 1e-9
    # the warm start never sees the held-out expressions of a disjoint level
    seen = {tok.decode(r[m.bool()], skip_special_tokens=True).split("=")[0] + "=" for r, m in zip(c.input_ids, c.attention_mask)}
    assert not seen & set(suite.heldout["add2-heldout"].texts)


def test_lr_schedule_and_histogram():
    cfg = SFTConfig(steps=100, warmup_steps=10, lr=1e-3, lr_min=1e-4)
    assert lr_at(0, cfg) == pytest.approx(1e-4) and lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(99, cfg) == pytest.approx(1e-4, rel=0.05) and lr_at(55, cfg) < lr_at(20, cfg)
    h = p_histogram(np.array([0, 1 / 16, 0.1, 0.5, 0.9, 15 / 16, 1.0, 0.04]))
    assert h == {"<0.05": 0.25, "0.05-0.1": 0.25, "0.1-0.9": 0.125, "0.9-0.95": 0.25, ">0.95": 0.125}


def test_config_validation():
    with pytest.raises(ValueError, match="sft.steps"):
        SFTConfig(steps=0)
    with pytest.raises(ValueError, match="unknown task level"):
        SFTConfig(mix={"nope": 1.0})


def test_sft_task_mix_from_sft_task_options_else_task_options(monkeypatch):
    """The default profile RL-trains on three levels but warm-starts on the full default mix
    (sft.task_options: {}); without sft.task_options the SFT mix is task.options (docs/regime.md)."""
    import replication.sft as sft_mod
    from replication.config import load_profile
    from replication.tasks import TaskMixSpec

    seen = []
    monkeypatch.setattr(sft_mod, "run_sft", lambda cfg, out, tasks, progress=True: seen.append(tasks))
    cfg = load_profile("default")
    assert set(cfg.task.options["train_sizes"]) == {"add1t3", "add2", "add2t3"}
    sft_mod.run_sft_from_profile(cfg, "unused")
    assert seen[-1] == TaskMixSpec()  # the full eight-level mix, as the committed base model
    cfg.sft = {k: v for k, v in cfg.sft.items() if k != "task_options"}
    sft_mod.run_sft_from_profile(cfg, "unused")
    assert seen[-1] == TaskMixSpec(**cfg.task.options)
