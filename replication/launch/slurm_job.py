"""What runs inside a SLURM job of the ``slurm`` backend: the trainer, placed, vouched for, requeueable.

submitit unpickles ``run_in_job`` (a ``TrainInJob``) in every task of the job and calls it. It
starts the same ``python -m replication train ...`` the local backend starts (torchrun in front
for a multi-process run) with the run's environment, its log appended to the run's log, and the
provenance variables of ``launch.env`` (backend ``slurm``, job ``<array>_<index>``, the job's hosts).

**Multi-node.** A run of N nodes is one job of N tasks, one per node (``--ntasks-per-node 1``);
each task starts ``torchrun --nnodes N --node-rank <its rank> --rdzv-backend static
--rdzv-endpoint <first node>:<port>`` with the run's processes per node. The port is derived from
the job id, so every task computes the same one without talking to the others. Node 0's task
alone vouches for the run folder's lock (below); the others' logs go to ``<key>.node<r>.log``.

**Requeue.** submitit asks SLURM for a warning signal (USR2) ``signal_delay_s`` before the time
limit; its handler calls ``TrainInJob.checkpoint``, which stops the trainer and returns this same
call, and submitit requeues the job. The trainer writes its own checkpoints every
``checkpoint_every`` steps, so a requeued job (``SLURM_RESTART_COUNT`` > 0, whether submitit,
a preemption or ``scontrol requeue`` requeued it) restarts the trainer with ``--resume`` when the
run folder holds a checkpoint it can continue from, else from the start. The trainer starts with
the warning signal blocked: SLURM sends it to every process of the job, and only the handler
here may act on it.

**The run folder's lock.** The grid holds the cache entry's writer lock for the whole run
(``run_cache.ensure_run``) and a local trainer trusts it because the grid is its parent
(``LOCK_ENV = <pid>:<folder>``, checked by ``train.run_folder._held_by_parent`` against
``getppid()``). Under SLURM the grid is on another process tree, maybe another host, so the
backend sends ``<pid>@<host>:<folder>`` instead and this process — the trainer's parent — stands
in for the grid:

- before the trainer starts, it checks the lock file: the lock is held (a non-blocking ``flock``
  fails) and its record names the grid's pid and host. If the lock is free (the grid is gone,
  or detached: ``launcher.options.detach``), it takes the lock itself; if someone else holds it,
  the job fails without training;
- it then tells the trainer ``<own pid>:<folder>`` and ``REPLICATION_PARENT_PID=<own pid>``, the
  local hand-off, so the trainer (and, through ``launch.bound``, torchrun's ranks) accept it and
  die with it;
- while the trainer runs it looks again every few seconds: when the grid's lock is released (the
  grid died or detached) it takes the lock, so no second grid can start a writer on the folder;
  when anyone else holds it, it kills the trainer.

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
import sys
import threading
import time
import zlib
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
WARNING_SIGNAL = signal.SIGUSR2
"""submitit's ``--signal=USR2@<signal_delay_s>``: SLURM's warning before the time limit."""
PORT_BASE, PORT_SPAN = 20000, 20000
"""A multi-node run's rendezvous port is in [PORT_BASE, PORT_BASE + PORT_SPAN)."""


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


def node_rank(env: dict[str, str] | None = None) -> int:
    """This task's node rank in a multi-node run: ``SLURM_PROCID``. The backend starts one task
    per node, so it equals ``SLURM_NODEID``; on a one-node test cluster, where two tasks of one
    node each play a node (tests/launch/test_slurm_job.py), only the task id tells them apart."""
    e = os.environ if env is None else env
    return int(e.get("SLURM_PROCID", "0") or 0)


def rendezvous_port(job_id: str) -> int:
    """The port node 0 serves the rendezvous on, the same for every task of the job (each task
    computes it: they share no state before the rendezvous), and for every attempt of it."""
    return PORT_BASE + zlib.crc32(job_id.encode()) % PORT_SPAN


def node_prefix(nodes: int, rank: int, processes: int, endpoint: str, run_id: str) -> list[str]:
    """What precedes ``train`` on node ``rank`` of a ``nodes``-node run: torchrun with a static
    rendezvous at ``endpoint`` (node 0's host and port), ``processes`` ranks per node; global
    ranks are ``rank × processes + local rank``, as a one-node run of ``nodes × processes``."""
    return [sys.executable, "-m", "replication.launch.bound", "--",
            sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(rank),
            "--nproc-per-node", str(processes), "--rdzv-backend", "static", "--rdzv-endpoint", endpoint,
            "--rdzv-id", run_id, "-m", "replication"]


def restart_count(env: dict[str, str] | None = None) -> int:
    """How many times SLURM has requeued this job (``SLURM_RESTART_COUNT``; 0 on its first run)."""
    e = os.environ if env is None else env
    value = e.get("SLURM_RESTART_COUNT", "0") or "0"
    return int(value) if value.isdigit() else 0


def resumed_command(command: list[str]) -> list[str]:
    """``command`` for a requeued job: ``--resume`` when its run folder holds a checkpoint it can
    continue from (``run_cache._resumable``: it loads and the logs reach its step), else
    ``--overwrite`` (the first attempt was stopped before its first checkpoint)."""
    from replication.orchestration.run_cache import _resumable

    out = Path(command[command.index("--out") + 1])
    base = [a for a in command if a not in ("--resume", "--overwrite")]
    return base + (["--resume"] if _resumable(out) else ["--overwrite"])


class TrainInJob:
    """What submitit runs in every task of a job: the trainer, placed, vouched for, requeueable.

    ``checkpoint`` is submitit's hook for SLURM's warning signal before the time limit (and for a
    preemption that sends it): it stops the trainer — whose checkpoints are already in the run
    folder — and hands submitit this same call to requeue. The requeued job starts the trainer
    again with ``--resume`` (``resumed_command``). A job requeued by SLURM itself (preemption
    with PreemptMode=REQUEUE, ``scontrol requeue``, a node failure) takes the same path: it sees
    ``SLURM_RESTART_COUNT`` > 0.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return {}  # the running trainer stays behind: a requeued job starts its own

    def __setstate__(self, state: dict) -> None:
        self._proc = None

    def __call__(self, command: list[str], run_env: dict[str, str], log: str, processes: int,
                 nodes: int = 1) -> int:
        """Run the trainer in this task; raise when it fails (the job then ends FAILED in sacct)."""
        from replication.launch.local import _from_train

        job_id = job_id_from_env()
        hosts = _hosts()
        rank = node_rank() if nodes > 1 else 0
        env = job_environment(run_env, hosts, job_id)
        env.pop(PARENT_ENV, None)
        if restart_count() > 0:
            command = resumed_command(command)
        remote = parse_remote_lock(env.get(LOCK_ENV, "")) if rank == 0 else None
        state = None
        if remote is not None:
            pid, host, folder = remote
            state = lock_state(folder, pid, host)
            if state == "other":
                raise JobRefused(f"job {job_id}: {folder} is locked by another writer; not training")
            env[LOCK_ENV] = f"{os.getpid()}:{folder}"  # this process is the trainer's parent
        elif rank > 0:
            env.pop(LOCK_ENV, None)  # node 0's rank 0 alone locks and writes the run folder
        env[PARENT_ENV] = str(os.getpid())  # the trainer dies with this process
        if nodes > 1:
            endpoint = f"{hosts[0]}:{rendezvous_port(job_id)}"
            prefix = node_prefix(nodes, rank, processes, endpoint, run_id=job_id.replace("_", "-"))
            log = log if rank == 0 else str(Path(log).with_suffix(f".node{rank}.log"))
        elif processes > 1:
            prefix = torchrun_prefix(processes, PortBook().take(), run_id=job_id.replace("_", "-"))
        else:
            prefix = single_prefix()
        with open(log, "a") as out:
            attempt = f", attempt {restart_count() + 1} ({'--resume' if '--resume' in command else 'from the start'})" \
                if restart_count() else ""
            out.write(f"[slurm job {job_id} on {','.join(hosts)}, node {rank} of {nodes}{attempt}]\n")
            out.flush()
            # SLURM's warning signal reaches every process of the job; only submitit's handler in
            # this process acts on it (checkpoint), so the trainer starts with it blocked
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {WARNING_SIGNAL})
            try:
                self._proc = subprocess.Popen(prefix + _from_train(command), stdout=out,
                                              stderr=subprocess.STDOUT, env=env)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        proc = self._proc
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

    def checkpoint(self, *args, **kwargs):
        """SLURM's warning signal (time limit or preemption): stop the trainer, requeue this call."""
        import submitit

        self._stop_trainer()
        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)

    def _stop_trainer(self, grace_s: float = 10.0) -> None:
        """SIGTERM the trainer (torchrun passes it on), SIGKILL after ``grace_s``. Runs in the
        signal handler, while the main thread's ``wait`` holds the Popen's lock: only os calls
        that do not reap the child."""
        if self._proc is None:
            return
        pid = self._proc.pid

        def ended() -> bool:
            try:
                return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            except ChildProcessError:
                return True

        if ended():
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not ended() and time.monotonic() < deadline:
            time.sleep(0.1)
        if not ended():
            os.kill(pid, signal.SIGKILL)


run_in_job = TrainInJob()
"""The callable the backend maps over a job array (each task unpickles its own copy)."""


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
