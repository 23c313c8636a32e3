"""The ``slurm`` backend: a grid's missing runs as ONE SLURM job array, submitted through submitit.

    launcher:
      backend: slurm
      options: {partition: gpu, account: myproj, time_min: 240, sbatch: ["--constraint=a100"]}

How it works, and why:

- **One array.** The grid tells the backend how many runs it will submit (``expect``) and calls
  ``submit`` once per run from its waiter threads, as for the local backend. The backend gathers
  them and submits them together with ``submitit``'s ``map_array`` (one ``sbatch --array``) once
  every expected run has either arrived or been reported ``settled`` without arriving (found
  finished by another writer, or failed to prepare); ``gather_s`` is a safety net. Runs of
  different shapes go as one array per shape: an array has one set of resources.
- **The same command.** Each job runs ``python -m replication train ...`` exactly as the local
  backend would (``launch.slurm_job``), torchrun in front for a multi-process run, so the key —
  made from the command from ``train`` on and the shape — never depends on placement.
- **Resources** from the run's shape (nodes, GPUs and CPUs per node, memory, time limit) and
  ``launcher.options`` (below). A run of N nodes is one job of N tasks, one per node, each a
  torchrun of the node's processes joined by a static rendezvous on the first node
  (``launch.slurm_job``).
- **Progress.** Every ``poll_s`` seconds one ``sacct`` call reads the state of every job; each
  change is printed as ``slurm: <array>: 1 pending, 1 running, 0 done, 0 failed``. A job that
  ends in any state but COMPLETED raises ``JobFailed`` naming its id, its state, the run's log
  and submitit's log, with the tail of both. The other jobs of the array keep running (the grid
  collects them before it raises): one failed run does not waste the others.
- **Ctrl-C** (the grid's RunGuard → ``cancel_all``): ``scancel`` of every array this grid
  submitted (not of the jobs it adopted from an earlier grid, see below).
- **Requeue.** Every job is ``--requeue``-able and checkpointable: at SLURM's warning signal before
  the time limit (or a preemption) submitit requeues it and the trainer resumes from its last
  checkpoint (``launch.slurm_job``), at most ``max_requeues`` times for time limits.
- **In flight.** ``run_cache.ensure_run`` records every submitted job beside its cache entry
  (``launch.inflight``). With ``detach`` it returns right after the submission; a later grid finds
  the record, and follows a job still queued or running (``adopt``: polled and reported like its
  own, never submitted again) instead of submitting the run again.
- **The run folder's lock** stays with the grid; the job is told the grid's pid AND host and
  vouches for the lock itself (``launch.slurm_job``), since the grid is not the trainer's parent.

``launcher.options`` (every one optional):

=================  ================================================================================
``partition``      ``--partition``
``account``        ``--account``
``qos``            ``--qos``
``time_min``       time limit in minutes when the shape sets none (default 60)
``mem_gb``         memory per node in GB when the shape sets none (default: the cluster's default)
``sbatch``         extra sbatch lines, a list of ``--name=value`` / ``--flag`` (``#SBATCH`` optional)
``setup``          shell lines run in the job script before the run (``module load ...``)
``array_parallelism``  at most this many jobs of the array at once (default ``launcher.max_runs``, else 256)
``job_name``       the array's name in squeue/sacct (default ``replication``)
``folder``         where submitit writes job scripts, pickles and logs (default ``.cache/slurm``);
                   it must be on a file system the compute nodes share, like the run cache
``poll_s``         seconds between two ``sacct`` calls (default 5)
``gather_s``       a safety net: seconds after the last arrival to submit a partial array when an
                   expected run neither arrives nor is reported settled (default 60)
``signal_delay_s`` SLURM's warning signal before the time limit (submitit's ``--signal``;
                   default 120; it must be below the limit minus 30 s and the start-up, docs/slurm.md)
``max_requeues``   how many times a job is requeued at its time limit before it is let fail (default 3)
``detach``         true: submit the grid's missing runs and return without waiting (the grid raises
                   ``GridDetached``; ``python -m replication status`` shows them; re-run to collect)
=================  ================================================================================
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from replication.config import ConfigError
from replication.launch.backend import Backend, Handle, Job, register_backend
from replication.launch.config import LauncherConfig
from replication.launch.local import LaunchStopped
from replication.launch.shape import RunShape
from replication.launch.inflight import InFlight
from replication.launch.slurm_job import LOCK_ENV, PARENT_ENV, remote_lock_value, run_in_job
from replication.launch.slurm_queue import RUNNING, WAITING, parse_sacct  # noqa: F401 (parse_sacct: tests)

OPTIONS = {"partition": str, "account": str, "qos": str, "time_min": int, "mem_gb": (int, float), "sbatch": list,
           "setup": list, "array_parallelism": int, "job_name": str, "folder": str, "poll_s": (int, float),
           "gather_s": (int, float), "signal_delay_s": int, "max_requeues": int, "detach": bool}
"""``launcher.options`` the backend reads, with their types (an unknown key is a ConfigError)."""
TAIL = 3000


class JobFailed(RuntimeError):
    """A job of the array ended in a state other than COMPLETED (the message names it)."""


def parse_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``launcher.options`` checked against ``OPTIONS``; a ConfigError names a bad one."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"launcher.options: unknown key(s) {unknown} for the slurm backend "
                          f"(known: {sorted(OPTIONS)})")
    for k, v in options.items():
        if v is not None and (not isinstance(v, OPTIONS[k]) or (isinstance(v, bool) and OPTIONS[k] is not bool)):
            raise ConfigError(f"launcher.options.{k}={v!r}: expected {OPTIONS[k]}")
    return dict(options)


def sbatch_lines(lines: list[str]) -> dict[str, Any]:
    """``["--constraint=a100", "#SBATCH --exclusive", "--gres gpu:2"]`` → submitit's
    ``additional_parameters`` ({"constraint": "a100", "exclusive": True, "gres": "gpu:2"})."""
    out: dict[str, Any] = {}
    for line in lines:
        text = str(line).strip()
        text = text[len("#SBATCH"):].strip() if text.startswith("#SBATCH") else text
        if not text.startswith("--"):
            raise ConfigError(f"launcher.options.sbatch: {line!r} is not an sbatch option (--name=value)")
        name, sep, value = text[2:].partition("=")
        if not sep and " " in name:
            name, value = name.split(None, 1)
            sep = "="
        out[name.strip().replace("-", "_")] = value.strip() if sep else True
    return out


@register_backend("slurm")
class SlurmBackend(Backend):
    batches = True
    """The grid submits every missing run before any finishes (``expect``), so they form one array."""

    def __init__(self, config: LauncherConfig | None = None) -> None:
        super().__init__(config or LauncherConfig(backend="slurm"))
        self.options = parse_options(self.config.options)
        self.extra = sbatch_lines(self.options.get("sbatch") or [])
        self.folder = Path(self.options.get("folder") or ".cache/slurm").resolve()
        self.poll_s = float(self.options.get("poll_s") or 5)
        self.gather_s = float(self.options.get("gather_s") or 60)
        self.host = socket.gethostname()
        self.detach = bool(self.options.get("detach"))
        """Submit and return without waiting (``run_cache.ensure_run`` reads it; ``run_grid``'s
        ``detach`` sets it)."""
        self._cond = threading.Condition()
        self._pending: list[dict] = []
        self._expected = 0
        self._local = threading.local()
        self._last_arrival = 0.0
        self._submitting = False
        self._stopped = False
        self._arrays: list[str] = []
        self._adopted: set[str] = set()
        self._handles: dict[str, Handle] = {}
        self._states: dict[str, str] = {}
        self._polled = 0.0
        self._shown = ""

    # -- planning ----------------------------------------------------------------------------

    def check(self, shape: RunShape) -> None:
        if self.options.get("time_min") is not None and self.options["time_min"] < 1:
            raise ConfigError("launcher.options.time_min: at least 1 minute")

    def capacity(self, shape: RunShape) -> int:
        return self.config.max_runs or 256

    def expect(self, n: int) -> None:
        """``n`` more runs are coming: gather them into one array."""
        with self._cond:
            self._expected += n

    def settled(self) -> None:
        with self._cond:
            if not getattr(self._local, "submitted", False):
                self._expected = max(0, self._expected - 1)
                self._cond.notify_all()
            self._local.submitted = False

    def parameters(self, shape: RunShape) -> dict[str, Any]:
        """submitit's SlurmExecutor parameters for runs of ``shape`` (the sbatch resources): one
        task per node holding the node's processes, their CPUs and GPUs (``--gpus-per-node``),
        memory per node; requeueable (``--requeue``)."""
        o = self.options
        params: dict[str, Any] = {
            "job_name": o.get("job_name") or "replication",
            "time": int(shape.time_limit_min or o.get("time_min") or 60),
            "nodes": shape.nodes, "ntasks_per_node": 1,
            "cpus_per_task": shape.cpus_per_node,
            "signal_delay_s": int(o.get("signal_delay_s") or 120),
            "array_parallelism": int(o.get("array_parallelism") or self.config.max_runs or 256),
            "stderr_to_stdout": True,
        }
        if shape.gpus_per_node:
            params["gpus_per_node"] = shape.gpus_per_node
        mem = shape.memory_gb or o.get("mem_gb")
        if mem:
            params["mem"] = f"{int(float(mem) * 1024)}MB"
        for name in ("partition", "account", "qos"):
            if o.get(name):
                params[name] = o[name]
        if o.get("setup"):
            params["setup"] = [str(x) for x in o["setup"]]
        params["additional_parameters"] = {"requeue": True, **self.extra}
        return params

    # -- submitting --------------------------------------------------------------------------

    def submit(self, job: Job) -> Handle:
        self.check(job.shape)
        env = dict(job.env)
        env.pop(PARENT_ENV, None)  # the job is not our child: it must not die at our pid's absence
        pid, sep, folder = env.get(LOCK_ENV, "").partition(":")
        if sep and pid == str(os.getpid()):
            env[LOCK_ENV] = remote_lock_value(os.getpid(), self.host, folder)
        slot = {"job": job, "env": env, "handle": None, "error": None}
        self._local.submitted = True
        with self._cond:
            if self._stopped:
                raise LaunchStopped(f"run {job.name} not submitted: the grid was stopped")
            self._pending.append(slot)
            self._last_arrival = time.monotonic()
            self._cond.notify_all()
            while slot["handle"] is None and slot["error"] is None:
                if self._stopped:
                    raise LaunchStopped(f"run {job.name} not submitted: the grid was stopped")
                due = (len(self._pending) >= self._expected
                       or time.monotonic() - self._last_arrival >= self.gather_s)
                if due and not self._submitting and self._pending:
                    batch, self._pending = self._pending, []
                    self._expected = max(0, self._expected - len(batch))
                    self._submitting = True
                    self._cond.release()
                    try:
                        self._submit_batch(batch)
                    finally:
                        self._cond.acquire()
                        self._submitting = False
                        self._cond.notify_all()
                else:
                    self._cond.wait(timeout=0.2)
        if slot["error"] is not None:
            raise slot["error"]
        return slot["handle"]

    def _submit_batch(self, batch: list[dict]) -> None:
        """One array per shape; every slot gets its handle or the submission's error."""
        try:
            import submitit
        except ImportError as e:
            err = ConfigError("launcher.backend=slurm needs submitit: pip install -e '.[slurm]'")
            for slot in batch:
                slot["error"] = err
            raise err from e
        by_shape: dict[RunShape, list[dict]] = {}
        for slot in batch:
            by_shape.setdefault(slot["job"].shape, []).append(slot)
        for shape, slots in by_shape.items():
            try:
                ex = submitit.SlurmExecutor(folder=self.folder, max_num_timeout=int(self.options.get("max_requeues", 3)))
                ex.update_parameters(**self.parameters(shape))
                jobs = ex.map_array(run_in_job, [s["job"].command for s in slots], [s["env"] for s in slots],
                                    [str(s["job"].log) for s in slots], [shape.processes] * len(slots),
                                    [shape.nodes] * len(slots))
            except Exception as e:  # noqa: BLE001 (sbatch refused: every run of the batch hears it)
                for s in slots:
                    s["error"] = RuntimeError(f"sbatch refused {len(slots)} run(s): {e}")
                continue
            array = jobs[0].job_id.split("_")[0]
            print(f"slurm: submitted {len(jobs)} run(s) as {'array' if len(jobs) > 1 else 'job'} {array} "
                  f"(logs: {self.folder}/{array}_*_log.out)", file=sys.stderr, flush=True)
            with self._cond:
                self._arrays.append(array)
                if self._stopped:  # Ctrl-C while sbatch ran: the array must not outlive the grid
                    self._scancel([array])
                for s, j in zip(slots, jobs):
                    handle = Handle(job=s["job"], job_id=j.job_id, command=list(s["job"].command),
                                    state={"job_log": str(j.paths.stdout), "submitted": time.time()})
                    self._handles[j.job_id] = handle
                    self._states[j.job_id] = "SUBMITTED"
                    s["handle"] = handle

    def record(self, handle: Handle, key: str) -> InFlight:
        """The in-flight record of a submitted run (``launch.inflight``)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(handle.state.get("submitted", time.time())))
        return InFlight(key=key, name=handle.job.name, job_id=str(handle.job_id), host=self.host,
                        submitted=stamp, log=str(handle.job.log), job_log=handle.state["job_log"])

    def adopt(self, record: InFlight) -> Handle:
        """Follow a job an earlier grid submitted (its in-flight record) as if this backend had
        submitted it: ``wait`` polls it with the others and reports its failure the same way.
        ``cancel_all`` leaves it alone: Ctrl-C of a grid that collects never cancels them."""
        job = Job(name=record.name, command=[], env={}, shape=RunShape(), log=Path(record.log))
        handle = Handle(job=job, job_id=record.job_id, state={"job_log": record.job_log, "adopted": True})
        with self._cond:
            if record.array not in self._arrays:
                self._arrays.append(record.array)
                self._adopted.add(record.array)
            self._handles[record.job_id] = handle
            self._states.setdefault(record.job_id, "SUBMITTED")
        return handle

    # -- waiting -----------------------------------------------------------------------------

    def poll(self, force: bool = False) -> dict[str, str]:
        """{job id: state} of every job submitted, from one sacct call at most every ``poll_s``;
        prints the counts when they change."""
        with self._cond:
            if not force and time.monotonic() - self._polled < self.poll_s:
                return dict(self._states)
            self._polled = time.monotonic()
            arrays = list(self._arrays)
        if arrays:
            try:
                out = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", ",".join(arrays)],
                                     capture_output=True, text=True, timeout=60, check=True).stdout
                seen = parse_sacct(out)
            except (subprocess.SubprocessError, OSError) as e:
                print(f"slurm: sacct failed ({e}); states may be stale", file=sys.stderr, flush=True)
                seen = {}
            with self._cond:
                for jid in self._states:
                    # an array cancelled before any task started is one record, its bare id
                    state = seen.get(jid) or seen.get(jid.split("_")[0])
                    if state:
                        self._states[jid] = state
        with self._cond:
            states = dict(self._states)
            line = self._summary(states)
            if line != self._shown:
                self._shown = line
                print(f"slurm: {line}", file=sys.stderr, flush=True)
        return states

    @staticmethod
    def _summary(states: dict[str, str]) -> str:
        n = {"pending": 0, "running": 0, "done": 0, "failed": 0}
        for s in states.values():
            key = ("pending" if s in WAITING else "running" if s in RUNNING else
                   "done" if s == "COMPLETED" else "failed")
            n[key] += 1
        arrays = ",".join(sorted({j.split("_")[0] for j in states}))
        return f"{arrays}: " + ", ".join(f"{v} {k}" for k, v in n.items())

    def wait(self, handle: Handle) -> int:
        """Block until the job ends: 0 when COMPLETED, else ``JobFailed`` with its id, state,
        logs and the tail of each."""
        jid = handle.job_id
        while True:
            if self._stopped:
                raise LaunchStopped(f"run {handle.job.name} (job {jid}) cancelled: the grid was stopped")
            state = self.poll().get(jid, "UNKNOWN")
            if state not in WAITING and state not in RUNNING and state != "UNKNOWN":
                break
            time.sleep(min(1.0, self.poll_s))
        if state == "COMPLETED":
            return 0
        raise JobFailed(self.failure(handle, state))

    def failure(self, handle: Handle, state: str) -> str:
        """The message of a failed job: id, state, both logs and their tails."""
        job_log = Path(handle.state["job_log"])
        parts = [f"slurm job {handle.job_id} ({handle.job.name}) ended {state}",
                 f"  run log: {handle.job.log}", f"  job log: {job_log}"]
        for what, path in (("run log", Path(handle.job.log)), ("job log", job_log)):
            try:
                tail = path.read_text(errors="replace")[-TAIL:]
            except OSError:
                tail = "(not there)"
            parts.append(f"--- tail of the {what} ---\n{tail.rstrip()}")
        return "\n".join(parts)

    # -- cancelling --------------------------------------------------------------------------

    def cancel(self, handle: Handle) -> None:
        if handle.job_id and not handle.state.get("adopted"):
            self._scancel([handle.job_id])

    def cancel_all(self) -> None:
        with self._cond:
            self._stopped = True
            arrays = [a for a in self._arrays if a not in self._adopted]
            self._cond.notify_all()
        if arrays:
            self._scancel(arrays)
            print(f"slurm: cancelled {', '.join(arrays)}", file=sys.stderr, flush=True)

    @staticmethod
    def _scancel(ids: list[str]) -> None:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=60)
