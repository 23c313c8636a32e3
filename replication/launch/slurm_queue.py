"""What SLURM says about jobs: their states from ``sacct`` (accounting) and ``squeue`` (the queue).

    job_states(["123_0", "123_1", "124"])   # {"123_0": "RUNNING", "123_1": "PENDING", "124": "FAILED"}
    phase("PENDING")                        # "in flight"   (or "done", "failed")

Neither assumes anything about the process asking: a grid that submitted the jobs, a later grid
collecting them, ``python -m replication status`` on a login node. ``squeue`` is the live truth
for a job still queued or running (accounting reaches ``sacct`` a moment later); ``sacct`` for a
job that has left the queue. A job that neither knows is ``GONE`` (accounting purged, another
cluster): its run is submitted again.
"""

from __future__ import annotations

import getpass
import subprocess

RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING"}
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "PREEMPTED",
           "SUBMITTED"}
"""States in which a job is not over (PREEMPTED and REQUEUED: requeued by the scheduler)."""
GONE = "GONE"
"""Neither ``squeue`` nor ``sacct`` knows the job."""


class QueueUnreadable(RuntimeError):
    """Neither ``sacct`` nor ``squeue`` answered: whether a job still runs cannot be told."""


def phase(state: str) -> str:
    """``in flight`` (queued, running, requeued), ``done`` (COMPLETED) or ``failed`` (anything
    else: FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, GONE)."""
    if state in WAITING or state in RUNNING:
        return "in flight"
    return "done" if state == "COMPLETED" else "failed"


def parse_sacct(text: str) -> dict[str, str]:
    """{job id: state} from ``sacct -n -P -X -o JobID,State`` (or ``squeue -o %i|%T``); a pending
    array range ``123_[0-3%2]`` is expanded, ``CANCELLED by 0`` is ``CANCELLED``."""
    states: dict[str, str] = {}
    for line in text.splitlines():
        if "|" not in line:
            continue
        jid, state = line.split("|")[:2]
        jid = jid.strip()
        state = state.split()[0] if state.strip() else "UNKNOWN"
        if "_[" in jid:
            main, rng = jid.split("_[", 1)
            for part in rng.rstrip("]").split("%")[0].split(","):
                lo, _, hi = part.partition("-")
                for i in range(int(lo), int(hi or lo) + 1):
                    states[f"{main}_{i}"] = state
        else:
            states[jid] = state
    return states


def _run(cmd: list[str]) -> str | None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def sacct_states(arrays: list[str]) -> dict[str, str] | None:
    """{job id: state} of every task of ``arrays`` in accounting (None: sacct failed)."""
    if not arrays:
        return {}
    out = _run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(sorted(set(arrays)))])
    return None if out is None else parse_sacct(out)


def squeue_states() -> dict[str, str] | None:
    """{job id: state} of this user's jobs in the queue, one line per array task (None: squeue failed)."""
    out = _run(["squeue", "-h", "-r", "-u", getpass.getuser(), "-o", "%i|%T"])
    return None if out is None else parse_sacct(out)


def job_states(job_ids: list[str]) -> dict[str, str]:
    """{job id: state} for ``job_ids`` (``<array>_<index>`` or plain ids): the queue's state while
    the job is queued or running, else accounting's; ``GONE`` when neither knows it. An array
    cancelled before any task started is one accounting record, its bare id: its tasks take its
    state. Raises ``QueueUnreadable`` when neither command answers."""
    queue = squeue_states()
    acct = sacct_states([j.split("_")[0] for j in job_ids])
    if queue is None and acct is None:
        raise QueueUnreadable(f"cannot tell the state of job(s) {', '.join(job_ids)}: "
                              f"neither squeue nor sacct answered (is SLURM reachable from here?)")
    out = {}
    for jid in job_ids:
        state = (queue or {}).get(jid) or (acct or {}).get(jid) or (acct or {}).get(jid.split("_")[0])
        if state is None and (queue is None or acct is None):  # the silent one may know it
            which = "squeue" if queue is None else "sacct"
            raise QueueUnreadable(f"cannot tell the state of job {jid}: {which} did not answer")
        out[jid] = state or GONE
    return out
