"""Fault injection (issue 11), checkpoints: damaged files of eight kinds are one line naming the
file, nothing in them can run code, a kill between the renames or at a random step loses nothing."""

from __future__ import annotations

import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from replication.__main__ import main
from replication.train import checkpoint as ck

from faults.cli_helpers import ROOT, one_line_error, run_cli, train_args
from proc_helpers import run_metrics


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_Evil.marker}",))


def _damage(kind: str, state: Path, tmp: Path) -> None:
    data = state.read_bytes()
    if kind == "truncated":
        state.write_bytes(data[: len(data) // 3])
    elif kind == "empty":
        state.write_bytes(b"")
    elif kind == "garbage":
        state.write_bytes(os.urandom(4096))
    elif kind == "bitflip":  # corrupt a stored tensor's bytes inside the zip: CRC mismatch
        raw = bytearray(data)
        with zipfile.ZipFile(state) as z:
            info = max(z.infolist(), key=lambda i: i.file_size)
        start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 64
        for i in range(start, start + 256):
            raw[i] ^= 0xFF
        state.write_bytes(bytes(raw))
    elif kind == "foreign":  # a valid torch file, but not one of ours
        torch.save({"model": {"w": torch.zeros(2)}, "step": 3}, state)
    elif kind == "pickle":  # a plain pickle, not a torch zip
        state.write_bytes(pickle.dumps({"step": 1}))
    elif kind == "malicious":  # would run a shell command under weights_only=False
        _Evil.marker = tmp / "pwned"
        torch.save({"format": ck.FORMAT, "payload": {"step": 1, "x": _Evil()}}, state)
    elif kind == "no-digest":
        state.with_name(ck.DIGEST).unlink()
        return
    else:
        raise AssertionError(kind)
    if kind in ("foreign", "pickle", "malicious"):  # crafted files come with a matching digest
        state.with_name(ck.DIGEST).write_text(ck._digest(state))


@pytest.fixture(scope="module")
def checkpointed_run(small_overrides, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "run"
    assert main(train_args(small_overrides, out, "--max-steps", "2")) == 0
    return out


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "bitflip", "foreign", "pickle",
                                  "malicious", "no-digest"])
def test_damaged_checkpoint_is_one_line_naming_the_file(small_overrides, checkpointed_run, tmp_path, kind):
    out = tmp_path / "run"
    shutil.copytree(checkpointed_run, out)
    state = out / "checkpoint" / "state.pt"
    _damage(kind, state, tmp_path)
    r = run_cli(*train_args(small_overrides, out, "--max-steps", "4", "--resume"))
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, str(state))
    assert not (tmp_path / "pwned").exists()  # nothing was executed
    with pytest.raises(ck.CheckpointError, match=str(state)):
        ck.load_checkpoint(out)


def test_checkpoint_is_plain_tensors_and_builtins(checkpointed_run):
    path = checkpointed_run / "checkpoint" / "state.pt"
    raw = torch.load(path, weights_only=True)  # would raise on any non-allowlisted object
    assert raw["format"] == ck.FORMAT
    payload = ck.read_checkpoint_file(path)
    assert payload["step"] == 2
    assert isinstance(payload["components"]["update_rng"]["state"]["state"], int)


def test_encode_roundtrip_of_numpy_sets_and_dataclasses():
    from replication.allocation.vip import VIPConfig

    x = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array(["p1", "p2"]),
         "c": np.int64(7), "d": {1, 2}, "e": (1.5, [np.bool_(True)]), "f": VIPConfig(),
         "g": np.array([1, 2], dtype=np.uint32), "h": torch.ones(2)}
    y = ck.decode(ck.encode(x))
    assert y["a"].dtype == np.float32 and (y["a"] == x["a"]).all()
    assert y["b"].tolist() == ["p1", "p2"] and y["c"] == 7 and type(y["c"]) is int
    assert y["d"] == {1, 2} and y["e"] == (1.5, [True]) and y["f"] == VIPConfig()
    assert y["g"].dtype == np.uint32 and torch.equal(y["h"], x["h"])
    with pytest.raises(ck.CheckpointError, match="not a replication class"):
        ck.decode({"__dataclass__": "os:system", "fields": {}})


def test_checkpoint_survives_kill_between_renames(checkpointed_run, tmp_path):
    """A kill after `checkpoint` was renamed aside and before the new one moved in leaves
    `.checkpoint.old`; a stale `.checkpoint.tmp` (killed mid-write) is ignored."""
    out = tmp_path / "run"
    shutil.copytree(checkpointed_run, out)
    (out / "checkpoint").rename(out / ".checkpoint.old")
    (out / ".checkpoint.tmp").mkdir()
    (out / ".checkpoint.tmp" / "state.pt").write_bytes(b"half a file")
    assert ck.load_checkpoint(out)["step"] == 2
    ck.save_checkpoint(out, {"step": 3, "config": {}, "components": {}})
    assert ck.load_checkpoint(out)["step"] == 3
    assert not (out / ".checkpoint.old").exists() and not (out / ".checkpoint.tmp").exists()


@pytest.mark.slow
def test_kill9_at_random_steps_then_resume(small_overrides, tmp_path):
    """kill -9 at random steps (seeded, printed); resume (or restart when no checkpoint was
    written yet, with --overwrite): the final metrics and records equal an uninterrupted run's."""
    over = {"steps": 6, "checkpoint_every": 2}
    full = tmp_path / "full"
    assert main(train_args(small_overrides, full, "--allocator", "dynamo", overrides=over)) == 0
    rng = random.Random(int(os.environ.get("FAULT_SEED", "11")))
    out = tmp_path / "killed"
    kills = []
    for _ in range(2):
        kill_at = rng.randint(1, 5)
        resume = ck.checkpoint_path(out) is not None
        flag = "--resume" if resume else "--overwrite"
        cmd = [sys.executable, "-m", "replication",
               *train_args(small_overrides, out, "--allocator", "dynamo", flag, overrides=over)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        steps = out / "steps.jsonl"
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if steps.exists() and len(steps.read_text().splitlines()) >= kill_at:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills.append((kill_at, resume))
    flag = "--resume" if ck.checkpoint_path(out) is not None else "--overwrite"
    assert main(train_args(small_overrides, out, "--allocator", "dynamo", flag, overrides=over)) == 0, kills
    assert run_metrics(full) == run_metrics(out), kills
    assert (full / "prompts.jsonl").read_text() == (out / "prompts.jsonl").read_text()
    assert (full / "steps.jsonl").read_text().count("\n") == (out / "steps.jsonl").read_text().count("\n")


def test_checkpoint_of_another_model_shape_is_one_line(small_overrides, tmp_path):
    """Issue 18.8: the model folder behind the same model.path was rebuilt with other dimensions.
    Before: a 41-line "size mismatch" traceback from load_state_dict."""
    from transformers import AutoTokenizer

    from replication.models import TinyModelConfig, build_tiny_model, save_policy

    model_dir = tmp_path / "model"
    shutil.copytree(small_overrides["model.path"], model_dir)
    over = {**small_overrides, "model.path": str(model_dir)}
    out = tmp_path / "run"
    assert main(train_args(over, out, "--max-steps", "2")) == 0
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    shutil.rmtree(model_dir)
    save_policy(build_tiny_model(TinyModelConfig(hidden=64, heads=4, mlp=96), tokenizer), tokenizer, model_dir)
    r = run_cli(*train_args(over, out, "--max-steps", "4", "--resume"))
    assert r.returncode == 2, r.stderr
    one_line_error(r.stderr, str(out / "checkpoint" / "state.pt"), "another model shape",
                   "model.embed_tokens.weight", "128]", "64]")


def test_check_model_shapes_unit():
    a = {"w": torch.zeros(2, 3), "b": torch.zeros(3)}
    ck.check_model_shapes(a, {"w": torch.ones(2, 3), "b": torch.ones(3)}, "x/state.pt")
    with pytest.raises(ck.CheckpointShapeError, match=r"x/state.pt .* parameter w is \[2, 3\] there, \[3, 3\]"):
        ck.check_model_shapes(a, {"w": torch.ones(3, 3), "b": torch.ones(3)}, "x/state.pt")
    with pytest.raises(ck.CheckpointShapeError, match="no parameter c"):
        ck.check_model_shapes(a, {**a, "c": torch.ones(1)}, "x/state.pt")
    with pytest.raises(ck.CheckpointShapeError, match="parameter b .* not in this model"):
        ck.check_model_shapes(a, {"w": torch.ones(2, 3)}, "x/state.pt")
