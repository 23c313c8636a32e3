"""Which of a grid's missing runs an earlier grid already submitted, and which of those still fly.

    flying = still_in_flight(cache, {key: "RLOO seed 0", ...})   # {key: InFlight} queued or running

The grid calls it for the runs it did not find finished (``orchestration.grid.run_grid``): a run
whose recorded job (``launch.inflight``) is still queued, running or requeued is waited for
(``SlurmBackend.adopt``), never submitted a second time; one whose job has ended without its run
reaching the cache (failed, cancelled, timed out, gone from SLURM, or completed without a
verifying run) is submitted again, with one line saying so. The states come from the scheduler
(``launch.slurm_queue``), so nothing here needs the process that submitted the jobs.
"""

from __future__ import annotations

import sys

from replication.launch.inflight import InFlight, read_record, record_path
from replication.launch.slurm_queue import QueueUnreadable, job_states, phase


def still_in_flight(cache, names: dict[str, str]) -> dict[str, InFlight]:
    """{key: record} of the runs ``names`` ({key: run name}) whose recorded job is not over; the
    others with a record are announced as submitted again (their record stays until then).
    Raises ``slurm_queue.QueueUnreadable`` when SLURM cannot say (nothing is submitted twice)."""
    records = {k: r for k in names if (r := read_record(cache, k)) is not None}
    if not records:
        return {}
    try:
        states = job_states([r.job_id for r in records.values()])
    except QueueUnreadable as e:
        raise QueueUnreadable(f"{e}; this grid's runs {', '.join(names[k] for k in records)} were submitted "
                              f"earlier and may still run: run it where SLURM answers, or remove their records "
                              f"({record_path(cache, next(iter(records)))}, ...) once their jobs are over") from None
    flying = {}
    for key, rec in records.items():
        state = states[rec.job_id]
        where = f"slurm job {rec.job_id} ({names[key]}, submitted {rec.submitted} from {rec.host})"
        if phase(state) == "in flight":
            flying[key] = rec
        elif phase(state) == "done":
            print(f"{where} completed, but its run is not in the cache: submitting it again "
                  f"(run log: {rec.log})", file=sys.stderr, flush=True)
        else:
            print(f"{where} ended {state}: submitting it again (run log: {rec.log}, job log: {rec.job_log})",
                  file=sys.stderr, flush=True)
    return flying


def detached_message(submitted: list[InFlight], waiting: list[InFlight]) -> str:
    """``GridDetached``'s message: how many runs are in flight, in which jobs, how to watch and
    how to collect them."""
    runs = submitted + waiting
    arrays = sorted({r.array for r in runs})
    parts = []
    if submitted:
        parts.append(f"{len(submitted)} submitted now")
    if waiting:
        parts.append(f"{len(waiting)} submitted earlier")
    return (f"{len(runs)} run(s) in flight on SLURM ({', '.join(parts)}; job(s) {', '.join(arrays)}), "
            f"not waited for (launcher.options.detach): their products cannot be made yet. "
            f"Watch them with `python -m replication status` (--paper NAME for one paper's grid); "
            f"run the grid (or the stage) again to collect them once they are done")
