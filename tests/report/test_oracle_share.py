"""Share of the oracle's gain (issue 37.3): constructed seeds with known shares, the refusal when
the oracle gains nothing, and the paired bootstrap."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from replication.report.oracle_share import NOT_REPORTED, describe_share, oracle_share


def _ev(gains: dict[str, list[float]], base=0.5) -> pd.DataFrame:
    rows = []
    for arm, g in gains.items():
        for seed, v in enumerate(g):
            for phase, val in (("before", base), ("after", base + v)):
                rows.append({"arm": arm, "seed": seed, "phase": phase, "set": "average", "metric": "mean@8", "value": val})
    return pd.DataFrame(rows)


def test_half_of_the_oracle_gain_is_a_share_of_one_half():
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 0.002, 10)
    ev = _ev({"GRPO": [0.0] * 10, "GRPO+true-p": list(0.04 + noise), "M": list(0.02 + noise / 2)})
    out = oracle_share(ev, "GRPO", "GRPO+true-p", ["M"], metrics=["mean@8"]).iloc[0]
    assert out["share"] == pytest.approx(0.5, abs=1e-9)
    assert out["share_lo"] <= 0.5 <= out["share_hi"] and out["share_hi"] - out["share_lo"] < 0.1
    assert out["oracle_gain_lo"] > 0 and out["n"] == 10 and out["dropped"] == 0
    assert "50 % of the oracle's gain" in describe_share(out)


def test_no_share_where_the_oracle_gains_nothing():
    ev = _ev({"GRPO": [0.0] * 6, "GRPO+true-p": [0.01, -0.01, 0.0, 0.02, -0.02, 0.0], "M": [0.01] * 6})
    out = oracle_share(ev, "GRPO", "GRPO+true-p", ["M"], metrics=["mean@8"]).iloc[0]
    assert out["note"] == NOT_REPORTED and "share" not in out or np.isnan(out.get("share", np.nan))
    assert NOT_REPORTED in describe_share(out)


def test_only_seeds_with_all_three_arms_count():
    ev = _ev({"GRPO": [0.0] * 4, "GRPO+true-p": [0.05, 0.06, 0.04, 0.05], "M": [0.01, 0.02]})
    assert oracle_share(ev, "GRPO", "GRPO+true-p", ["M"], metrics=["mean@8"]).iloc[0]["n"] == 2
    ev = _ev({"GRPO": [0.0] * 4, "GRPO+true-p": [0.05] * 4, "M": [0.01]})
    assert "fewer than 2 seeds" in oracle_share(ev, "GRPO", "GRPO+true-p", ["M"], metrics=["mean@8"]).iloc[0]["note"]


def test_the_notebooks_table_names_a_missing_oracle_and_shares_every_method_of_its_baseline():
    from types import SimpleNamespace

    from replication.report.pipeline import oracle_shares

    ev = _ev({"GRPO": [0.0] * 4, "DynaMO": [0.01, 0.02, 0.0, 0.01]})
    out = oracle_shares(SimpleNamespace(paper="dynamo", ev=ev, baselines={"DynaMO": "GRPO"}))
    assert len(out) == 1 and "GRPO+true-p did not run" in out.iloc[0]["note"]
    ev = _ev({"GRPO": [0.0] * 4, "GRPO+true-p": [0.05, 0.06, 0.04, 0.05], "DynaMO": [0.01, 0.02, 0.0, 0.01]})
    out = oracle_shares(SimpleNamespace(paper="dynamo", ev=ev, baselines={"DynaMO": "GRPO", "GRPO+true-p": "GRPO"}))
    assert out["method"].tolist() == ["DynaMO"] and out.iloc[0]["share"] == pytest.approx(0.01 / 0.05)
