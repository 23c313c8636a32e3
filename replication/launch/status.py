"""``python -m replication status [--paper vip] [--params params.yaml] [--cache DIR]``: a grid's runs
and where each one is.

    $ python -m replication status --paper vip
    vip: profile default, 3 arms x 10 seeds, exports in results/vip/runs, run cache .cache/runs
    arm        seed  key           state      detail
    RLOO       0     3f2a9c1b0d4e  done       export results/vip/runs/RLOO/s0
    RLOO+VIP   0     9d0e4b7a21c3  in flight  job 812_1 RUNNING (submitted 2026-12-03T10:00:00Z from login1)
    RLOO+VIP   1     5b2e7f90aa14  failed     job 812_2 TIMEOUT; run log .cache/runs/5b2e....log, job log ...
    RLOO       1     77c1d0e5f6a2  missing    (a checkpoint in the cache: it resumes)
    vip: 30 runs: 27 done, 1 in flight, 1 failed, 1 missing

The runs are the ones the paper's stage would run (params.yaml's section at its scale, keys made
exactly as ``run_grid`` makes them, exports where the stage puts them: ``stage.destination``). A run is **done** when its export (the stage's place, or a
published one a trial copies) or its cache entry verifies and holds its key; **in flight** when
its recorded job (``launch.inflight``) is queued, running or requeued; **failed** when that job
ended otherwise (the next grid submits it again); **missing** when no job was recorded for it.

Nothing here needs the grid that submitted the jobs: the states come from ``squeue`` and
``sacct`` (``launch.slurm_queue``), so it works on a login node, outside DVC, after the grid
returned (``launcher.options.detach``) or died. Where SLURM cannot be reached, a recorded job's
state is shown as unknown. Exit 0 once the table is printed; 2 for a bad parameter.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path

from replication.config import ConfigError
from replication.launch.inflight import InFlight, read_record
from replication.launch.slurm_queue import QueueUnreadable, job_states, phase


@dataclasses.dataclass(frozen=True)
class RunStatus:
    """One run of a grid and where it is."""

    arm: str
    """The arm's name."""
    seed: int
    """The run's seed."""
    key: str
    """The run key (its cache entry's name)."""
    state: str
    """``done``, ``in flight``, ``failed``, ``missing`` (or ``unknown`` when SLURM cannot say)."""
    detail: str
    """Where it is done, its job and SLURM state, or its logs."""


def grid_status(profile: str, arms: list, seeds: list[int], out_dir: str | Path, cache: str | Path, *,
                steps: int | None = None, shape: Mapping | None = None,
                published: list[Path] | tuple = ()) -> list[RunStatus]:
    """The status of every (arm, seed) of the grid ``run_grid(profile, arms, seeds, out_dir,
    steps=steps, cache=cache, shape=shape, published=published)`` would run."""
    from replication.arms import _slug
    from replication.orchestration.run_cache import cached_run, exported_key, published_exports, run_key
    from replication.store.run_key import FileDigests
    from replication.train.checkpoint import checkpoint_path

    cache, out_dir, digests = Path(cache), Path(out_dir), FileDigests()
    elsewhere = published_exports(list(published))
    found: dict[tuple[str, int], RunStatus] = {}
    records: dict[tuple[str, int], InFlight] = {}
    keys = {}
    for arm in arms:
        for seed in seeds:
            key = keys[arm.name, seed] = run_key(profile, arm.overrides, seed, steps, digests, shape)[0]
            dest = out_dir / _slug(arm.name) / f"s{seed}"
            done = (f"export {dest}" if exported_key(dest) == key else
                    f"published {elsewhere[key]}" if key in elsewhere else
                    f"cache {cache / key}" if cached_run(key, cache, warn=False) is not None else None)
            if done:
                found[arm.name, seed] = RunStatus(arm.name, seed, key, "done", done)
            elif (rec := read_record(cache, key)) is not None:
                records[arm.name, seed] = rec
            else:
                resumes = " (a checkpoint in the cache: it resumes)" if checkpoint_path(cache / key) else ""
                found[arm.name, seed] = RunStatus(arm.name, seed, key, "missing", resumes.strip())
    try:
        states = job_states([r.job_id for r in records.values()]) if records else {}
    except QueueUnreadable as e:
        states = {r.job_id: f"unknown: {e}" for r in records.values()}
    for (name, seed), rec in records.items():
        state = states[rec.job_id]
        where = f"job {rec.job_id} {state}"
        if state.startswith("unknown"):
            found[name, seed] = RunStatus(name, seed, rec.key, "unknown", f"job {rec.job_id}: {state[9:]}")
        elif phase(state) == "in flight":
            found[name, seed] = RunStatus(name, seed, rec.key, "in flight",
                                          f"{where} (submitted {rec.submitted} from {rec.host})")
        elif phase(state) == "done" and cached_run(rec.key, cache, warn=False) is not None:
            found[name, seed] = RunStatus(name, seed, rec.key, "done", f"cache {cache / rec.key} (job {rec.job_id})")
        else:
            why = " without a verifying run" if phase(state) == "done" else ""
            found[name, seed] = RunStatus(name, seed, rec.key, "failed",
                                          f"{where}{why}; run log {rec.log}, job log {rec.job_log}")
    return [found[a.name, s] for a in arms for s in seeds]


def paper_status(paper: str, params_file: str | Path | None, cache: str | Path) -> tuple[str, list[RunStatus]]:
    """(a heading line, the runs) of the grid ``paper``'s stage runs with params.yaml as it is."""
    from replication.arms import select_arms
    from replication.orchestration.grid import load_section
    from replication.orchestration.stage import destination
    from replication.orchestration.workspace import RESULTS, paper_place
    from replication.paths import params_path
    from replication.stage_params import load_params

    params_file = params_path(params_file)
    sec = load_section(paper, params_file)
    params = load_params(params_file)
    try:  # where the stage (dvc repro / dvc exp run) exports them: workspace/<scale or profile>/<paper>
        dest, published_here = destination(paper, params_file, params)
    except ConfigError:  # a stage would refuse this params file (an edited section at the published
        place = paper_place(paper, params_file, params)  # profile): the notebook's own place, then
        dest, published_here = place.root / paper, place.published
    out = dest / "runs"
    arms, seeds = select_arms(sec)
    published = [] if published_here else [RESULTS / paper / "runs"]
    rows = grid_status(sec["profile"], arms, seeds, out, cache, steps=sec.get("steps"),
                       shape=sec.get("shape") or None, published=published)
    head = (f"{paper}: profile {sec['profile']}, {len(arms)} arms x {len(seeds)} seeds, exports in {out}, "
            f"run cache {cache}")
    return head, rows


def table(rows: list[RunStatus]) -> str:
    """The runs, one per line, in aligned columns (the key's first 12 characters)."""
    lines = [("arm", "seed", "key", "state", "detail")]
    lines += [(r.arm, str(r.seed), r.key[:12], r.state, r.detail) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(line[:4], widths)) + "  " + line[4] for line in lines)


def summary(rows: list[RunStatus]) -> str:
    counts = {s: sum(r.state == s for r in rows) for s in ("done", "in flight", "failed", "missing", "unknown")}
    return f"{len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "unknown")


DESCRIPTION = "a paper grid's runs: done, in flight (SLURM job and state), failed (job and logs) or missing"


def configure_parser(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's arguments (``replication.__main__`` adds them to its ``status`` sub-command)."""
    from replication.stage_params import PAPER_STAGES  # light: the CLI builds this parser for every command

    ap.add_argument("--paper", action="append", choices=PAPER_STAGES,
                    help="the paper whose grid to show (repeatable; default: every paper)")
    ap.add_argument("--params", type=Path, help="params file (default: the repository's params.yaml)")
    ap.add_argument("--cache", type=Path, help="the run cache (default: $REPLICATION_RUN_CACHE, else .cache/runs, "
                                               "as the grid's)")
    return ap


def run_command(args: argparse.Namespace) -> int:
    """Print each paper's table; a bad params file is a ConfigError (exit 2 from the CLI)."""
    from replication.orchestration.run_cache import DEFAULT_CACHE
    from replication.stage_params import PAPER_STAGES

    for i, paper in enumerate(args.paper or PAPER_STAGES):
        head, rows = paper_status(paper, args.params, args.cache or DEFAULT_CACHE)
        print(("\n" if i else "") + head + "\n" + table(rows) + f"\n{paper}: {summary(rows)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = configure_parser(argparse.ArgumentParser(prog="python -m replication status",
                                                    description=DESCRIPTION)).parse_args(argv)
    try:
        return run_command(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
