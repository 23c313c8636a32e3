"""The real CLI, a handful of steps: every allocator, estimator and modulation; determinism;
resume equivalence; errors before compute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.allocation import available_allocators

# Allocators that need a per-run option the CLI cannot know (the oracle's true p) are skipped.
CLI_ALLOCATORS = [a for a in available_allocators() if a != "oracle"]


def _args(small: dict, out: Path, *extra: str, overrides: dict | None = None) -> list[str]:
    o = {**small, **(overrides or {})}
    args = ["train", "--profile", "default", "--out", str(out), "--no-progress"]
    for k, v in o.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def _metrics(out: Path) -> dict:
    m = json.loads((out / "metrics.json").read_text())
    m.pop("wall_seconds")
    return m


@pytest.mark.parametrize("allocator", CLI_ALLOCATORS)
def test_every_allocator_trains(small_overrides, tmp_path, allocator):
    extra = {"rollout.lower": 3} if allocator.startswith("vip") else {}
    rc = main(_args(small_overrides, tmp_path, "--allocator", allocator, "--seed", "0",
                    "--estimator", "rloo", overrides=extra))
    assert rc == 0
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["rollouts_total"] == 4 * 8 * 4  # steps x Q x n̄: the same budget for every method
    assert set(m["eval_before"]) == {"add2-heldout", "mul1-indist", "average", "pooled"}
    assert {"mean@2", "pass@2"} <= set(m["eval_after"]["add2-heldout"])
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]
    assert all(s["rollouts"] == 32 for s in steps)
    prompts = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == 4 * 8
    assert all(sum(p["n"] for p in prompts if p["step"] == s) == 32 for s in range(4))


@pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo"])
@pytest.mark.parametrize("extra", [[], ["--modulation", "dynamo"], ["--prompt-weights", "gdro"]])
def test_estimators_and_modulation(small_overrides, tmp_path, estimator, extra):
    rc = main(_args(small_overrides, tmp_path, "--allocator", "uniform", "--seed", "1",
                    "--estimator", estimator, *extra, "--max-steps", "2"))
    assert rc == 0
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    if extra and extra[0] == "--modulation":
        assert all("beta_stab_mean" in s and "beta_comp_mean" in s for s in steps)
    if extra and extra[0] == "--prompt-weights":
        assert "weight_mass_per_bin" in steps[-1]


def test_same_seed_same_metrics(small_overrides, tmp_path):
    for name in ("a", "b"):
        assert main(_args(small_overrides, tmp_path / name, "--allocator", "dynamo", "--seed", "3")) == 0
    assert _metrics(tmp_path / "a") == _metrics(tmp_path / "b")
    assert (tmp_path / "a" / "prompts.jsonl").read_text() == (tmp_path / "b" / "prompts.jsonl").read_text()


def test_resume_matches_uninterrupted(small_overrides, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(_args(small_overrides, full, "--allocator", "rollout-gdro", "--seed", "2",
                      "--prompt-weights", "gdro")) == 0
    # Stop after 2 steps (a checkpoint is written at step 2), then resume to the end.
    assert main(_args(small_overrides, part, "--allocator", "rollout-gdro", "--seed", "2",
                      "--prompt-weights", "gdro", "--max-steps", "2")) == 0
    (part / "metrics.json").unlink()
    assert main(_args(small_overrides, part, "--allocator", "rollout-gdro", "--seed", "2",
                      "--prompt-weights", "gdro", "--resume")) == 0
    a, b = _metrics(full), _metrics(part)
    assert a["eval_after"] == b["eval_after"]
    assert a["rollouts_total"] == b["rollouts_total"]
    assert (full / "prompts.jsonl").read_text() == (part / "prompts.jsonl").read_text()


@pytest.mark.slow
def test_kill9_then_resume(small_overrides, tmp_path):
    """kill -9 in the middle of a run, then --resume: same final metrics as uninterrupted."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    over = {"steps": 12, "checkpoint_every": 3}
    assert main(_args(small_overrides, full, "--allocator", "vip", "--seed", "4",
                      overrides={**over, "rollout.lower": 3})) == 0
    cmd = [sys.executable, "-m", "replication",
           *_args(small_overrides, killed, "--allocator", "vip", "--seed", "4",
                  overrides={**over, "rollout.lower": 3})]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "checkpoint").exists():
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert main(_args(small_overrides, killed, "--allocator", "vip", "--seed", "4", "--resume",
                      overrides={**over, "rollout.lower": 3})) == 0
    assert _metrics(full)["eval_after"] == _metrics(killed)["eval_after"]
    assert (full / "prompts.jsonl").read_text() == (killed / "prompts.jsonl").read_text()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--allocator", "no-such-allocator"], "allocator.name"),
        (["--set", "rollout.mean_rollouts=0"], "rollout.mean_rollouts"),
        (["--set", "rollout.bogus=1"], "rollout.bogus"),
        (["--set", "rl.clip_low=2"], "rl.clip_low"),
        (["--set", "optim.lr=-1"], "optim.lr"),
    ],
)
def test_bad_config_fails_before_compute(tmp_path, capsys, args, needle):
    rc = main(["train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "x"), *args])
    assert rc == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing was started


def test_bad_allocator_option_names_the_key(small_overrides, tmp_path, capsys):
    rc = main(_args(small_overrides, tmp_path / "x", "--allocator", "dynamo", "--seed", "0",
                    overrides={"allocator.options": {"not_an_option": 1}}))
    assert rc == 2
    assert "not_an_option" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_eval_command(small_overrides, tmp_path):
    out = tmp_path / "ev"
    args = ["eval", "--profile", "default", "--checkpoint", small_overrides["model.path"], "--out", str(out)]
    for k, v in small_overrides.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    assert main(args) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert "add2-heldout" in m["eval"] and "mean@2" in m["eval"]["add2-heldout"]


def test_a_finished_runs_last_checkpoint_holds_no_optimizer_state(small_overrides, tmp_path, capsys):
    """Issue 36 (a rehearsal run's folder took 2.1 GB, 1.1 GB of it AdamW's moments): the last
    checkpoint of a run trained to its profile's length drops the optimizer state; a run killed
    during its final evaluation still resumes from it to the same metrics; a run stopped early by
    --max-steps keeps the state (it can be continued), and continuing a finished one is refused."""
    from replication.train.checkpoint import load_checkpoint

    full, again = tmp_path / "full", tmp_path / "again"
    assert main(_args(small_overrides, full, "--seed", "1")) == 0
    assert load_checkpoint(full)["components"]["optimizer"] is None
    assert main(_args(small_overrides, again, "--seed", "1", "--max-steps", "2")) == 0
    assert load_checkpoint(again)["components"]["optimizer"] is not None
    # killed after the last checkpoint, before metrics.json: --resume only evaluates
    import shutil

    shutil.rmtree(again)
    shutil.copytree(full, again)
    for name in ("metrics.json", "MANIFEST.json"):
        (again / name).unlink()
    assert main(_args(small_overrides, again, "--seed", "1", "--resume")) == 0
    assert _metrics(again)["eval_after"] == _metrics(full)["eval_after"]
    (again / "metrics.json").unlink()
    (again / "MANIFEST.json").unlink()
    longer = {**small_overrides, "steps": small_overrides["steps"] + 2}
    capsys.readouterr()
    assert main(_args(longer, again, "--seed", "1", "--resume")) == 2
    err = capsys.readouterr().err
    assert "cannot be continued" in err or "config" in err, err
