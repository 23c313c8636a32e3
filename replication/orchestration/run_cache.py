"""One training run, content-addressed: key, train (or reuse), export.

Each run is the real CLI (``python -m replication train ...``) in a subprocess, so a notebook, a
DVC stage and a user at a shell all run exactly the same thing. Its key (``store.run_key``) is
a digest of every input that changes its numbers: the resolved configuration, the steps, the
training command as built here (``train_command``), the run's shape, the normalised training
code and the content of every file it names by path (base model, encoder, data). A comment or a
docstring never retrains; a changed command, file or line of code always does.

The key record travels with the run: ``ensure_run`` writes it into the cache entry before the
trainer starts, the trainer's manifest seals it, and every reuse checks it against the entry's
own config, metrics and code digest (``store.run_evidence.check_key``). A folder filed under a
key it does not hold is retrained with a warning naming both keys, never loaded as that run.

Which code: every ``*.py`` of the ``replication`` package except ``report/``, ``orchestration/``
and ``analysis/``. Those three only read finished runs, schedule them, or measure gradients
outside training (the ``grad-variance`` command); nothing a ``train`` run computes depends on
them. Their one output that does, the training command, enters the key as the command itself.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

from replication.code_digest import NOT_TRAINING, training_code_digest  # noqa: F401 (tests read NOT_TRAINING here)
from replication.config import load_profile, to_dict
from replication.interrupts import GridInterrupted, RunGuard
from replication.launch import Backend, Job, LauncherConfig, RunShape, make_backend
from replication.launch.inflight import RunDetached, remove_record, write_record
from replication.launch.local import LaunchStopped
from replication.store import MANIFEST, DamagedArtifact, io_errors, staged_dir, write_atomic, writer_lock
from replication.config.sections import NOT_TRAINING_SECTIONS
from replication.store.run_evidence import EXPORT_KIND, check_key, claimed_key, read_json, verify_run
from replication.store.run_key import DIGESTS, KEY_FILE, FileDigests, hub_revisions, input_digests, key_record, normalized_command
from replication.train.checkpoint import CheckpointError, checkpoint_path, load_checkpoint
from replication.train.run_folder import LOCK_ENV, RUN_KIND
from replication.train.run_log import logs_problem

DEFAULT_CACHE = Path(os.environ.get("REPLICATION_RUN_CACHE", ".cache/runs"))

PACKAGE = Path(__file__).resolve().parents[1]
"""The ``replication`` package folder whose sources ``code_digest`` hashes (``NOT_TRAINING`` left out)."""


def code_digest(root: str | Path | None = None) -> str:
    """Normalised digest (16 hex) of every ``*.py`` under ``root`` (the package by default),
    sub-packages in ``NOT_TRAINING`` excluded (``replication.code_digest``)."""
    return training_code_digest(root if root is not None else PACKAGE)


def run_shape(cfg, shape: Mapping | None = None) -> dict:
    """What a run computes on, as its key records it: nodes, processes and GPUs per process
    (``launch.shape.RunShape``: declared by the config, ``shape`` overriding fields). Where it
    is placed (which GPUs, which host, which backend) is not part of it."""
    return RunShape.of(cfg, shape).key()


def run_key(profile: str, overrides: dict, seed: int, steps: int | None,
            digests: FileDigests = DIGESTS, shape: Mapping | None = None) -> tuple[str, dict]:
    """(key, key record) of one run; validates the configuration first (ConfigError names the
    key). ``digests``: the memo of file contents shared by a grid's keys; ``shape``: fields of
    the run's ``RunShape`` that replace what its config declares (e.g. ``{"processes": 8}``)."""
    return _key_and_shape(profile, overrides, seed, steps, digests, shape)[:2]


def run_shape_of(profile: str, overrides: dict, seed: int, shape: Mapping | None = None) -> RunShape:
    """The ``RunShape`` of one run (its config's declaration, ``shape`` overriding fields)."""
    return RunShape.of(load_profile(profile, {**overrides, "seed": seed}), shape)


def _key_and_shape(profile: str, overrides: dict, seed: int, steps: int | None,
                   digests: FileDigests, shape: Mapping | None) -> tuple[str, dict, RunShape]:
    cfg = load_profile(profile, {**overrides, "seed": seed})
    resolved = to_dict(cfg)
    resolved["profile"] = None  # the same settings under another profile name are the same run
    for section in NOT_TRAINING_SECTIONS:  # what the trainer never reads (the notebook's gradvar sizes)
        resolved.pop(section, None)
    command = normalized_command(train_command(profile, overrides, seed, steps, Path("OUT"), resume=False))
    run = RunShape.of(cfg, shape)
    record = key_record(config=resolved, steps=steps or cfg.steps, command=command, shape=run.key(),
                        code=code_digest(), inputs=input_digests(resolved, digests),
                        revisions=hub_revisions(resolved))
    return record["key"], record, run


def train_command(profile: str, overrides: dict, seed: int, steps: int | None, out: Path,
                  resume: bool, overwrite: bool = False) -> list[str]:
    """The CLI call that trains one run into ``out``."""
    cmd = [sys.executable, "-m", "replication", "train", "--profile", profile, "--seed", str(seed),
           "--out", str(out), "--no-progress"]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    if steps is not None:
        cmd += ["--max-steps", str(steps)]
    if resume:
        cmd.append("--resume")
    elif overwrite:
        cmd.append("--overwrite")
    return cmd


def _entry_state(run_dir: Path, key: str | None = None) -> tuple[str, str]:
    """("done", "") for a verified run that holds key ``key``, ("damaged", why) for one that
    looks finished (manifest or metrics.json) but does not verify or holds another run,
    ("unfinished", "") otherwise."""
    looks_done = (run_dir / MANIFEST).exists() or (run_dir / "metrics.json").exists()
    if not looks_done:
        return "unfinished", ""
    try:
        verify_run(run_dir, kind=RUN_KIND)
        if key is not None:
            check_key(run_dir, key)
    except DamagedArtifact as e:
        return "damaged", str(e)
    return "done", ""


def cached_run(key: str, cache: Path = DEFAULT_CACHE, *, warn: bool = True) -> Path | None:
    """The finished run with this key in the cache (its manifest verifies and its key record is
    this key and its own), or None; a damaged or foreign one is None with a warning naming it
    (it will be retrained)."""
    run_dir = Path(cache) / key
    state, why = _entry_state(run_dir, key)
    if state == "damaged" and warn:
        warnings.warn(f"run cache entry {run_dir} is not usable ({why}); it will be retrained", stacklevel=2)
    return run_dir if state == "done" else None


def _resumable(run_dir: Path) -> bool:
    """A checkpoint that loads and whose logs reach its step; otherwise False (with a warning
    naming the entry when a checkpoint is there but unusable)."""
    if checkpoint_path(run_dir) is None:
        return False
    try:
        ckpt = load_checkpoint(run_dir)
    except CheckpointError as e:
        warnings.warn(f"{e}; run cache entry {run_dir} trains again from step 0", stacklevel=3)
        return False
    problem = logs_problem(run_dir, ckpt["step"])
    if problem:
        warnings.warn(f"run cache entry {run_dir}: checkpoint at step {ckpt['step']} not resumable "
                      f"({problem}); it trains again from step 0", stacklevel=3)
        return False
    return True


def _same_record(run_dir: Path, record: dict) -> bool:
    try:
        return read_json(run_dir / KEY_FILE) == record
    except DamagedArtifact:
        return False


def ensure_run(profile: str, overrides: dict, seed: int, steps: int | None,
               cache: Path = DEFAULT_CACHE, name: str = "", guard: RunGuard | None = None,
               digests: FileDigests = DIGESTS, *, launcher: Backend | None = None,
               shape: Mapping | None = None) -> Path:
    """The run's folder in the cache, training it first (or resuming it) when it is not finished.
    Holds the entry's writer lock meanwhile (a second writer: ``LockHeld`` naming the holder).
    The key record is written into the entry before the trainer starts; a checkpoint resumes only
    under the same record.

    ``launcher`` places the trainer (``launch.backend``; None: a local backend of its own, which
    starts it as ``python -m replication train ...`` as always): it may wait for a free slot,
    prefix torchrun, and add ``CUDA_VISIBLE_DEVICES`` and the provenance variables to the
    environment. None of that enters the key or config.json; ``shape`` does (``run_key``).

    A launcher that queues runs (``slurm``) gets its job recorded beside the entry
    (``launch.inflight``, ``<cache>/<key>.job.json``) as soon as it is submitted, so that a later
    grid or ``python -m replication status`` finds it; with the launcher's ``detach`` the record
    is all: ``RunDetached`` is raised without waiting (the job takes the entry's lock over)."""
    key, record, run = _key_and_shape(profile, overrides, seed, steps, digests, shape)
    done = cached_run(key, cache)
    if done is not None:
        return done
    if guard is not None and guard.stopped:
        raise GridInterrupted(f"run {name or key} seed {seed} not started: the grid was stopped")
    run_dir = Path(cache) / key
    Path(cache).mkdir(parents=True, exist_ok=True)
    with writer_lock(run_dir, "run cache entry"):
        state, _ = _entry_state(run_dir, key)  # finished by another writer since our first look?
        if state == "done":
            return run_dir
        # a killed run continues from its checkpoint (if its logs reach it and it was started for
        # this very key); a damaged, foreign or checkpoint-less one starts again
        resume = state == "unfinished" and _same_record(run_dir, record) and _resumable(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            write_atomic(run_dir / KEY_FILE, json.dumps(record, indent=1, sort_keys=True) + "\n")
        log = Path(cache) / f"{key}.log"
        cmd = train_command(profile, overrides, seed, steps, run_dir, resume, overwrite=not resume)
        env = {**os.environ, "REPLICATION_PARENT_PID": str(os.getpid()),  # the run dies with us
               LOCK_ENV: f"{os.getpid()}:{run_dir.resolve()}"}  # and we hold its folder's lock
        job = Job(name=f"{name or key} seed {seed}", command=cmd, env=env, shape=run, log=log)
        backend = launcher if launcher is not None else make_backend(LauncherConfig())
        with io_errors(log):  # a full disk: one line naming the log
            log.touch()  # the run's log exists from its start, wherever it is placed
            try:  # Ctrl-C / SIGTERM of a grid: the grid cancels the launcher's runs
                returncode = (_run_queued(backend, job, Path(cache), key) if backend.batches
                              else backend.run(job))
            except LaunchStopped as e:
                raise GridInterrupted(str(e)) from None
        if guard is not None and guard.stopped:
            raise GridInterrupted(f"run {name or key} seed {seed} stopped (exit {returncode})")
        if returncode != 0:
            tail = log.read_text()[-3000:]
            raise RuntimeError(f"run {name or key} seed {seed} failed (exit {returncode}):\n{tail}")
        verify_run(run_dir, kind=RUN_KIND)  # exit 0 without a verifying run is not a run
        check_key(run_dir, key)
    return run_dir


def _run_queued(backend: Backend, job: Job, cache: Path, key: str) -> int:
    """``backend.run`` for a scheduler's queue: the submitted job is recorded (in flight) before
    it is waited for; its record goes once it completed, stays when it failed (``status`` shows
    it; the next submission replaces it). A detaching backend raises ``RunDetached`` instead of
    waiting."""
    handle = backend.submit(job)
    try:
        record = backend.record(handle, key)
        write_record(cache, record)
    except BaseException:
        backend.cancel(handle)
        raise
    if getattr(backend, "detach", False):
        raise RunDetached(record)
    try:
        returncode = backend.wait(handle)
    except BaseException:
        backend.cancel(handle)
        raise
    if returncode == 0:
        remove_record(cache, key)
    return returncode


def export_run(run_dir: Path, dest: Path, key: str | None = None) -> None:
    """Copy what readers compare (metrics, per-step log, gzipped per-prompt records, config) and
    the run's key record into a staged folder swapped in with its manifest, under ``dest``'s
    writer lock. The run is verified first, and with ``key`` it must hold that key (its key
    record, checked against its own files): a damaged or foreign run is never exported."""
    run_dir, dest = Path(run_dir), Path(dest)
    verify_run(run_dir)
    if key is not None:
        check_key(run_dir, key)
    steps = read_json(run_dir / "metrics.json")["steps"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    extra = {"steps": steps} if key is None else {"steps": steps, "key": key}
    with writer_lock(dest, "export"), staged_dir(dest, kind=EXPORT_KIND, extra=extra) as tmp:
        for name in ("metrics.json", "steps.jsonl", "config.json", KEY_FILE):
            if name != KEY_FILE or (run_dir / name).exists():
                shutil.copyfile(run_dir / name, tmp / name)
        # mtime=0 keeps the gzip bytes identical for identical records (stable in git and DVC).
        with open(run_dir / "prompts.jsonl", "rb") as src, open(tmp / "prompts.jsonl.gz", "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as dst:
            shutil.copyfileobj(src, dst)
    verify_run(dest, kind=EXPORT_KIND)


def copy_export(src: Path, dest: Path, key: str) -> None:
    """Copy a verified export that holds ``key`` (a published run a trial reuses) to ``dest``,
    staged and sealed like any export."""
    src, dest = Path(src), Path(dest)
    verify_run(src, kind=EXPORT_KIND)
    check_key(src, key)
    steps = read_json(src / "metrics.json")["steps"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(dest, "export"), staged_dir(dest, kind=EXPORT_KIND, extra={"steps": steps, "key": key}) as tmp:
        for f in sorted(src.iterdir()):
            if f.is_file() and f.name != MANIFEST and not f.name.startswith("."):
                shutil.copyfile(f, tmp / f.name)
    verify_run(dest, kind=EXPORT_KIND)


def exported_key(dest: Path) -> str | None:
    """The key a verified export holds (its key record, checked against its own files; an export
    from before key records gives its legacy cache key, which no run has today); None when there
    is no export. An export that is there but does not verify is an error naming it: committed
    results are restored, not silently retrained over."""
    dest = Path(dest)
    if not dest.is_dir() or not any(dest.iterdir()):
        return None
    try:
        verify_run(dest, kind=EXPORT_KIND)
    except DamagedArtifact as e:
        raise DamagedArtifact(f"damaged export, not used: {e} (restore it, e.g. `git checkout -- "
                              f"{dest}`, or remove the folder to train that run again)") from None
    return claimed_key(dest)


def published_exports(roots: list[Path]) -> dict[str, Path]:
    """{key: export folder} of the verified exports with a key record under each ``<root>/<arm>/s<seed>``
    (the published results a trial may reuse instead of training). Damaged ones are skipped
    with a warning: a trial never reads them."""
    found: dict[str, Path] = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for export in sorted(root.glob(f"*/s*/{KEY_FILE}")):
            folder = export.parent
            try:
                verify_run(folder, kind=EXPORT_KIND)
                found.setdefault(claimed_key(folder), folder)
            except DamagedArtifact as e:
                warnings.warn(f"published export {folder} not reused: {e}", stacklevel=2)
    return found
