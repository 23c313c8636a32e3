"""Gradient-variance measurements as evidence (issue 18.2–18.3): the key covers the training code,
one writer per measurement folder, complete or absent with a manifest, verified on read.

The measurement's compute is replaced by a stub (``measure_checkpoint``) so each test takes
seconds; everything around it — key, locks, staging, manifests, copies — is the real code.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from replication.analysis import checkpoint_measurement, measurement_cache
from replication.analysis.gradvar_config import KIND, GradVarConfig
from replication.code_digest import PACKAGE
from replication.config import load_profile
from replication.store import MANIFEST, DamagedArtifact, LockHeld, verify_manifest

SETTINGS = {"steps": (0,), "draws": 3, "reference_draws": 3}


@pytest.fixture()
def model(tmp_path):
    """A stand-in base-model folder: the key hashes its files, nothing loads it."""
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text('{"n_layer": 1}')
    return str(m)


@pytest.fixture()
def stub(monkeypatch):
    """Counts measurements; each gives one row whose value is the number of draws."""
    calls = []

    def fake(cfg, model_path, step, records, gv, log=print, embeddings=None):
        calls.append(step)
        return pd.DataFrame([{"step": step, "method": "uniform", "metric": "nonzero_share", "value": gv.draws,
                              "lo": 0.0, "hi": 1.0, "n_draws": gv.draws}])

    monkeypatch.setattr(checkpoint_measurement, "measure_checkpoint", fake)
    return calls


def _measure(model, out, cache_root, logs=None, **over):
    log = (lambda m: logs.append(m)) if logs is not None else (lambda m: None)
    return measurement_cache.measure("smoke", {"model.path": model}, out, cache_root=cache_root, log=log,
                                     **{**SETTINGS, **over})


def _key(model, **over):
    cfg = load_profile("smoke", {"model.path": model})
    return measurement_cache.measurement_key(cfg, GradVarConfig(**{**SETTINGS, **over}))


def test_the_key_covers_the_training_code_and_the_measurements_own(model, tmp_path):
    """Editing an allocator changes the measurement's key as it changes the run cache's; so does
    editing the measurement's code; a report edit or a comment does not."""
    cfg = load_profile("smoke", {"model.path": model})
    gv = GradVarConfig(**SETTINGS)
    pkg = tmp_path / "replication"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    key = measurement_cache.measurement_key(cfg, gv, package=pkg)
    assert key == measurement_cache.measurement_key(cfg, gv)  # same bytes, same key
    report = pkg / "report" / "tables.py"
    report.write_text(report.read_text() + "\n# a note\n")
    assert measurement_cache.measurement_key(cfg, gv, package=pkg) == key
    dynamo = pkg / "allocation" / "dynamo.py"
    dynamo.write_text(dynamo.read_text() + "\n# a comment in an allocator\n")
    assert measurement_cache.measurement_key(cfg, gv, package=pkg) == key
    dynamo.write_text(dynamo.read_text() + "\nAN_EDIT = 1\n")
    edited = measurement_cache.measurement_key(cfg, gv, package=pkg)
    assert edited != key
    stats = pkg / "analysis" / "variance_statistics.py"
    stats.write_text(stats.read_text() + "\nAN_EDIT = 1\n")
    assert measurement_cache.measurement_key(cfg, gv, package=pkg) not in (key, edited)
    assert measurement_cache.measurement_key(cfg, GradVarConfig(**{**SETTINGS, "draws": 4})) != key
    rloo = load_profile("smoke", {"model.path": model, "rl.estimator": "rloo"})
    assert measurement_cache.measurement_key(rloo, gv) != key


def test_measured_once_then_reused_with_manifests_and_a_current_output_is_used_as_it_is(model, tmp_path, stub):
    cache_root = tmp_path / "cache"
    a = _measure(model, tmp_path / "a", cache_root)
    key = _key(model)
    for folder in (cache_root / key, tmp_path / "a"):
        m = verify_manifest(folder, kind=KIND)
        assert sorted(m["files"]) == ["gradient_variance.csv", "gradient_variance.json"]
        assert m["extra"]["key"] == key and m["extra"]["steps"] == [0]
    assert not list(cache_root.glob(f".{key}.uniform-run")) and not list(cache_root.glob(".*.tmp-*"))
    logs = []
    _measure(model, tmp_path / "b", cache_root, logs)  # another paper on the same base: the cache
    assert stub == [0] and any(f"cached {cache_root / key}" in m for m in logs)
    shutil.rmtree(cache_root)
    logs = []
    again = _measure(model, tmp_path / "a", cache_root, logs)  # a fresh clone: the committed output
    assert stub == [0] and any("is current" in m for m in logs)
    pd.testing.assert_frame_equal(a, again)
    _measure(model, tmp_path / "a", cache_root, draws=4)  # other settings: measured, output replaced
    assert stub == [0, 0] and verify_manifest(tmp_path / "a")["extra"]["key"] == _key(model, draws=4)


def test_a_damaged_cached_measurement_is_measured_again_with_a_warning_naming_it(model, tmp_path, stub):
    cache_root = tmp_path / "cache"
    _measure(model, tmp_path / "a", cache_root)
    entry = cache_root / _key(model)
    csv = entry / "gradient_variance.csv"
    csv.write_text(csv.read_text()[:20])  # cut
    with pytest.warns(UserWarning, match=f"{entry} is damaged.*{csv}.*measured again"):
        df = _measure(model, tmp_path / "b", cache_root)
    assert stub == [0, 0]
    verify_manifest(entry, kind=KIND)
    assert df["value"].tolist() == [3]
    (entry / MANIFEST).unlink()  # a writer that never finished: no manifest
    with pytest.warns(UserWarning, match=f"{entry} is damaged.*no {MANIFEST}"):
        _measure(model, tmp_path / "c", cache_root)
    assert stub == [0, 0, 0]


def test_a_damaged_committed_measurement_stops_with_an_error_naming_it(model, tmp_path, stub):
    cache_root = tmp_path / "cache"
    out = tmp_path / "results" / "gdro" / "gradient_variance"
    _measure(model, out, cache_root)
    csv = out / "gradient_variance.csv"
    csv.write_text(csv.read_text().replace("3", "9"))  # same size, other numbers
    with pytest.raises(DamagedArtifact, match=f"{csv}.*checksum.*git checkout {out}"):
        _measure(model, out, cache_root)
    assert stub == [0]  # stopped, not re-measured over the evidence
    (out / MANIFEST).write_text('{"files": ')  # a cut manifest
    with pytest.raises(DamagedArtifact, match=str(out)):
        _measure(model, out, cache_root)
    from replication.report.gradient_variance import load_gradient_variance

    with pytest.raises(DamagedArtifact, match=str(out)):
        load_gradient_variance(out)


def test_an_output_written_before_manifests_is_replaced(model, tmp_path, stub):
    out = tmp_path / "gradient_variance"
    out.mkdir()
    (out / "gradient_variance.csv").write_text("step,method,metric,value,lo,hi,n_draws\n")
    logs = []
    _measure(model, out, tmp_path / "cache", logs)
    assert any(f"{out} has no {MANIFEST}" in m for m in logs)
    assert verify_manifest(out, kind=KIND)["extra"]["key"] == _key(model)


def test_a_killed_measurement_leaves_no_folder(model, tmp_path, monkeypatch):
    def dies(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_measurement, "measure_checkpoint", dies)
    cache_root = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        _measure(model, tmp_path / "a", cache_root)
    assert not (cache_root / _key(model)).exists() and not (tmp_path / "a").exists()
    assert not list(cache_root.glob(".*.tmp-*"))


HOLDER = textwrap.dedent("""
    import sys, time
    from replication.analysis import checkpoint_measurement, measurement_cache

    def slow(*a, **k):
        print("measuring", flush=True)
        time.sleep(120)

    checkpoint_measurement.measure_checkpoint = slow
    measurement_cache.measure("smoke", {"model.path": sys.argv[1]}, sys.argv[2], cache_root=sys.argv[3],
                              log=lambda m: None, steps=(0,), draws=3, reference_draws=3)
""")


def test_a_second_measurement_of_the_same_key_gets_one_line_naming_the_folder_and_the_holder(model, tmp_path, stub):
    cache_root = tmp_path / "cache"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, model, str(tmp_path / "notebook"), str(cache_root)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "measuring"
        with pytest.raises(LockHeld) as err:
            _measure(model, tmp_path / "dvc", cache_root)  # the same key, another output folder
        msg = str(err.value)
        assert "\n" not in msg and str(cache_root / _key(model)) in msg
        assert f"pid {first.pid}" in msg and "since" in msg
        assert stub == []  # refused before any compute
    finally:
        first.kill()
        first.wait()
    _measure(model, tmp_path / "dvc", cache_root)  # the holder is gone: the lock went with it
    assert stub == [0]


def test_the_cli_refuses_a_second_writer_of_its_out_folder(tmp_path, capsys):
    from replication.__main__ import main

    out = tmp_path / "gv"
    hold = ("import sys, time; from replication.store import hold_writer_lock; "
            "hold_writer_lock(sys.argv[1]); print('held', flush=True); time.sleep(120)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        rc = main(["grad-variance", "--profile", "smoke", "--run", str(tmp_path / "run"), "--out", str(out),
                   "--steps", "0", "--draws", "3", "--reference-draws", "3"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1
        assert str(out) in err and f"pid {holder.pid}" in err
        assert not (tmp_path / "run").exists()
    finally:
        holder.kill()
        holder.wait()


def test_settings_json_records_the_measurement_and_its_provenance(model, tmp_path, stub):
    _measure(model, tmp_path / "a", tmp_path / "cache")
    settings = json.loads((tmp_path / "a" / "gradient_variance.json").read_text())
    assert settings["grad_variance"]["draws"] == 3 and settings["profile"] == "smoke"
    prov = settings["provenance"]  # how it ran (issue 19.6)
    from replication.orchestration.run_cache import code_digest

    assert prov["world_size"] == 1 and prov["sharding"] == "none" and prov["device"] == "cpu"
    assert prov["engine"] == "hf" and prov["dtype"] and prov["threads"] >= 1
    assert prov["versions"]["torch"] and prov["code_digest"] == code_digest()
    assert {"commit", "dirty"} <= set(prov)


def test_a_half_copied_checkpoint_folder_is_made_again(tmp_path, monkeypatch):
    """A measurement killed while copying a checkpoint's model folder left config.json and part of
    the weights: the folder is not complete, so the next measurement copies it again."""
    import replication.train.checkpoint as ckpt_mod
    import replication.train.loop as loop
    from replication.analysis.uniform_checkpoints import CHECKPOINT_KIND, checkpoint_dir, train_uniform_checkpoints

    trained = []

    def fake_train(cfg, run_dir, max_steps, **kw):
        trained.append(max_steps)
        (run_dir / "model").mkdir(parents=True, exist_ok=True)
        (run_dir / "model" / "config.json").write_text("{}")
        (run_dir / "model" / "model.safetensors").write_bytes(b"w" * 64)

    monkeypatch.setattr(loop, "train", fake_train)
    monkeypatch.setattr(ckpt_mod, "load_checkpoint", lambda run_dir: None)
    cfg = load_profile("smoke", {"model.path": str(tmp_path / "base")})
    run = tmp_path / "run"
    dest = checkpoint_dir(run, 2)
    dest.mkdir(parents=True)
    (dest / "config.json").write_text("{}")
    (dest / "model.safetensors").write_bytes(b"w" * 10)  # cut short
    out = train_uniform_checkpoints(cfg, run, (0, 2))
    assert trained == [2] and out[2] == dest
    assert verify_manifest(dest, kind=CHECKPOINT_KIND)["files"]["model.safetensors"]["size"] == 64
    train_uniform_checkpoints(cfg, run, (0, 2))  # complete now: reused
    assert trained == [2]


def test_a_stage_reuses_the_committed_measurement_of_its_key(model, tmp_path, stub, monkeypatch):
    """On a clean clone (no cache) a DVC stage whose notebook writes into a temporary products
    folder copies the destination's committed measurement of the same key: nothing is measured."""
    from replication.orchestration.workspace import LOCK_ENV, PRODUCTS_ENV

    dest, products = tmp_path / "results" / "vip", tmp_path / "staging"
    committed = _measure(model, dest / "gradient_variance", tmp_path / "cache1")
    assert stub == [0]
    monkeypatch.setenv(PRODUCTS_ENV, str(products))
    monkeypatch.setenv(LOCK_ENV, str(dest))
    logs = []
    again = _measure(model, products / "gradient_variance", tmp_path / "fresh-cache", logs)
    assert stub == [0] and any("reusing the committed measurement" in m for m in logs)
    pd.testing.assert_frame_equal(committed, again)
    verify_manifest(products / "gradient_variance", kind=KIND)
    # another key is measured, not copied
    _measure(model, products / "other" / "gradient_variance", tmp_path / "fresh-cache", draws=4)
    assert stub == [0, 0]
