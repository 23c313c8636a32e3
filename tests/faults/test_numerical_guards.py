"""Fault injection (issue 11), numerical guards: NaN/inf in the configuration is refused before
compute; a non-finite loss, gradient or weight stops the run and keeps the last good checkpoint."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from replication.__main__ import main
from replication.train import checkpoint as ck
from replication.train.run_folder import NonFiniteError

from faults.cli_helpers import one_line_error, train_args


@pytest.mark.parametrize("key, value", [("optim.lr", ".inf"), ("optim.lr", ".nan"),
                                        ("rl.clip_high", "-.inf"),
                                        ("allocator.options", '{"eta": .nan}')])
def test_non_finite_config_rejected_before_compute(tmp_path, capsys, key, value):
    out = tmp_path / "x"
    rc = main(["train", "--profile", "default", "--seed", "0", "--out", str(out), "--set", f"{key}={value}"])
    assert rc == 2
    one_line_error(capsys.readouterr().err, key, "finite")
    assert not out.exists()


@pytest.mark.parametrize("fault", ["weights", "loss", "grad"])
def test_non_finite_training_stops_and_keeps_last_checkpoint(small_overrides, tmp_path, capsys,
                                                             monkeypatch, fault):
    import replication.train.loop as loop

    real = loop.ppo_update
    calls = {"n": 0}

    def poisoned(model, *a, **kw):
        res = real(model, *a, **kw)
        calls["n"] += 1
        if calls["n"] == 3:  # step index 2, after the checkpoint of step 2
            if fault == "weights":
                with torch.no_grad():
                    next(model.parameters()).fill_(float("nan"))
            elif fault == "loss":
                res.row_loss[0] = float("inf")
            else:
                res.stats["grad_norm"] = float("nan")
        return res

    monkeypatch.setattr(loop, "ppo_update", poisoned)
    out = tmp_path / "run"
    assert main(train_args(small_overrides, out)) == 3
    err = capsys.readouterr().err
    one_line_error(err, "step 2", "non-finite", str(out / "checkpoint"))
    assert ck.load_checkpoint(out)["step"] == 2  # the last good checkpoint, untouched
    assert not (out / "metrics.json").exists()
    assert len((out / "steps.jsonl").read_text().splitlines()) == 2


def test_check_finite_unit():
    from replication.train.run_folder import check_finite

    m = torch.nn.Linear(2, 2)
    check_finite(0, m, np.zeros(3), {"grad_norm": 1.0})
    with pytest.raises(NonFiniteError, match="gradient"):
        check_finite(0, m, np.zeros(3), {"grad_norm": float("inf")})
