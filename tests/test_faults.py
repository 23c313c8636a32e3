"""Fault injection (issue 11): hostile parameters, killed runs and grids, damaged checkpoints,
diverging training, bad data. Everything a careless or hostile user does must end in one clear
line (exit 2) before compute, or in a run that can be resumed — never in lost results.

The verifier's worker faults are in tests/test_faults_verifier.py, grids in tests/test_faults_grid.py."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import random
import re
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
from replication.config import ConfigError
from replication.train import checkpoint as ck
from replication.train.run_folder import NonFiniteError

from proc_helpers import run_metrics

ROOT = Path(__file__).resolve().parents[1]


def _args(small: dict, out: Path, *extra: str, overrides: dict | None = None) -> list[str]:
    o = {**small, **(overrides or {})}
    args = ["train", "--profile", "default", "--out", str(out), "--no-progress", "--seed", "0"]
    for k, v in o.items():
        args += ["--set", f"{k}={json.dumps(v)}"]
    return args + list(extra)


def _cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "replication", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def _one_line_error(err: str, *needles: str) -> None:
    """One ``error:`` line naming the needles, no traceback (progress bars of a model load that
    happened before the fault may precede it)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ============================================================================ 1. stage parameters

HOSTILE_PARAMS = [
    ("vip.seeds", lambda p: p["vip"].update(seeds=[])),
    ("profile", lambda p: p.update(profile="defualt")),
    ("vip.arms.RLOO", lambda p: p["vip"]["arms"]["RLOO"].update({"rl.estimatr": "rloo"})),
    ("vip.arms.RLOO+VIP", lambda p: p["vip"]["arms"]["RLOO+VIP"].update({"allocator.name": "vipp"})),
    ("vip.main", lambda p: p["vip"].update(main=["RLOO", "nope"])),
    ("vip.baseline", lambda p: p["vip"].update(baseline={"RLOO+VIP": "missing"})),
    ("vip.steps", lambda p: p["vip"].update(steps=0)),
    ("vip.sedes", lambda p: p["vip"].update(sedes=[0])),
    ("workers", lambda p: p.update(workers=0)),
    ("optim.lr", lambda p: p["vip"]["base"].update({"optim.lr": float("inf")})),
    ("seed", lambda p: p["vip"].update(seeds=[-1])),
]


def _edit_first_seeds(text: str, new_line_rest: str) -> str:
    """params.yaml text with its first ``seeds:`` line (the vip section's) replaced."""
    out, n = re.subn(r"(?m)^(\s+seeds:).*$", lambda m: m.group(1) + " " + new_line_rest, text, count=1)
    assert n == 1
    return out


def _params() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.mark.parametrize("needle, damage", HOSTILE_PARAMS, ids=[h[0] for h in HOSTILE_PARAMS])
def test_validate_rejects_hostile_params(tmp_path, capsys, needle, damage):
    import yaml

    params = _params()
    damage(params)
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    assert main(["validate", "--params", str(f), "--stage", "vip"]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, needle, str(f))


def test_validate_accepts_the_committed_params(capsys):
    for stage in ("base", "vip", "dynamo", "gdro", "report"):
        assert main(["validate", "--params", str(ROOT / "params.yaml"), "--stage", stage]) == 0


def test_params_yaml_syntax_error_names_the_file(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text(_edit_first_seeds((ROOT / "params.yaml").read_text(), "[0, 1, 2"))
    r = _cli("validate", "--params", str(f), "--stage", "vip")
    assert r.returncode == 2
    _one_line_error(r.stderr, str(f), "YAML syntax error", "line")


def test_notebook_glue_validates_before_touching_outputs(tmp_path):
    """run_paper (what the notebooks call) stops on bad params before its first write."""
    import yaml

    from replication.orchestration.grid import run_paper

    params = _params()
    params["gdro"]["arms"]["GRPO"]["rl.bogus"] = 1
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    out_root = tmp_path / "results"
    (out_root / "gdro" / "runs").mkdir(parents=True)
    (out_root / "gdro" / "runs" / "keep.json").write_text("{}")
    before = _tree_digest(out_root)
    with pytest.raises(ConfigError, match="rl.bogus"):
        run_paper("gdro", f, out_root)
    assert _tree_digest(out_root) == before


def _dvc_project(tmp_path: Path, persist: bool = True) -> Path:
    """A throwaway DVC project: this repo's dvc.yaml and params.yaml, a small fake results tree."""
    proj = tmp_path / "proj"
    proj.mkdir(parents=True)
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, proj / name)
    if not persist:  # the control: DVC's default behaviour that deleted results in issue 11
        (proj / "dvc.yaml").write_text((proj / "dvc.yaml").read_text().replace("persist: true", "persist: false"))
    shutil.copytree(ROOT / "notebooks", proj / "notebooks")
    shutil.copytree(ROOT / "workspace" / "default", proj / "workspace" / "default")  # dvc.yaml's workspace/${profile} deps
    (proj / "replication").symlink_to(ROOT / "replication")
    for rel, text in [("results/base-model/model.safetensors", "weights"),
                      ("results/encoder/config.json", "{}"),  # the paper stages' dep on VIP's encoder
                      ("results/vip/runs/RLOO/s0/metrics.json", "{}"),
                      ("results/vip/tables/heldout.csv", "a,b"),
                      ("results/vip/figures/heldout.png", "png"),
                      ("results/vip/vip.ipynb", "{executed notebook}"),
                      ("results/vip/summary.json", "{}")]:
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=proj, check=True)
    return proj


def _dvc_repro(proj: Path, stage: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([sys.executable, "-m", "dvc", "repro", "-s", stage], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("stage, old, new", [
    ("vip", "seeds", "[]"),
    ("base", "\nprofile: default", "\nprofile: defualt"),
])
def test_dvc_repro_with_bad_params_leaves_results_identical(tmp_path, stage, old, new):
    """Real `dvc repro -s <stage>` on a copy: the stage fails (validate, exit 2) and results/ is
    byte-identical. The control run without `persist` shows DVC would have deleted it."""
    proj = _dvc_project(tmp_path)
    params = proj / "params.yaml"
    text = params.read_text()
    if old == "seeds":
        params.write_text(_edit_first_seeds(text, new))
    else:
        assert old in text
        params.write_text(text.replace(old, new, 1))
    before = _tree_digest(proj / "results")
    r = _dvc_repro(proj, stage)
    assert r.returncode != 0
    assert "exited with 2" in r.stderr + r.stdout
    assert _tree_digest(proj / "results") == before
    if stage == "vip":  # control: the same, with DVC's default (non-persistent) outputs
        ctl = _dvc_project(tmp_path / "control", persist=False)
        (ctl / "params.yaml").write_text(params.read_text())
        assert _dvc_repro(ctl, stage).returncode != 0
        assert not (ctl / "results/vip/tables/heldout.csv").exists()  # what issue 11 saw


def test_validate_clear_removes_only_after_success(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    old = tmp_path / "results" / "vip" / "runs"
    old.mkdir(parents=True)
    (old / "x.json").write_text("{}")
    bad = tmp_path / "bad.yaml"
    bad.write_text(_edit_first_seeds((tmp_path / "params.yaml").read_text(), "[]"))
    assert main(["validate", "--params", str(bad), "--stage", "vip", "--clear", "results/vip/runs"]) == 2
    assert (old / "x.json").exists()
    assert main(["validate", "--params", "params.yaml", "--stage", "vip", "--clear", "results/vip/runs"]) == 0
    assert not old.exists()
    assert main(["validate", "--params", "params.yaml", "--stage", "vip", "--clear", "/etc"]) == 2


# ============================================================================ 2. run folders


def test_resume_without_checkpoint_is_an_error(small_overrides, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(small_overrides, out, "--resume")) == 2
    _one_line_error(capsys.readouterr().err, "--resume", "no checkpoint", str(out))
    assert not out.exists()


def test_existing_run_is_never_overwritten_without_flag(small_overrides, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(small_overrides, out, "--max-steps", "2")) == 0
    before = _tree_digest(out)
    capsys.readouterr()
    assert main(_args(small_overrides, out, "--max-steps", "2")) == 2
    _one_line_error(capsys.readouterr().err, str(out), "--overwrite", "--resume")
    assert _tree_digest(out) == before
    # resuming with fewer steps than the checkpoint holds would understate what ran
    assert main(_args(small_overrides, out, "--max-steps", "1", "--resume")) == 2
    _one_line_error(capsys.readouterr().err, "step 2", "--max-steps 1")
    assert _tree_digest(out) == before
    # a different configuration cannot continue this checkpoint
    assert main(_args(small_overrides, out, "--resume", overrides={"optim.lr": 1e-4})) == 2
    _one_line_error(capsys.readouterr().err, "optim.lr")
    assert main(_args(small_overrides, out, "--max-steps", "3", "--overwrite")) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 3
    assert len((out / "steps.jsonl").read_text().splitlines()) == 3


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
    assert main(_args(small_overrides, out, "--max-steps", "2")) == 0
    return out


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "bitflip", "foreign", "pickle",
                                  "malicious", "no-digest"])
def test_damaged_checkpoint_is_one_line_naming_the_file(small_overrides, checkpointed_run, tmp_path, kind):
    out = tmp_path / "run"
    shutil.copytree(checkpointed_run, out)
    state = out / "checkpoint" / "state.pt"
    _damage(kind, state, tmp_path)
    r = _cli(*_args(small_overrides, out, "--max-steps", "4", "--resume"))
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr, str(state))
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
    assert main(_args(small_overrides, full, "--allocator", "dynamo", overrides=over)) == 0
    rng = random.Random(int(os.environ.get("FAULT_SEED", "11")))
    out = tmp_path / "killed"
    kills = []
    for _ in range(2):
        kill_at = rng.randint(1, 5)
        resume = ck.checkpoint_path(out) is not None
        flag = "--resume" if resume else "--overwrite"
        cmd = [sys.executable, "-m", "replication",
               *_args(small_overrides, out, "--allocator", "dynamo", flag, overrides=over)]
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
    assert main(_args(small_overrides, out, "--allocator", "dynamo", flag, overrides=over)) == 0, kills
    assert run_metrics(full) == run_metrics(out), kills
    assert (full / "prompts.jsonl").read_text() == (out / "prompts.jsonl").read_text()
    assert (full / "steps.jsonl").read_text().count("\n") == (out / "steps.jsonl").read_text().count("\n")


def test_second_trainer_on_the_same_folder_is_refused(small_overrides, tmp_path, capsys):
    from replication.train.run_folder import lock_run, unlock_run

    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]);"
        "from replication.train.run_folder import lock_run; lock_run(sys.argv[1]);"
        "print('locked', flush=True); time.sleep(60)"), str(out), str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(_args(small_overrides, out)) == 2
        _one_line_error(capsys.readouterr().err, "in use", str(out))
    finally:
        holder.kill()
        holder.wait()
    lock_run(out)  # released with its process
    unlock_run(out)


# ============================================================================ 3. numerical guards


@pytest.mark.parametrize("key, value", [("optim.lr", ".inf"), ("optim.lr", ".nan"),
                                        ("rl.clip_high", "-.inf"),
                                        ("allocator.options", '{"eta": .nan}')])
def test_non_finite_config_rejected_before_compute(tmp_path, capsys, key, value):
    out = tmp_path / "x"
    rc = main(["train", "--profile", "default", "--seed", "0", "--out", str(out), "--set", f"{key}={value}"])
    assert rc == 2
    _one_line_error(capsys.readouterr().err, key, "finite")
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
    assert main(_args(small_overrides, out)) == 3
    err = capsys.readouterr().err
    _one_line_error(err, "step 2", "non-finite", str(out / "checkpoint"))
    assert ck.load_checkpoint(out)["step"] == 2  # the last good checkpoint, untouched
    assert not (out / "metrics.json").exists()
    assert len((out / "steps.jsonl").read_text().splitlines()) == 2


def test_check_finite_unit():
    from replication.train.run_folder import check_finite

    m = torch.nn.Linear(2, 2)
    check_finite(0, m, np.zeros(3), {"grad_norm": 1.0})
    with pytest.raises(NonFiniteError, match="gradient"):
        check_finite(0, m, np.zeros(3), {"grad_norm": float("inf")})


# ============================================================================ 5. data


def _math_train_args(tmp_path: Path, path: Path) -> list[str]:
    opts = json.dumps({"train": "math500", "train_path": str(path)})
    return ["train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "out"),
            "--set", "task.kind=math", "--set", f"task.options={opts}"]


@pytest.mark.parametrize("name, content, needles", [
    ("null.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": null}\n', ["row 1", "answer"]),
    ("empty_answer.jsonl", '{"problem": "1+1", "answer": "  "}\n', ["row 0", "empty"]),
    ("nocol.jsonl", '{"problem": "1+1", "solution": "2"}\n', ["row 0", "columns"]),
    ("bad.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": \n', ["malformed"]),
    ("empty.jsonl", "", ["empty file"]),
    ("blank.jsonl", "\n\n", ["no rows"]),
    ("header.csv", "problem,answer\n", ["no rows"]),
    ("bad.json", "[{", ["malformed"]),
    ("data.txt", "x", ["unsupported"]),
])
def test_bad_data_files_name_file_and_row(tmp_path, name, content, needles):
    from replication.tasks.data_errors import DataError
    from replication.tasks.math_datasets import load_math_dataset

    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(DataError) as e:
        load_math_dataset("math500", path=str(f))
    msg = str(e.value)
    assert str(f) in msg and "\n" not in msg
    for n in needles:
        assert n in msg


def test_null_answer_in_parquet_is_an_error_not_nan(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    from replication.tasks.data_errors import DataError
    from replication.tasks.math_datasets import load_math_dataset

    f = tmp_path / "t.parquet"
    pd.DataFrame({"problem": ["a", "b"], "answer": [1.0, float("nan")]}).to_parquet(f)
    with pytest.raises(DataError, match="row 1"):
        load_math_dataset("math500", path=str(f))


def test_bad_data_through_the_cli_is_one_line(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text('{"problem": "1+1", "answer": null}\n')
    r = _cli(*_math_train_args(tmp_path, f))
    assert r.returncode == 2
    _one_line_error(r.stderr, str(f), "row 0")


# ============================================================================ 7. one-line errors


@pytest.mark.parametrize("args, needles", [
    (["--set", "optim.lr=[1, 2"], ["--set optim.lr", "cannot parse"]),
    (["--set", 'allocator.options={"a": 1'], ["--set allocator.options"]),
    (["--set", "=3"], ["empty key"]),
    (["--set", "novalue"], ["KEY=VALUE"]),
    (["--max-steps", "0"], ["--max-steps"]),
    (["--profile", "defualt"], ["defualt"]),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, needles):
    # model.path does not exist: an error caught later than the argument checks would say so
    r = _cli("train", "--profile", "default", "--seed", "0", "--out", str(tmp_path / "o"),
             "--set", "model.path=/nonexistent", *args)
    assert r.returncode == 2, r.stderr
    _one_line_error(r.stderr, *needles)
    assert not (tmp_path / "o").exists()


def test_negative_seed_names_seed(tmp_path):
    r = _cli("train", "--profile", "default", "--seed", "-1", "--out", str(tmp_path / "o"),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    _one_line_error(r.stderr, "--seed", "-1")
    r = _cli("dry-run", "--profile", "default", "--set", "seed=-1")
    assert r.returncode == 2
    _one_line_error(r.stderr, "seed", "-1")


def test_out_on_a_file_fails_before_loading(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    # model.path does not exist: the --out check must come first (it would fail later otherwise)
    r = _cli("train", "--profile", "default", "--seed", "0", "--out", str(f),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    _one_line_error(r.stderr, str(f), "is a file")
    r = _cli("train", "--profile", "default", "--seed", "0", "--out", str(f / "sub"))
    assert r.returncode == 2
    _one_line_error(r.stderr, str(f), "not a folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_out_in_unwritable_folder_fails_before_loading(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    r = _cli("train", "--profile", "default", "--seed", "0", "--out", str(ro / "run"),
             "--set", "model.path=/nonexistent")
    assert r.returncode == 2
    _one_line_error(r.stderr, str(ro), "not writable")


def test_unwritable_folder_check_unit(tmp_path, monkeypatch):
    """The same check as above, with os.access faked (root passes any permission test)."""
    from replication.train import run_folder

    monkeypatch.setattr(run_folder.os, "access", lambda p, mode: False)
    with pytest.raises(run_folder.RunFolderError, match="not writable"):
        run_folder.check_out_dir(tmp_path / "run")


def test_profile_yaml_syntax_error_names_the_file(tmp_path, monkeypatch):
    from replication import config

    (tmp_path / "broken.yaml").write_text("steps: [1, 2\nseed: 0\n")
    monkeypatch.setattr(config, "PROFILE_DIR", tmp_path)
    with pytest.raises(ConfigError) as e:
        config.load_profile("broken")
    assert str(tmp_path / "broken.yaml") in str(e.value) and "line" in str(e.value)
    assert main(["dry-run", "--profile", "broken"]) == 2
