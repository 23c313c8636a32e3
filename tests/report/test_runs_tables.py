"""Loading exported runs into tidy frames, and the per-arm / vs-baseline tables."""

from __future__ import annotations

import pandas as pd
import pytest

from replication.report.runs import list_runs, load_eval, load_prompts, load_steps
from replication.report.summary import summary_rows
from replication.report.tables import (
    arm_summary,
    arm_table,
    compare_to_baseline,
    default_metrics,
    write_summary_json,
    write_tables,
)

from .conftest import ARMS, SEEDS, SETS, STEPS, Q


def test_load_eval_is_tidy(results_dir):
    ev = load_eval(results_dir)
    assert list(ev.columns) == ["arm", "seed", "phase", "set", "metric", "value"]
    assert set(ev["arm"]) == set(ARMS) and set(ev["seed"]) == set(SEEDS)
    assert set(ev["phase"]) == {"before", "after"}
    assert set(ev["set"]) == set(SETS) | {"average", "pooled"}
    assert default_metrics(ev) == ["mean@4", "pass@4"]
    one = ev[(ev.arm == "vip") & (ev.seed == 1) & (ev.phase == "after") & (ev.set == "average")
             & (ev.metric == "mean@4")]
    assert len(one) == 1


def test_list_runs_steps_prompts(results_dir):
    runs = list_runs(results_dir)
    assert len(runs) == len(ARMS) * len(SEEDS)
    assert runs["allocator_share"].iloc[0] == pytest.approx(STEPS * 0.01 / 10.0)
    steps = load_steps(results_dir)
    assert len(steps) == len(runs) * STEPS and {"arm", "seed", "grad_norm"} <= set(steps.columns)
    prompts = load_prompts(results_dir)
    assert len(prompts) == len(runs) * STEPS * Q
    assert prompts["predicted_p"].notna().sum() == len(SEEDS) * STEPS * Q  # only the vip arm logs p
    assert (prompts["rate"] == prompts["successes"] / prompts["n"]).all()


def test_loading_from_run_grid_frame_keeps_display_names(results_dir):
    grid = pd.DataFrame({"arm": ["RLOO+VIP", "RLOO+VIP"], "seed": [0, 1],
                         "dir": [str(results_dir / "vip" / "s0"), str(results_dir / "vip" / "s1")]})
    assert set(load_eval(grid)["arm"]) == {"RLOO+VIP"}


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no runs"):
        load_eval(tmp_path)


def test_arm_table_and_comparison(results_dir, tmp_path):
    ev = load_eval(results_dir)
    summary = arm_summary(ev)
    assert set(summary["n"]) == {3}
    table = arm_table(ev)
    assert list(table["arm"]) == ["gdro", "uniform", "vip"]
    assert "average mean@4" in table.columns and "±" in table.loc[0, "average mean@4"]
    cmp = compare_to_baseline(ev, "uniform")
    vip = cmp[(cmp.arm == "vip") & (cmp.set == "average") & (cmp.metric == "mean@4")].iloc[0]
    assert vip["test"] == "paired" and vip["significant"] and vip["diff"] == pytest.approx(0.10, abs=0.03)
    assert vip["text"].startswith("+") and "significant" in vip["text"]
    paths = write_tables({"arms": table, "vs_uniform": cmp}, tmp_path / "tables")
    assert {p.name for p in paths} == {"arms.csv", "arms.md", "vs_uniform.csv", "vs_uniform.md"}
    assert (tmp_path / "tables" / "arms.md").read_text().startswith("|")
    with pytest.raises(ValueError, match="baseline arm"):
        compare_to_baseline(ev, "nope")


def test_summary_json_feeds_the_cross_paper_summary(results_dir, tmp_path):
    cmp = compare_to_baseline(load_eval(results_dir), "uniform")
    write_summary_json(cmp, tmp_path / "vip" / "summary.json", profile="default", seeds=SEEDS)
    rows = summary_rows(tmp_path)
    assert len(rows) == 2 * 2 * 2  # arms × {average, pooled} × {mean@4, pass@4}
    vip = next(r for r in rows if r["arm"] == "vip" and r["metric"] == "average mean@4")
    assert vip["significant"] and vip["seeds"] == 3 and vip["ci_low"] < vip["diff"] < vip["ci_high"]


def test_holm_counts_a_duplicated_test_once():
    """Issue 20: with every held-out set of the same size, "pooled" is the very test "average"
    is, and Holm counted each twice."""
    import pandas as pd

    from replication.report.tables import add_holm

    base = {"arm": "m", "baseline": "b", "baseline_mean": 0.5, "method_mean": 0.51, "lo": -0.01,
            "hi": 0.03, "relative": 0.02, "n": 8, "test": "paired", "significant": False, "se": 0.01,
            "df": 7, "mde": 0.03}
    rows = [{**base, "set": "average", "metric": "mean@8", "diff": 0.01, "p": 0.04},
            {**base, "set": "pooled", "metric": "mean@8", "diff": 0.01, "p": 0.04},  # the same test
            {**base, "set": "average", "metric": "pass@8", "diff": 0.02, "p": 0.01},
            {**base, "set": "add2-heldout", "metric": "mean@8", "diff": 0.03, "p": 0.30}]
    out = add_holm(pd.DataFrame(rows))
    assert (out["family_size"] == 3).all()
    assert [x if isinstance(x, str) else None for x in out["same_test_as"]] == [None, "average", None, None]
    assert out.loc[1, "p_holm"] == out.loc[0, "p_holm"] == pytest.approx(0.08)  # 2 x 0.04, not 3 x
    assert out.loc[2, "p_holm"] == pytest.approx(0.03)
