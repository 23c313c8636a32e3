"""Write faults in a training run (issue 34.3), each under a real file-size limit: the trainer's
config.json, its step and prompt logs, its checkpoint and its final model folder. Each failure
is one line naming the file and the free space (exit 1), leaves no temporary file, keeps what was
there before, and the folder continues afterwards (re-run or ``--resume``) to the numbers of an
uninterrupted run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replication.__main__ import main
from replication.train.checkpoint import load_checkpoint

from faults.cli_helpers import one_line_error, train_args, tree_digest
from faults.write_limits import leftovers, rows, run_cli_limited
from proc_helpers import run_metrics


@pytest.fixture(scope="module")
def runs(small_overrides, tmp_path_factory) -> dict[str, Path]:
    """A finished 4-step run (the reference) and one stopped at its step-2 checkpoint."""
    root = tmp_path_factory.mktemp("write-faults")
    assert main(train_args(small_overrides, root / "full")) == 0
    assert main(train_args(small_overrides, root / "half", "--max-steps", "2")) == 0
    return {"full": root / "full", "half": root / "half"}


def _failed_write(proc, *needles: str) -> None:
    assert proc.returncode == 1, proc.stderr
    one_line_error(proc.stderr, "cannot write", "file-size limit", "MiB free", *needles)


def _resume_equals_reference(small_overrides, out: Path, full: Path) -> None:
    assert main(train_args(small_overrides, out, "--resume")) == 0
    numbers = [{k: v for k, v in run_metrics(f).items() if k != "provenance"} for f in (out, full)]
    assert numbers[0] == numbers[1]  # (provenance names the commit, which may move meanwhile)
    assert (out / "prompts.jsonl").read_bytes() == (full / "prompts.jsonl").read_bytes()
    assert rows(out / "steps.jsonl") == rows(full / "steps.jsonl")


def test_config_json_under_a_file_size_limit_then_rerun(small_overrides, runs, tmp_path):
    """The observed defect: config.json left half-written and the run refused ever after."""
    out = tmp_path / "run"
    limit = (runs["full"] / "config.json").stat().st_size // 2
    proc = run_cli_limited(*train_args(small_overrides, out, "--max-steps", "1"), limit=limit, cwd=tmp_path)
    _failed_write(proc, str(out / "config.json"))
    assert not (out / "config.json").exists() and leftovers(out) == []
    assert main(train_args(small_overrides, out, "--max-steps", "1")) == 0  # no --overwrite needed


def test_step_log_under_a_file_size_limit_then_resume(small_overrides, runs, tmp_path):
    """steps.jsonl reaches the limit at step 3: cut back to its last whole row, resumable."""
    out = tmp_path / "run"
    shutil.copytree(runs["half"], out)
    two = (out / "steps.jsonl").stat().st_size  # two rows; the third crosses the limit
    limit = two + two // 4
    assert (out / "config.json").stat().st_size < limit and (out / "prompts.jsonl").stat().st_size < limit
    proc = run_cli_limited(*train_args(small_overrides, out, "--resume"), limit=limit, cwd=tmp_path)
    _failed_write(proc, str(out / "steps.jsonl"))
    assert rows(out / "steps.jsonl") == 2 and leftovers(out) == []
    assert load_checkpoint(out)["step"] == 2
    _resume_equals_reference(small_overrides, out, runs["full"])


def test_checkpoint_under_a_file_size_limit_then_resume(small_overrides, runs, tmp_path):
    """The step-4 checkpoint cannot be written: the step-2 one stays and the run resumes from it.
    (The last checkpoint of a finished run holds no optimizer state, so the limit is half of it,
    not half of the step-2 one, which the last one now fits under.)"""
    out = tmp_path / "run"
    shutil.copytree(runs["half"], out)
    limit = (runs["full"] / "checkpoint" / "state.pt").stat().st_size // 2
    proc = run_cli_limited(*train_args(small_overrides, out, "--resume"), limit=limit, cwd=tmp_path)
    _failed_write(proc, str(out / ".checkpoint.tmp" / "state.pt"))  # the temporary, now removed
    assert load_checkpoint(out)["step"] == 2 and leftovers(out) == []
    _resume_equals_reference(small_overrides, out, runs["full"])


def test_model_and_tokenizer_save_under_a_file_size_limit_then_resume(small_overrides, runs, tmp_path):
    """The final model save (a finished run resumed: no checkpoint to write first) fails on the
    weights: the previous model folder is untouched, the run is unfinished and resumes."""
    out = tmp_path / "run"
    shutil.copytree(runs["full"], out)
    model_before = tree_digest(out / "model")
    limit = (out / "model" / "model.safetensors").stat().st_size // 2
    proc = run_cli_limited(*train_args(small_overrides, out, "--resume"), limit=limit, cwd=tmp_path)
    _failed_write(proc, str(out / "model" / "model.safetensors"))
    assert tree_digest(out / "model") == model_before and leftovers(out) == []
    assert not (out / "metrics.json").exists()  # unfinished until the model is in place
    _resume_equals_reference(small_overrides, out, runs["full"])
    assert tree_digest(out / "model").keys() == model_before.keys()
