"""A paper's grid of (arm × seed) training runs, two at a time on two cores, over the run cache.

    pr = run_paper("vip")                                   # params.yaml's arms, seeds, steps
    pr = run_paper("vip", overrides={"optim.lr": 6e-5}, seeds=[0], arms=["RLOO", "RLOO+VIP"])

A run whose export in ``OUT/<arm>/s<seed>/`` verifies and holds the same key (its key record,
checked against its own files) is loaded as is; one that a published export holds (a trial's
``published`` folders: results/<paper>/runs) is copied; one in the run cache is exported; only the
rest trains (with a progress bar). The grid says which is which before it starts.
Every export is checked before anything trains: a damaged one stops the grid with an error
naming it (run_cache.exported_key); a damaged cache entry is retrained with a warning.
The returned ``PaperRun`` (``replication.report.pipeline``) holds the tidy frames the notebooks read.
"""

from __future__ import annotations

import concurrent.futures as cf
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from replication.interrupts import RunGuard
from replication.arms import QUICK_PROFILE, Arm, _slug, select_arms  # noqa: F401 (notebooks read Arm here)
from replication.config import ConfigError
from replication.launch import LauncherConfig, RunShape, make_backend
from replication.launch.collect import detached_message, still_in_flight
from replication.launch.inflight import GridDetached, RunDetached, remove_record
from replication.orchestration.run_cache import (DEFAULT_CACHE, cached_run, copy_export, ensure_run, export_run, exported_key,
                                                 published_exports, run_key, run_shape_of)
from replication.store.run_key import FileDigests
from replication.report.pipeline import PaperRun, load_paper_run


def run_grid(
    profile: str,
    arms: list[Arm],
    seeds: list[int],
    out_dir: str | Path,
    *,
    steps: int | None = None,
    workers: int | None = 2,
    cache: str | Path = DEFAULT_CACHE,
    published: list[Path] | tuple = (),
    launcher: LauncherConfig | Mapping | None = None,
    shape: Mapping | None = None,
    detach: bool | None = None,
) -> pd.DataFrame:
    """Train every missing (arm, seed), export each to OUT/<arm>/s<seed>/, return one row per run.
    ``published``: export folders (``<root>/<arm>/s<seed>``) whose runs are copied, not retrained,
    when they hold a run's key.

    ``launcher`` (params.yaml's ``launcher:`` mapping, or a ``LauncherConfig``; None: local) places
    the runs: on CPU as many at once as the cores hold their processes × threads, on GPUs one
    disjoint slice each (``replication.launch``); ``workers`` caps the runs at once (None: as the
    launcher's slots allow). ``shape``: fields of every run's ``RunShape`` (e.g. ``{"processes":
    8}``), which enter the keys; the launcher never does.

    On a scheduler (``slurm``) a run whose job an earlier grid submitted and that is still queued
    or running is waited for, never submitted again (``launch.collect``). ``detach`` (None: the
    launcher's ``options.detach``): submit the missing runs and return without waiting, raising
    ``GridDetached`` (how many are in flight, how to watch and collect them) once the finished
    ones are exported; running the grid again collects them."""
    cache, out_dir = Path(cache), Path(out_dir)
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique: {names}")
    if not seeds:
        raise ValueError("seeds: at least one seed is needed")
    keys, digests = {}, FileDigests()  # each named file hashed once for the whole grid
    for arm in arms:  # validate every configuration before any compute
        for seed in seeds:
            keys[arm.name, seed] = run_key(profile, arm.overrides, seed, steps, digests, shape)[0]
    jobs = [(a, s) for s in seeds for a in arms]
    elsewhere = {k: v for k, v in published_exports(list(published)).items()
                 if Path(v).resolve().parent.parent != out_dir.resolve()}
    rows, todo, found = [], [], {"exported": 0, "published": 0, "cache": 0}
    for arm, seed in jobs:
        dest = out_dir / _slug(arm.name) / f"s{seed}"
        key = keys[arm.name, seed]
        if exported_key(dest) == key:
            found["exported"] += 1
            remove_record(cache, key)  # a job recorded for a run found finished is over
        elif key in elsewhere:
            copy_export(elsewhere[key], dest, key)
            found["published"] += 1
        else:
            cached = cached_run(key, cache, warn=False)  # ensure_run warns when it retrains
            if cached is None:
                todo.append((arm, seed))
                continue
            export_run(cached, dest, key)
            remove_record(cache, key)
            found["cache"] += 1
        rows.append({"arm": arm.name, "seed": seed, "dir": str(dest)})
    # the missing runs whose jobs an earlier grid submitted and that still run: waited for
    flying = still_in_flight(cache, {keys[a.name, s]: f"{a.name} seed {s}" for a, s in todo}) if todo else {}
    adopt = [(a, s) for a, s in todo if keys[a.name, s] in flying]
    todo = [(a, s) for a, s in todo if keys[a.name, s] not in flying]
    print(f"{len(jobs)} runs: {found['exported']} already exported here, {found['published']} copied from the "
          f"published results, {found['cache']} from the run cache, {len(todo)} to train"
          + (": " + ", ".join(f"{a.name} s{s}" for a, s in todo[:12]) + (" ..." if len(todo) > 12 else "")
             if todo else ""))
    if adopt:
        print(f"{len(adopt)} run(s) in flight from an earlier submission, not submitted again: "
              + ", ".join(f"{a.name} s{s} (job {flying[keys[a.name, s]].job_id})" for a, s in adopt[:12])
              + (" ..." if len(adopt) > 12 else ""))
    submitted, waiting, detaching = [], [flying[keys[a.name, s]] for a, s in adopt], False
    if todo or adopt:
        backend = make_backend(launcher)
        detaching = bool(LauncherConfig.from_mapping(launcher).options.get("detach") if detach is None else detach)
        if detaching and not backend.batches:
            raise ConfigError(f"detach: launcher.backend={backend.name} runs its runs as this process's "
                              f"children; only a scheduler's backend (slurm) can leave them in flight")
        backend.detach = detaching
        if adopt and not hasattr(backend, "adopt"):
            raise ConfigError(f"{len(adopt)} run(s) of this grid are in flight on SLURM (jobs "
                              f"{', '.join(sorted({r.array for r in waiting}))}); launcher.backend={backend.name} "
                              f"cannot follow them: collect them with launcher.backend: slurm, or scancel them first")
        if detaching:
            adopt = []  # not waited for: GridDetached counts them
        shapes = [run_shape_of(profile, a.overrides, s, shape) for a, s in todo]
        for one in set(shapes):  # a run the launcher can never place stops the grid before any compute
            backend.check(one)
        at_once = min(len(todo), min((backend.capacity(one) for one in set(shapes)), default=1)
                      if workers is None else workers)
        if backend.batches:  # a scheduler queues them: every run is submitted at once, as one array
            at_once = len(todo) + len(adopt)
            backend.expect(len(todo))
        failed: list[Exception] = []
        # Ctrl-C / SIGTERM (RunGuard): queued runs never start, running ones are terminated (the
        # launcher cancels them); finished runs and checkpoints stay in the cache, so running
        # the grid again resumes it. A failed run stops the grid the same way.
        pool, guard = cf.ThreadPoolExecutor(max_workers=max(1, at_once)), RunGuard()
        try:
            with guard, tqdm(total=len(todo) + len(adopt), desc="runs") as bar:
                def train(arm: Arm, seed: int):
                    try:
                        return ensure_run(profile, arm.overrides, seed, steps, cache, arm.name, guard, digests,
                                          launcher=backend, shape=shape)
                    finally:
                        backend.settled()  # a run that never reached the launcher: do not wait for it

                def collect(arm: Arm, seed: int):  # an earlier grid's job, still queued or running
                    key = keys[arm.name, seed]
                    backend.wait(backend.adopt(flying[key]))  # JobFailed names it when it fails
                    run_dir = cached_run(key, cache)
                    if run_dir is None:
                        raise RuntimeError(f"slurm job {flying[key].job_id} ({arm.name} seed {seed}) completed but "
                                           f"its run {cache / key} does not verify; the next run of the grid "
                                           f"trains it again (run log: {flying[key].log})")
                    remove_record(cache, key)
                    return run_dir

                futures = {pool.submit(train, a, s): (a, s) for a, s in todo}
                futures.update({pool.submit(collect, a, s): (a, s) for a, s in adopt})
                for fut in cf.as_completed(futures):
                    arm, seed = futures[fut]
                    try:
                        run_dir = fut.result()
                    except RunDetached as e:  # submitted, not waited for (detach)
                        submitted.append(e.record)
                        bar.update(1)
                        continue
                    except Exception as e:  # a scheduler's jobs are independent: collect the others first
                        if not backend.batches:
                            raise
                        failed.append(e)
                        print(f"run {arm.name} s{seed} failed:\n{e}", file=sys.stderr, flush=True)
                        continue
                    dest = out_dir / _slug(arm.name) / f"s{seed}"
                    export_run(run_dir, dest, keys[arm.name, seed])
                    rows.append({"arm": arm.name, "seed": seed, "dir": str(dest)})
                    bar.update(1)
        except BaseException:
            guard.terminate_all()
            backend.cancel_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if failed:  # every other run has ended (or, detached, is left in flight): nothing to cancel
            raise failed[0] if len(failed) == 1 else RuntimeError(
                f"{len(failed)} runs failed:\n\n" + "\n\n".join(str(e) for e in failed)) from failed[0]
    if submitted or (detaching and waiting):  # the finished runs are exported; the rest flies on
        raise GridDetached(detached_message(submitted, waiting))
    order = {n: i for i, n in enumerate(names)}
    return pd.DataFrame(rows).sort_values(["arm", "seed"], key=lambda c: c.map(order) if c.name == "arm" else c).reset_index(drop=True)


def prune_exports(runs_dir: str | Path, keep: set[tuple[str, int]]) -> list[Path]:
    """Remove the exported runs under ``runs_dir`` (``<arm>/s<seed>`` folders holding a manifest)
    that are not the grid's ``keep`` (arm name, seed), with their writer-lock files and emptied
    arm folders; return what went. A paper's folder then holds exactly the runs of the grid that
    wrote it: an arm dropped or renamed in params.yaml leaves no runs behind for the paper's
    manifest to seal. Called once the whole grid is exported; other files are never touched."""
    import re
    import shutil

    from replication.store import MANIFEST

    runs_dir = Path(runs_dir)
    wanted = {(_slug(a), f"s{s}") for a, s in keep}
    removed = []
    for seed_dir in sorted(runs_dir.glob("*/s*")):
        arm_dir = seed_dir.parent
        if (not seed_dir.is_dir() or not re.fullmatch(r"s\d+", seed_dir.name) or arm_dir.name.startswith(".")
                or (arm_dir.name, seed_dir.name) in wanted or not (seed_dir / MANIFEST).is_file()):
            continue
        shutil.rmtree(seed_dir)
        (arm_dir / f".{seed_dir.name}.lock").unlink(missing_ok=True)
        removed.append(seed_dir)
    for arm_dir in {p.parent for p in removed}:
        if arm_dir.is_dir() and not any(arm_dir.iterdir()):
            arm_dir.rmdir()
    if removed:
        print(f"removed {len(removed)} exported run(s) that are not in this grid (an arm or seed no longer run): "
              + ", ".join(f"{p.parent.name}/{p.name}" for p in removed[:12]) + (" ..." if len(removed) > 12 else ""))
    return removed


# ----------------------------------------------------------------------------- params.yaml


def load_section(section: str, params_file: str | Path | None = None) -> dict[str, Any]:
    """The section as params.yaml's ``scale`` resolves it (``stage_params.section_at_scale``:
    its profile, seeds, arms and shape at that scale), validated first: a bad params.yaml stops
    here, before any output is touched. ``params_file`` None: the repository's (replication.paths)."""
    from replication.paths import params_path
    from replication.stage_params import load_params, section_at_scale, validate_section

    params_file = params_path(params_file)
    params = load_params(params_file)
    validate_section(params, section, params_file)
    sec = section_at_scale(params, section, params_file)  # profile: a built-in name, or <profile_dir>/<profile>.yaml
    sec["workers"] = int(params.get("workers", 2))
    return sec


def run_paper(section: str, params_file: str | Path | None = None, out_root: str | Path | None = None,
              workers: int | None = None, *, profile: str | None = None, overrides: dict | None = None,
              seeds: list[int] | None = None, arms: list[str] | None = None,
              steps: int | None = None, notebook_params: dict | None = None,
              launcher: LauncherConfig | Mapping | None = None, shape: Mapping | None = None) -> PaperRun:
    """Train (or load) a paper's grid and read it back. ``profile``, ``overrides`` (dotted config
    keys applied to every arm), ``seeds``, ``arms`` and ``steps`` replace params.yaml's choice;
    ``notebook_params``: the notebook's other parameters that change its outputs.

    ``out_root`` None picks the place (orchestration.workspace): results/ for the published default
    only, else the trial's own ``workspace/<profile>[-<hash>]/``; an explicit ``out_root`` that is
    results/ is refused for a trial. The paper folder's writer lock is held for this process's life
    (a second writer on the same folder gets one line naming the holder), unless a DVC stage holds
    it for us (orchestration.stage), which also sends the products to its temporary folder.

    ``launcher``: where the runs go (``run_grid``); None: params.yaml's ``launcher:`` section, if
    it has one, else the local backend. It is not a notebook parameter and never places the
    outputs: a backend switch leaves every key, path and product as it is. ``shape``: fields of
    every run's shape (``run_grid``), which do enter the keys."""
    from replication.orchestration.workspace import RESULTS, claim_output, paper_place
    from replication.paths import params_path
    from replication.stage_params import load_params, notebook_value

    params_file = params_path(params_file)
    sec = load_section(section, params_file)
    # where the runs go: checked before any output is touched, never part of the place or a key
    launch = LauncherConfig.from_mapping(launcher if launcher is not None else load_params(params_file).get("launcher"))
    RunShape().replaced(shape or {})  # a bad shape field, before any output is touched
    overrides = notebook_value("overrides", overrides, dict)
    seeds = notebook_value("seeds", seeds, list)
    arms = notebook_value("arms", arms, list)
    notebook = {"overrides": overrides, "seeds": seeds, "arms": arms, "steps": steps, "shape": shape,
                **(notebook_params or {})}  # a shape makes other runs; a launcher never does
    place = paper_place(section, params_file, load_params(params_file), profile=profile, notebook=notebook)
    if profile:
        sec["profile"] = profile
    arm_list, seed_list = select_arms(sec, overrides, seeds, arms)
    shape = {**(sec.get("shape") or {}), **(shape or {})}  # the scale's declared shape, the notebook's over it
    out, products = claim_output(section, place, out_root)
    n_steps = steps if steps is not None else sec.get("steps")
    published = [] if place.published else [Path(RESULTS) / section / "runs"]  # a trial reuses them
    runs = run_grid(sec["profile"], arm_list, seed_list, out / "runs", steps=n_steps,
                    workers=workers or sec["workers"], published=published, launcher=launch, shape=shape)
    prune_exports(out / "runs", {(a.name, s) for a in arm_list for s in seed_list})
    return load_paper_run(section, sec["profile"], seed_list, [a.name for a in arm_list],
                          sec.get("baseline") or {}, products, runs)
