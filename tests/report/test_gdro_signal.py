"""Prompt-GDRO signal report (issue 10): measured figures on hand-built per-prompt records."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from replication.report.gdro_signal import signal_conclusion, signal_table


def _records(arm, losses, weights, bins):
    rows = []
    for step, (ls, ws, bs) in enumerate(zip(losses, weights, bins)):
        for i, (l, w, b) in enumerate(zip(ls, ws, bs)):
            rows.append(dict(arm=arm, seed=0, step=step, prompt_id=f"p{i}", loss=l, weight=w, bin=b))
    return rows


def test_signal_table_by_hand():
    # two steps, four prompts: bins 0,0,1,1; bin 0 loss mean 0.1 then 0 (share 0.5 -> debiased 0.2, 0)
    rows = _records("Prompt-GDRO", [[0.1, 0.1, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
                    [[1.0, 1.0, 1.0, 1.0], [1.2, 1.2, 1.0, 1.0]], [[0, 0, 1, 1]] * 2)
    rows += _records("Prompt-GDRO-code", [[0.0] * 4] * 2, [[1.0] * 4, [0.0, 0.0, 1.0, 1.0]], [[0, 0, 9, 9]] * 2)
    rows += [dict(arm="GRPO", seed=0, step=0, prompt_id="p0", loss=0.0, weight=1.0, bin=np.nan)]
    t = signal_table(pd.DataFrame(rows), ["Prompt-GDRO", "Prompt-GDRO-code", "GRPO", "absent"]).set_index("arm")
    assert list(t.index) == ["Prompt-GDRO", "Prompt-GDRO-code"]  # no bins / no records: skipped
    r = t.loc["Prompt-GDRO"]
    assert r["records"] == 8 and r["loss_zero_share"] == pytest.approx(6 / 8)
    # per-step bin means debiased by share 0.5: step 0 -> 0.2, 0; step 1 -> 0, 0
    assert r["bin_mean_abs_median"] == pytest.approx(0.0)
    assert r["bin_mean_abs_p99"] == pytest.approx(np.quantile([0.2, 0, 0, 0], 0.99))
    # replayed S: after step 0, S_0 = 0.12 * 0.2 = 0.024, S_1 = 0; after step 1, S_0 = 0.88 * 0.024
    assert r["score_spread_median"] == pytest.approx(np.median([0.024, 0.88 * 0.024]))
    assert r["score_spread_needed"] == pytest.approx(math.log(1.2) / 0.65)
    assert r["weight_ratio_median"] == pytest.approx(np.median([1.0, 1.2]))
    assert np.isinf(t.loc["Prompt-GDRO-code", "weight_ratio_median"])  # a zero weight


def test_signal_conclusion_states_the_finding_with_the_numbers():
    rows = _records("Prompt-GDRO", [[0.0, 0.01, 0.0, -0.01]] * 3, [[1.0] * 4] * 3, [[0, 0, 1, 1]] * 3)
    rows += _records("Prompt-GDRO-code", [[0.0] * 4] * 2, [[1.0] * 4, [0.0, 0.0, 1.0, 1.0]], [[0, 0, 9, 9]] * 2)
    t = signal_table(pd.DataFrame(rows), ["Prompt-GDRO", "Prompt-GDRO-code"])
    text = signal_conclusion(t)
    assert "zero by construction" in text and "50% of 12 per-prompt losses are exactly 0" in text
    assert "needs 0.28" in text and "Prompt-GDRO-code: median per-step max/min weight ∞" in text
    assert signal_conclusion(t[t["arm"] == "Prompt-GDRO-code"]) == ""  # paper arm missing: no claim


def test_each_arm_is_replayed_under_its_own_options(tmp_path, monkeypatch):
    """The code arm's scores start at the first value (first_value, no clip): replayed under its
    own options its score spread is the debiased first loss, not the paper rule's 0.12 × it.
    Options come from ``configs`` or from the runs' config.json (``runs``; read by
    ``runs.load_config``, here without the run verification these stand-in folders would fail)."""
    import json

    from replication.report import runs as runs_mod

    monkeypatch.setattr(runs_mod, "load_config", lambda d: json.loads((Path(d) / "config.json").read_text()))

    from replication.allocation.prompt_gdro import PromptGDROConfig
    from replication.report.gdro_signal import arm_configs

    rows = _records("Prompt-GDRO-code", [[0.1, 0.1, 0.0, 0.0]], [[1.0] * 4], [[0, 0, 1, 1]])
    prompts = pd.DataFrame(rows)
    paper = signal_table(prompts, ["Prompt-GDRO-code"]).iloc[0]
    assert paper["score_spread_median"] == pytest.approx(0.12 * 0.2)
    code_opts = {"first_score": "first_value", "clip_scores": False, "eta": 0.5, "focus_map": {"0": 0.0}}
    own = signal_table(prompts, ["Prompt-GDRO-code"],
                       configs={"Prompt-GDRO-code": PromptGDROConfig(**code_opts)}).iloc[0]
    assert own["score_spread_median"] == pytest.approx(0.2)
    assert own["score_spread_needed"] == pytest.approx(math.log(1.2) / 0.5)
    runs = []
    for seed in (0, 1):
        d = tmp_path / f"s{seed}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"rl": {"prompt_weights_options": code_opts}}))
        runs.append({"arm": "Prompt-GDRO-code", "seed": seed, "dir": str(d)})
    from_runs = signal_table(prompts, ["Prompt-GDRO-code"], runs=pd.DataFrame(runs)).iloc[0]
    assert from_runs["score_spread_median"] == pytest.approx(0.2)
    (tmp_path / "s1" / "config.json").write_text(json.dumps({"rl": {"prompt_weights_options": {}}}))
    with pytest.raises(ValueError, match="Prompt-GDRO-code.*different"):
        arm_configs(pd.DataFrame(runs), ["Prompt-GDRO-code"])


def test_code_arm_conclusion_states_how_often_its_weights_move():
    """Issue 37.5: "median max/min 1" hid that Prompt-GDRO-code's weights reach max/min >= 1.2 on
    a large share of steps; the conclusion, run on the committed runs, says it, and its share is
    the committed weight-signal table's."""
    from pathlib import Path

    import pandas as pd

    from replication.report import gdro_signal as g
    from replication.report.runs import load_prompts

    root = Path(__file__).resolve().parents[2] / "results" / "gdro"
    dirs = sorted((root / "runs" / "Prompt-GDRO-code").glob("s*"))
    runs = pd.DataFrame({"arm": "Prompt-GDRO-code", "seed": [int(d.name[1:]) for d in dirs], "dir": [str(d) for d in dirs]})
    t = g.signal_table(load_prompts(runs), ["Prompt-GDRO-code"], runs=runs)
    share = pd.read_csv(root / "tables" / "prompt_gdro_weight_signal.csv").set_index("arm").at[
        "Prompt-GDRO-code", "weight_ratio_ge_1_2_share"]
    assert t["weight_ratio_engaged_share"].iloc[0] == share
    text = g.signal_conclusion(pd.concat([t.assign(arm="Prompt-GDRO"), t]), paper_arm="Prompt-GDRO")
    assert f"max/min ≥ 1.2 on {share:.1%} of its steps" in text and "focus schedule" in text
