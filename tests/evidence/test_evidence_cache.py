"""Issue 18.1 and 18.2 for the run cache and the exports (no training: the trainer is faked):

- one writer: a cache entry and an export are locked while written; a second writer (another
  process) gets one line naming the folder and the holder;
- complete or absent: a cache entry exists only if its manifest verifies; a damaged one is
  retrained (``--overwrite``) with a warning naming it; an export is staged and swapped in with
  its manifest, and a failed export leaves the previous one untouched;
- a damaged committed export stops the grid with an error naming it — nothing is retrained.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evidence.evidence_helpers import ROOT, synthetic_record, synthetic_run
from replication.launch import local as launch_local
from replication.orchestration import grid, run_cache
from replication.store.run_evidence import verify_run
from replication.store import MANIFEST, DamagedArtifact, LockHeld
from replication.train.run_folder import LOCK_ENV

PROFILE, OVERRIDES, SEED, STEPS = "smoke", {"allocator.name": "uniform"}, 0, 2


def _key() -> str:
    return run_cache.run_key(PROFILE, OVERRIDES, SEED, STEPS)[0]


def _record(seed: int = SEED) -> dict:
    return run_cache.run_key(PROFILE, OVERRIDES, seed, STEPS)[1]


class FakeTrainer:
    """Stands in for the launcher's start of the train CLI (``launch.local.start_process``):
    records the command and writes a finished run (with manifest) into its --out folder."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.envs: list[dict] = []

    def __call__(self, cmd, log=None, env=None):
        self.calls.append(cmd)
        self.envs.append(env)
        out = Path(cmd[cmd.index("--out") + 1])
        if "--overwrite" in cmd:
            for f in ("metrics.json", "steps.jsonl", "prompts.jsonl", MANIFEST):
                (out / f).unlink(missing_ok=True)
        record = json.loads((out / "key.json").read_text())  # written by ensure_run before the start
        synthetic_run(out, seed=record["inputs"]["config"]["seed"], steps=STEPS, record=record)
        return Finished(len(self.calls))


class Finished:
    """A trainer process that has exited with 0 (what the launcher waits for)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = -pid, 0

    def wait(self, timeout=None) -> int:
        return 0

    poll = wait


@pytest.fixture
def fake(monkeypatch) -> FakeTrainer:
    trainer = FakeTrainer()
    monkeypatch.setattr(launch_local, "start_process", trainer)
    return trainer


def test_cache_entry_is_finished_only_when_its_manifest_verifies(tmp_path, fake):
    cache = tmp_path / "cache"
    run_dir = run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert run_dir == cache / _key() and len(fake.calls) == 1
    # the trainer was told that the grid holds its folder's lock
    assert fake.envs[0][LOCK_ENV] == f"{__import__('os').getpid()}:{run_dir.resolve()}"
    assert run_cache.cached_run(_key(), cache) == run_dir
    assert not (run_dir / "train.log").exists() and (cache / f"{_key()}.log").exists()
    run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert len(fake.calls) == 1  # finished: reused


@pytest.mark.parametrize("damage", ["cut steps", "zero-byte metrics, no manifest", "edited metrics"])
def test_damaged_cached_run_is_retrained_with_a_warning(tmp_path, fake, damage):
    cache = tmp_path / "cache"
    run_dir = synthetic_run(cache / _key(), steps=STEPS, record=_record())
    if damage == "cut steps":
        (run_dir / "steps.jsonl").write_text('{"step": 0}\n')
    elif damage == "zero-byte metrics, no manifest":  # a full disk under an old trainer
        (run_dir / MANIFEST).unlink()
        (run_dir / "metrics.json").write_text("")
    else:
        m = json.loads((run_dir / "metrics.json").read_text())
        m["eval_after"]["average"]["mean@2"] = 0.99
        (run_dir / "metrics.json").write_text(json.dumps(m))
    assert run_cache.cached_run(_key(), cache, warn=False) is None
    with pytest.warns(UserWarning, match=f"run cache entry {run_dir} is not usable"):
        done = run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert len(fake.calls) == 1 and "--overwrite" in fake.calls[0] and "--resume" not in fake.calls[0]
    verify_run(done, kind="run")


def test_unresumable_checkpoint_in_the_cache_trains_again(tmp_path, fake):
    """A checkpoint whose logs do not reach its step (copied alone) is not resumed by the grid."""
    from replication.train import checkpoint as ck

    cache = tmp_path / "cache"
    run_dir = cache / _key()
    run_dir.mkdir(parents=True)
    (run_dir / "key.json").write_text(json.dumps(_record()))  # started for this very key
    ck.save_checkpoint(run_dir, {"step": 2, "config": {}, "components": {}})
    with pytest.warns(UserWarning, match="not resumable"):
        run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert "--overwrite" in fake.calls[0]


def test_a_checkpoint_started_for_another_key_is_not_resumed(tmp_path, fake):
    """A resumed checkpoint is accepted only under the key record it was started with."""
    from replication.train import checkpoint as ck

    cache = tmp_path / "cache"
    run_dir = cache / _key()
    run_dir.mkdir(parents=True)
    (run_dir / "key.json").write_text(json.dumps(_record(seed=5)))  # another seed's run, filed here
    ck.save_checkpoint(run_dir, {"step": 1, "config": {}, "components": {}})
    run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert "--overwrite" in fake.calls[0] and "--resume" not in fake.calls[0]
    assert json.loads((run_dir / "key.json").read_text()) == _record()


def test_a_run_filed_under_another_key_is_retrained_naming_both(tmp_path, fake):
    """Content over names: another seed's finished run copied under this key is not loaded."""
    cache = tmp_path / "cache"
    other = _record(seed=7)
    run_dir = synthetic_run(cache / _key(), seed=7, steps=STEPS, record=other)
    assert run_cache.cached_run(_key(), cache, warn=False) is None
    with pytest.warns(UserWarning, match=f"{run_dir} holds run {other['key']} \\(seed 7\\), not {_key()}"):
        done = run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert "--overwrite" in fake.calls[0]
    assert json.loads((done / "metrics.json").read_text())["seed"] == SEED


def test_an_entry_whose_record_is_not_its_own_is_not_loaded(tmp_path, fake):
    """A key record copied beside another run's files: its config is not the folder's."""
    cache = tmp_path / "cache"
    run_dir = synthetic_run(cache / _key(), steps=STEPS, record=_record())
    config = json.loads((run_dir / "config.json").read_text())
    config["optim"]["lr"] = 1.0  # the run beside the record trained with something else
    (run_dir / "config.json").write_text(json.dumps(config))
    from replication.store import write_manifest

    write_manifest(run_dir, kind="run", extra={"steps": STEPS})  # even resealed
    with pytest.warns(UserWarning, match="config.json is not the config its key record names"):
        run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
    assert len(fake.calls) == 1


def test_an_export_under_another_seeds_folder_is_damage(tmp_path):
    """A seed folder copied over another seed's does not verify: the paired test never sees two
    copies of one run."""
    record = synthetic_record(seed=0)
    src = synthetic_run(tmp_path / "run", record=record)
    run_cache.export_run(src, tmp_path / "A" / "s0", record["key"])
    shutil.copytree(tmp_path / "A" / "s0", tmp_path / "A" / "s1")
    with pytest.raises(DamagedArtifact, match="holds seed 0, but its folder names seed 1"):
        verify_run(tmp_path / "A" / "s1")


def test_an_edited_key_record_is_damage(tmp_path):
    record = synthetic_record(seed=0)
    src = synthetic_run(tmp_path / "run", record=record)
    dest = tmp_path / "A" / "s0"
    run_cache.export_run(src, dest, record["key"])
    edited = json.loads((dest / "key.json").read_text())
    edited["inputs"]["steps"] = 99
    (dest / "key.json").write_text(json.dumps(edited))
    from replication.store import write_manifest

    write_manifest(dest, kind="export", extra={"steps": 3, "key": record["key"]})
    with pytest.raises(DamagedArtifact, match="inputs hash to"):
        run_cache.exported_key(dest)


def test_a_trial_copies_published_runs_whose_key_matches(tmp_path, fake, monkeypatch, capsys):
    monkeypatch.setattr(grid, "ensure_run",
                        lambda p, o, s, st, c, name="", guard=None, digests=None, **kw: run_cache.ensure_run(p, o, s, st, c, name, **kw))
    arms = [grid.Arm("U", OVERRIDES)]
    published = tmp_path / "results" / "vip" / "runs"
    grid.run_grid(PROFILE, arms, [0, 1], published, steps=STEPS, workers=1, cache=tmp_path / "cache1")
    assert len(fake.calls) == 2
    trial = tmp_path / "workspace" / "trial" / "vip" / "runs"
    capsys.readouterr()
    grid.run_grid(PROFILE, arms, [0, 2], trial, steps=STEPS, workers=1, cache=tmp_path / "cache2",
                  published=[published])
    assert len(fake.calls) == 3  # seed 0 copied from the published results, seed 2 trained
    assert "1 copied from the published results, 0 from the run cache, 1 to train: U s2" in capsys.readouterr().out
    assert run_cache.exported_key(trial / "U" / "s0") == _key()


HOLD_ENTRY = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from replication.launch import local
    from replication.orchestration import run_cache
    def slow_trainer(cmd, log, env):
        print("training", flush=True)
        time.sleep(120)
    local.start_process = slow_trainer
    run_cache.ensure_run("smoke", {"allocator.name": "uniform"}, 0, 2, sys.argv[2])
""")


def test_second_writer_of_a_cache_entry_is_refused_naming_the_holder(tmp_path, fake):
    cache = tmp_path / "cache"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_ENTRY, str(ROOT), str(cache)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "training"
        with pytest.raises(LockHeld) as err:
            run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)
        msg = str(err.value)
        assert "\n" not in msg and str(cache / _key()) in msg and f"pid {holder.pid}" in msg
        assert fake.calls == []
    finally:
        holder.kill()
        holder.wait()
    run_cache.ensure_run(PROFILE, OVERRIDES, SEED, STEPS, cache)  # released with its process
    assert len(fake.calls) == 1


HOLD_EXPORT = textwrap.dedent("""
    import shutil, sys, time
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from replication.orchestration import run_cache
    real = shutil.copyfile
    def slow_copy(a, b, **kw):
        print("exporting", flush=True)
        time.sleep(120)
    run_cache.shutil.copyfile = slow_copy
    run_cache.export_run(Path(sys.argv[2]), Path(sys.argv[3]))
""")


def test_second_writer_of_an_export_is_refused_naming_the_holder(tmp_path):
    run_dir = synthetic_run(tmp_path / "run")  # no key record: exported without a key
    dest = tmp_path / "results" / "A" / "s0"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXPORT, str(ROOT), str(run_dir), str(dest)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "exporting"
        with pytest.raises(LockHeld, match=f"{dest} is being written by pid {holder.pid}"):
            run_cache.export_run(run_dir, dest)
    finally:
        holder.kill()
        holder.wait()
    assert not dest.exists()  # the killed export left nothing at its place
    run_cache.export_run(run_dir, dest)
    assert run_cache.exported_key(dest) is None


def test_export_is_staged_sealed_and_a_failed_one_leaves_the_old(tmp_path, monkeypatch):
    record = synthetic_record()
    run_dir = synthetic_run(tmp_path / "run", record=record)
    dest = tmp_path / "results" / "A" / "s0"
    run_cache.export_run(run_dir, dest, record["key"])
    manifest = verify_run(dest, kind="export")
    assert manifest["extra"] == {"steps": 3, "key": record["key"]}
    assert sorted(manifest["files"]) == ["config.json", "key.json", "metrics.json", "prompts.jsonl.gz",
                                         "steps.jsonl"]
    before = {p.name: p.read_bytes() for p in dest.iterdir()}

    def broken(*a, **kw):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(run_cache.shutil, "copyfileobj", broken)
    with pytest.raises(OSError):
        run_cache.export_run(run_dir, dest, record["key"])
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".") and "tmp" in p.name] == []
    # a damaged run is never exported
    (run_dir / "steps.jsonl").write_text("")
    monkeypatch.undo()
    with pytest.raises(DamagedArtifact, match="steps.jsonl"):
        run_cache.export_run(run_dir, tmp_path / "results" / "A" / "s1", record["key"])


def test_exported_key_trusts_only_a_verifying_export(tmp_path):
    dest = tmp_path / "A" / "s0"
    assert run_cache.exported_key(dest) is None  # no export
    synthetic_run(dest, kind="export", key="abc")
    assert run_cache.exported_key(dest) == "abc"
    (dest / MANIFEST).unlink()  # an export without its manifest (a cut copy, or never sealed)
    with pytest.raises(DamagedArtifact, match=f"damaged export, not used: {dest}.*git checkout"):
        run_cache.exported_key(dest)


def test_damaged_committed_export_stops_the_grid_and_nothing_trains(tmp_path, fake, monkeypatch):
    out, cache = tmp_path / "out", tmp_path / "cache"
    monkeypatch.setattr(grid, "ensure_run",  # the real ensure_run, without the grid's RunGuard
                        lambda p, o, s, st, c, name="", guard=None, digests=None, **kw: run_cache.ensure_run(p, o, s, st, c, name, **kw))
    arms = [grid.Arm("U", OVERRIDES)]
    grid.run_grid(PROFILE, arms, [0, 1], out, steps=STEPS, workers=1, cache=cache)
    assert len(fake.calls) == 2
    shutil.rmtree(cache)  # only the committed exports are left
    steps = out / "U" / "s1" / "steps.jsonl"
    steps.write_text(steps.read_text().splitlines()[0] + "\n")  # cut to 1 of 2 rows
    with pytest.raises(DamagedArtifact) as err:
        grid.run_grid(PROFILE, arms, [0, 1], out, steps=STEPS, workers=1, cache=cache)
    assert str(steps) in str(err.value) and "\n" not in str(err.value)
    assert len(fake.calls) == 2  # not retrained silently
    assert steps.read_text().count("\n") == 1  # and not overwritten
