"""``python -m replication stage <base|vip|dynamo|gdro|report> [--params params.yaml]``: one DVC
stage (dvc.yaml's ``cmd``), safe to interrupt and never over the published results by mistake.

1. Validate params.yaml (one line, exit 2, nothing touched) and pick the destination: the
   published place (results/<paper>, results/base-model, results/summary.md) for profile
   ``default``, else ``workspace/<profile>/<stage>`` — what dvc.yaml declares as the stage's
   ``workspace/${profile}/...`` output. The default profile with a paper section edited since the
   last commit is refused: results/ would no longer match the committed params.yaml (commit it to
   publish, or try it under another profile / in the notebook).
2. Take the destination's writer lock (replication.store): a second ``dvc repro`` or a notebook
   on the same outputs is refused with one line naming the holder.
3. A paper stage runs papermill in its own session, bound to this process (it dies with us), and
   this process dies with whatever launched it (``dvc``; replication.interrupts), so ``kill -9`` of
   dvc leaves no papermill, kernel or trainer behind. The notebook writes its tables, figures,
   summary and executed copy into a temporary folder beside the destination (``PRODUCTS_ENV``);
   only when papermill succeeds are they swapped in, and the folder's products manifest
   (``<dest>/MANIFEST.json``, store/products.py) written over them before any signal is let
   through; readers of summary.json and the tables verify it. Ctrl-C, a failed cell or a killed launcher
   remove the temporary folder and leave the destination as it was (the exported runs under
   ``runs/`` are kept: each is complete on its own and the next run reuses it).
4. A grid that detached (``launcher.options.detach``: its runs left in flight on SLURM, the
   notebook stopped on ``GridDetached``) ends the stage non-zero with the grid's message and how
   to watch (``python -m replication status --paper P``) and collect (the same command again)
   them, instead of "papermill exited with 1".
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from replication.config import ConfigError, load_profile
from replication.config.profiles import is_profile_file
from replication.orchestration.workspace import (LOCK_ENV, PRODUCTS_ENV, PUBLISHED_PROFILE, RESULTS, WORKSPACE,
                                                 committed_params, stage_marker)
from replication.stage_params import (PAPER_STAGES, SMALL, STAGES, load_params, profile_spec, scale_of,
                                      validate_stage)
from replication.store.lock import is_lock_file
from replication.store.manifest import MANIFEST

CLEARED = ("tables", "figures", "summary.json")
"""Products replaced as a whole on success (a table or figure no longer made does not linger)."""
FAILED = WORKSPACE / "failed"
"""Where a failed stage leaves its executed notebook (up to the failing cell)."""

PUBLISHED = {"base": RESULTS / "base-model", "report": RESULTS / "summary.md",
             **{p: RESULTS / p for p in PAPER_STAGES}}
TRIAL_NAME = {"base": "base-model", "report": "summary.md", **{p: p for p in PAPER_STAGES}}


def destination(stage: str, params_file: str | Path, params: dict) -> tuple[Path, bool]:
    """(where the stage writes, whether that is the published place). A profile file of the
    user's (params.yaml ``profile`` + ``profile_dir``) writes ``workspace/<its stem>/``, what
    dvc.yaml declares as ``workspace/${profile}/...``."""
    from replication.config.profiles import profile_name

    scale = scale_of(params, params_file)
    if scale != SMALL:  # dvc.yaml's workspace/${scale}/...: the scale's own place, never results/
        return WORKSPACE / scale / TRIAL_NAME[stage], False
    profile = profile_name(profile_spec(params, params_file))
    if profile != PUBLISHED_PROFILE:
        return WORKSPACE / profile / TRIAL_NAME[stage], False
    if stage in PAPER_STAGES:
        committed = committed_params(params_file)
        if committed is not None and committed.get(stage) != params.get(stage):
            raise ConfigError(
                f"{params_file}: {stage}: edited since the last commit, with profile {PUBLISHED_PROFILE}: "
                f"results/ holds the published default and changes only with the committed params.yaml. "
                f"Commit the edit to publish it, or try it elsewhere: `dvc exp run -S profile=quick ...` "
                f"(writes workspace/quick/) or the notebook with parameters (README, \"Trying things\")")
    return PUBLISHED[stage], True


STAND_IN_FOLDERS = ((PUBLISHED_PROFILE, "profile"), (SMALL, "scale"))
"""The committed stand-ins: dvc.yaml declares every stage's trial outputs twice, under
``workspace/${profile}/`` (a small-scale trial) and ``workspace/${scale}/`` (another scale);
exactly one of the two is a real trial, and for the published default neither is:
``workspace/default/`` and ``workspace/small/`` stand in for them."""


def _write_marker(stage: str) -> None:
    """The committed stand-ins for the declared trial outputs a stage does not write (see
    STAND_IN_FOLDERS and workspace.stage_marker), left as they are when already current."""
    from replication.store import write_atomic

    for folder, var in STAND_IN_FOLDERS:
        path = WORKSPACE / folder / TRIAL_NAME[stage]
        if stage != "report":
            path = path / "README.md"
        text = stage_marker(stage, TRIAL_NAME[stage], str(PUBLISHED[stage]) + ("" if stage == "report" else "/"),
                            folder=folder, var=var)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
        if stage in PAPER_STAGES:
            _paper_stand_ins(path.parent, stage)


def _paper_stand_ins(folder: Path, paper: str) -> None:
    """dvc.yaml declares a paper's trial summary (metrics) and manifest apart from each other
    (``workspace/${profile}/<paper>/summary.json`` and ``MANIFEST.json``): split, so that
    ``dvc exp show`` of a trial shows the trial's numbers. For the default profile they are
    stand-ins: an empty summary (its metrics are results/<paper>/summary.json) and a manifest over
    this folder, rewritten only when it no longer verifies (its timestamp would churn git)."""
    from replication.store import DamagedArtifact, write_atomic
    from replication.store.products import SUMMARY, verify_products, write_products_manifest

    summary = folder / SUMMARY
    if not summary.is_file() or summary.read_text() != "{}\n":
        write_atomic(summary, "{}\n")
    try:
        verify_products(folder, nested=False)
    except DamagedArtifact:
        write_products_manifest(folder, extra={"paper": paper, "stand_in_for": str(PUBLISHED[paper])})


def run_stage(stage: str, params_file: str | Path = "params.yaml") -> int:
    if stage not in STAGES:
        raise ConfigError(f"stage: unknown stage {stage!r}; known: {list(STAGES)}")
    from replication.cli_checks import STAGE_ENV

    os.environ[STAGE_ENV] = stage  # the commands this stage starts may write under results/
    print(validate_stage(params_file, stage), flush=True)
    params = load_params(params_file)
    dest, published = destination(stage, params_file, params)
    spec = profile_spec(params, params_file)
    print(f"stage {stage}: writing {dest}" + (" (published default)" if published else
          f" (profile {spec}: a trial; results/ is not touched)"), flush=True)
    from replication.store import writer_lock

    with writer_lock(dest, what=f"stage {stage}"):
        _write_marker(stage)  # the declared trial outputs this stage does not write (STAND_IN_FOLDERS)
        if stage in PAPER_STAGES:
            return _paper_stage(stage, params_file, dest, spec)
        _die_with_launcher(stage)  # the base stage's SFT subprocess must not outlive dvc either
        if stage == "report":
            return _report_stage(dest, published)
        scale = scale_of(params, params_file)
        if scale != SMALL:
            return _scale_base_stage(scale, params, params_file, dest)
        return _base_stage(spec, dest, published)


# ----------------------------------------------------------------------------- base, report


def _die_with_launcher(stage: str) -> None:
    from replication.interrupts import descendants, watch_launcher

    def gone() -> None:
        print(f"stage {stage}: launcher gone; stopping", file=sys.stderr, flush=True)
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(137)

    watch_launcher(gone)


def _base_stage(profile: str, dest: Path, published: bool) -> int:
    """``profile``: a built-in name or a profile file's path (load_profile takes both)."""
    from replication.config.profiles import profile_name

    from replication.orchestration.base_model import KEY_FILE, base_key, ensure_base_model

    if published:
        print(ensure_base_model(profile, dest))
        return 0
    cfg = load_profile(profile)
    model = Path(cfg.model.path)
    if model.resolve() != PUBLISHED["base"].resolve():
        print(ensure_base_model(profile, dest))  # its own model (or a note where it lives)
        return 0
    # The profile trains from the published base model, which only the default profile writes.
    key = base_key(profile)
    have = (model / KEY_FILE).read_text().strip() if (model / KEY_FILE).exists() else "none"
    same = "the same warm start" if have == key else f"not rebuilt for this profile (its key {key}, the model's {have})"
    note = (f"# workspace/{profile_name(profile)}/base-model\n\nProfile {profile} trains from the published base model "
            f"`{model}` (its `model.path`): {same}. Only the default profile writes results/base-model.\n")
    from replication.store import write_atomic

    dest.mkdir(parents=True, exist_ok=True)
    write_atomic(dest / "README.md", note)
    print(note.splitlines()[2])
    return 0


def _scale_base_stage(scale: str, params: dict, params_file: str | Path, dest: Path) -> int:
    """The base models of a scale's paper profiles (``section_at_scale``): at ``rehearsal`` the
    SmolLM2 conversion (``prepare-model``, once per model folder); at ``paper`` the hub models,
    which must be pinned by the hub lock file ``python -m replication prefetch --scale paper``
    writes (runs load them offline at that commit, and their keys hold it). ``dest/MODELS.json``
    records each paper's profile, model and revision."""
    import json

    from replication.store import write_atomic
    from replication.store.run_key import UNPINNED, hub_revisions
    from replication.config import to_dict
    from replication.stage_params import section_at_scale

    models, built = {}, set()
    for paper in PAPER_STAGES:
        profile = section_at_scale(params, paper, params_file)["profile"]
        cfg = load_profile(profile)
        entry = {"profile": profile, "source": cfg.model.source, "model": cfg.model.path}
        if cfg.model.source == "hub":
            revisions = hub_revisions(to_dict(cfg))
            missing = sorted(k for k, v in revisions.items() if v == UNPINNED)
            if missing:
                raise ConfigError(f"stage base at scale {scale}: {', '.join(missing)} not pinned (no revision in the "
                                  f"profile or the hub lock file): run `python -m replication prefetch --scale {scale}` "
                                  f"on a machine that reaches the hub first (docs/paper_scale.md)")
            entry["revisions"] = revisions
        elif cfg.model.path not in built:
            subprocess.run([sys.executable, "-m", "replication", "prepare-model", "--profile", profile], check=True)
            built.add(cfg.model.path)
        models[paper] = entry
    dest.mkdir(parents=True, exist_ok=True)
    write_atomic(dest / "MODELS.json", json.dumps({"scale": scale, "papers": models}, indent=1, sort_keys=True) + "\n")
    print(f"stage base at scale {scale}: " + "; ".join(f"{p}: {e['model']}" for p, e in models.items()))
    return 0


def _report_stage(dest: Path, published: bool) -> int:
    from replication.report.summary import write_summary

    root = RESULTS.parent  # the positive-control study's verdict opens the page (results/regime)
    if published:
        write_summary(RESULTS, dest, positive_control_root=root)
    else:  # the trial's papers beside the published ones
        write_summary(dest.parent, dest, beside=RESULTS, positive_control_root=root)
    print(f"wrote {dest}")
    return 0


# ----------------------------------------------------------------------------- paper stages


def _recover(dest: Path) -> None:
    """A stage killed between the two renames of a swap left ``.X.old-<pid>`` beside ``X``:
    restore it if ``X`` is missing, else drop it."""
    if not dest.is_dir():
        return
    for old in dest.glob(".*.old-*"):
        name = old.name[1:].rsplit(".old-", 1)[0]
        if not (dest / name).exists():
            os.rename(old, dest / name)
        elif old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def swap_products(staging: Path, dest: Path, seal: Callable[[], object] | None = None) -> list[str]:
    """Move every product in ``staging`` into ``dest`` (each one by rename: old one aside, new one
    in, old one removed), plus remove the CLEARED products the notebook no longer made.
    Writer-lock files the notebook took in ``staging`` (``.<name>.lock``, replication.store) are
    not products: they stay behind, so a lock another process holds in ``dest`` is never
    renamed over. ``seal`` (the paper manifest's writer) runs once the products are in. Signals
    are held off for the renames and the seal, so Ctrl-C cannot stop it halfway."""
    dest.mkdir(parents=True, exist_ok=True)
    names = sorted({p.name for p in staging.iterdir() if not is_lock_file(p.name)} | set(CLEARED))
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    olds = []
    try:
        for name in names:
            new, cur, old = staging / name, dest / name, dest / f".{name}.old-{os.getpid()}"
            if cur.exists() or cur.is_symlink():
                os.rename(cur, old)
                olds.append(old)
            if new.exists():
                os.rename(new, cur)
        for old in olds:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        if seal is not None:
            seal()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    return names


def seal_products(dest: Path, paper: str) -> dict:
    """The paper manifest over what ``dest`` now holds (store/products.py): summary, tables,
    figures, notebook, and the manifests of its exports and measurement. Every reader of the
    summary and tables verifies it; ``dvc.yaml`` declares it as the stage's output."""
    from replication.store.products import write_products_manifest

    return write_products_manifest(dest, extra={"paper": paper, "stage": f"python -m replication stage {paper}"})


class _Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _paper_stage(paper: str, params_file: str | Path, dest: Path, spec: str | None = None) -> int:
    """``spec``: the profile as load_profile takes it; a profile file's path is passed to the
    notebook as its ``profile`` parameter (params.yaml's ``profile`` is then only its stem)."""
    from replication.interrupts import kill_tree, spawn_bound, watch_launcher

    _recover(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{paper}.stage-*"):  # left by a stage killed with -9 (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    staging = dest.parent / f".{paper}.stage-{os.getpid()}"
    staging.mkdir()
    executed = staging / f"{paper}.ipynb"
    cmd = [sys.executable, "-m", "papermill", f"notebooks/{paper}.ipynb", str(executed), "-k", "python3",
           "--cwd", ".", "-p", "section", paper, "-p", "params_file", str(params_file),
           "-p", "out_root", str(dest.parent), "--log-output", "--log-level", "INFO"]
    if spec is not None and is_profile_file(spec):
        cmd += ["-p", "profile", spec]
    env = {**os.environ, PRODUCTS_ENV: str(staging.resolve()), LOCK_ENV: str(dest.resolve())}
    proc = spawn_bound(cmd, env=env)  # before any thread starts (see spawn_bound)
    # Once papermill is gone, exactly one of two threads finishes the stage: the main thread (papermill
    # ended, or a signal reached us) or the launcher watchdog (dvc died). The watchdog holds this lock
    # from the moment it starts until os._exit, so the main thread, woken by the papermill death the
    # watchdog caused, waits here instead of cleaning up beside it (both removing staging/, one moving
    # the executed notebook the other deletes, the process exiting with staging/ half removed).
    finishing = threading.Lock()

    def launcher_gone() -> None:  # dvc (or whoever started us) died: take everything down
        finishing.acquire()  # never released: os._exit below ends the process
        print(f"stage {paper}: launcher gone; stopping papermill and its kernel", file=sys.stderr, flush=True)
        kill_tree(proc, grace_s=5.0)
        shutil.rmtree(staging, ignore_errors=True)
        os._exit(137)

    watch_launcher(launcher_gone)

    def on_signal(signum: int, frame: object) -> None:
        raise _Stopped(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        rc = proc.wait()
    except _Stopped as stop:
        with finishing:
            print(f"stage {paper}: stopped by {stop}; {dest} left as it was", file=sys.stderr, flush=True)
            kill_tree(proc)
            shutil.rmtree(staging, ignore_errors=True)
            return 128 + stop.signum
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    with finishing:
        return _finish(paper, params_file, dest, staging, executed, rc)


def _finish(paper: str, params_file: str | Path, dest: Path, staging: Path, executed: Path, rc: int) -> int:
    """After papermill exited with ``rc``: swap the products in, or leave ``dest`` as it was."""
    if rc != 0:
        kept = ""
        detached = detached_runs(executed)
        if executed.exists() and detached is None:
            FAILED.mkdir(parents=True, exist_ok=True)
            shutil.move(str(executed), FAILED / executed.name)
            kept = f"; the executed notebook up to the failing cell: {FAILED / executed.name}"
        shutil.rmtree(staging, ignore_errors=True)
        if detached is not None:  # not a failure: the runs fly on; say how to watch and collect them
            print(detached_note(paper, params_file, detached, dest), file=sys.stderr)
            return rc
        print(f"stage {paper}: papermill exited with {rc}; {dest} left as it was{kept}", file=sys.stderr)
        return rc
    names = swap_products(staging, dest, seal=lambda: seal_products(dest, paper))
    shutil.rmtree(staging, ignore_errors=True)
    print(f"stage {paper}: {', '.join(names)} swapped into {dest}, sealed by {dest / MANIFEST}")
    return 0


DETACHED = "GridDetached"
"""The exception a grid raises when it left runs in flight (``launch.inflight.GridDetached``)."""


def detached_runs(executed: Path) -> str | None:
    """GridDetached's message when the notebook stopped on it (its executed copy's error output,
    as papermill saved it), else None."""
    import nbformat

    try:
        nb = nbformat.read(executed, as_version=4)
    except Exception:  # noqa: BLE001 (no executed notebook, or a half-written one: no message to show)
        return None
    for cell in nb.cells:
        for out in cell.get("outputs", ()):
            if out.get("output_type") == "error" and out.get("ename") == DETACHED:
                return str(out.get("evalue", "")).strip()
    return None


def detached_note(paper: str, params_file: str | Path, message: str, dest: Path) -> str:
    """What the stage prints when its grid detached: the grid's own message, then how to watch
    the runs and how to collect them from the stage's side."""
    params = "" if str(params_file) == "params.yaml" else f" --params {params_file}"
    return (f"stage {paper}: {DETACHED}: {message}\n"
            f"stage {paper}: the runs are in flight, not failed. Watch them: `python -m replication status "
            f"--paper {paper}{params}`. Collect them: run the same `dvc exp run` / `dvc repro` (or `python -m "
            f"replication stage {paper}{params}`) again; it waits for the jobs still queued or running and "
            f"makes the products once every run is in. {dest} left as it was until then")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m replication stage", description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=[s for s in STAGES])
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    try:
        return run_stage(args.stage, args.params)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        return e.returncode
