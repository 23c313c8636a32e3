"""What runs inside a SLURM job of the ``slurm`` backend: the trainer, placed and vouched for.

submitit unpickles ``run_in_job`` in the job and calls it. It starts the same ``python -m
replication train ...`` the local backend starts (torchrun in front for a multi-process run) with
the run's environment, its log appended to the run's log, and the provenance variables of
``launch.env`` (backend ``slurm``, job ``<array>_<index>``, the job's hosts).

**The run folder's lock.** The grid holds the cache entry's writer lock for the whole run
(``run_cache.ensure_run``) and a local trainer trusts it because the grid is its parent
(``LOCK_ENV = <pid>:<folder>``, checked by ``train.run_folder._held_by_parent`` against
``getppid()``). Under SLURM the grid is on another process tree, maybe another host, so the
backend sends ``<pid>@<host>:<folder>`` instead and this process — the trainer's parent — stands
in for the grid:

- before the trainer starts, it checks the lock file: the lock is held (a non-blocking ``flock``
  fails) and its record names the grid's pid and host. If the lock is free (the grid is gone),
  it takes the lock itself; if someone else holds it, the job fails without training;
- it then tells the trainer ``<own pid>:<folder>`` and ``REPLICATION_PARENT_PID=<own pid>``, the
  local hand-off, so the trainer (and, through ``launch.bound``, torchrun's ranks) accept it and
  die with it;
- while the trainer runs it looks again every few seconds: when the grid's lock is released (the
  grid died) it takes the lock, so no second grid can start a writer on the folder; when anyone
  else holds it, it kills the trainer.

Nothing in ``replication/train`` changes for this, so the training code digest — and every run
key — is the same whichever backend placed a run. ``flock`` across hosts needs a file system that
supports it (NFSv4, Lustre and GPFS with flock enabled); the record names the host so that a pid
is never compared on the wrong machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from replication.launch.env import DEVICES, launch_env
from replication.launch.torchrun import PortBook, single_prefix, torchrun_prefix
from replication.store.lock import LockHeld, hold_writer_lock, lock_path

LOCK_ENV = "REPLICATION_RUN_LOCKED"
"""``train.run_folder.LOCK_ENV`` (not imported: this module must not import training code)."""
PARENT_ENV = "REPLICATION_PARENT_PID"
"""``replication.__main__.PARENT_ENV``: the trainer dies with this pid."""
WATCH_S = 5.0
"""How often the lock is looked at while the trainer runs."""


class JobRefused(RuntimeError):
    """The run folder's lock is held by a process that is neither the grid nor this job."""


def remote_lock_value(pid: int, host: str, folder: str) -> str:
    """``LOCK_ENV`` for a trainer that is not the grid's child: the grid's pid AND host."""
    return f"{pid}@{host}:{folder}"


def parse_remote_lock(value: str) -> tuple[str, str, str] | None:
    """(pid, host, folder) of ``remote_lock_value``'s form, None for anything else."""
    holder, sep, folder = value.partition(":")
    pid, at, host = holder.partition("@")
    if not (sep and at and pid.isdigit() and host and folder):
        return None
    return pid, host, folder


def lock_state(folder: str, pid: str, host: str) -> str:
    """``grid``: the lock is held and its record names ``pid`` on ``host``; ``mine``: it was free
    and this process now holds it; ``other``: someone else holds it."""
    try:
        hold_writer_lock(folder, "one trainer per run folder")
        return "mine"
    except LockHeld:
        pass
    try:
        info = json.loads(lock_path(folder).read_text() or "{}")
    except (OSError, ValueError):
        return "other"
    return "grid" if (str(info.get("pid")), info.get("host")) == (pid, host) else "other"


def job_id_from_env(env: dict[str, str] | None = None) -> str:
    """``<array>_<index>`` for an array task, else the job id (what sacct and scancel take)."""
    e = os.environ if env is None else env
    if e.get("SLURM_ARRAY_JOB_ID") and e.get("SLURM_ARRAY_TASK_ID"):
        return f"{e['SLURM_ARRAY_JOB_ID']}_{e['SLURM_ARRAY_TASK_ID']}"
    return e.get("SLURM_JOB_ID", "?")


def job_environment(run_env: dict[str, str], hosts: list[str], job_id: str) -> dict[str, str]:
    """The trainer's environment: the job's own (SLURM's variables, the GPUs SLURM gave it) with
    the run's settings on top, minus what placed the grid's side (its GPUs, its SLURM job if it
    ran inside one), plus the provenance variables."""
    env = dict(os.environ)
    for k, v in run_env.items():
        if k == DEVICES or k.startswith("SLURM_") or k.startswith("SUBMITIT_"):
            continue
        env[k] = v
    env.update(launch_env("slurm", hosts, job=job_id))
    return env


def _hosts() -> list[str]:
    try:
        import submitit

        return list(submitit.JobEnvironment().hostnames)
    except Exception:  # noqa: BLE001 (outside a submitit job: this host)
        return [socket.gethostname()]


def run_in_job(command: list[str], run_env: dict[str, str], log: str, processes: int) -> int:
    """Run the trainer in this job; raise when it fails (the job then ends FAILED in sacct)."""
    from replication.launch.local import _from_train

    job_id = job_id_from_env()
    env = job_environment(run_env, _hosts(), job_id)
    env.pop(PARENT_ENV, None)
    remote = parse_remote_lock(env.get(LOCK_ENV, ""))
    if remote is not None:
        pid, host, folder = remote
        state = lock_state(folder, pid, host)
        if state == "other":
            raise JobRefused(f"job {job_id}: {folder} is locked by another writer; not training")
        env[LOCK_ENV] = f"{os.getpid()}:{folder}"  # this process is the trainer's parent
        env[PARENT_ENV] = str(os.getpid())
    ports = PortBook()
    port = ports.take() if processes > 1 else None
    prefix = single_prefix() if processes == 1 else torchrun_prefix(processes, port, run_id=job_id)
    with open(log, "a") as out:
        out.write(f"[slurm job {job_id} on {','.join(_hosts())}]\n")
        out.flush()
        proc = subprocess.Popen(prefix + _from_train(command), stdout=out, stderr=subprocess.STDOUT, env=env)
    stop = threading.Event()
    if remote is not None and state == "grid":
        threading.Thread(target=_watch, args=(proc, remote, stop), daemon=True, name="lock-watch").start()
    try:
        rc = proc.wait()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    if rc != 0:
        raise RuntimeError(f"job {job_id}: the trainer exited with {rc} (log: {log})")
    return rc


def _watch(proc: subprocess.Popen, remote: tuple[str, str, str], stop: threading.Event) -> None:
    """While the trainer runs: take the lock if the grid let it go; kill the trainer if another
    process took it (a second grid must never write beside this trainer)."""
    pid, host, folder = remote
    while not stop.wait(WATCH_S):
        state = lock_state(folder, pid, host)
        if state == "mine":
            return  # the grid is gone: this process holds the lock until the job ends
        if state == "other" and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
            return
