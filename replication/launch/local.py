"""The ``local`` backend: a grid's runs as processes on this machine, each on resources of its own.

- CPU runs take ``processes × threads`` cores from ``CpuSlots`` (``launcher.cpus`` or this
  process's cores), so the runs going at once never oversubscribe the machine: on the 2-core
  reference machine, two 1-process 1-thread runs at a time, as the grid always ran them.
- GPU runs take a disjoint slice of ``processes × gpus_per_process`` GPUs from ``GpuSlices``
  (``launcher.gpus``, else the visible ones) and see only it (``CUDA_VISIBLE_DEVICES``); a CPU
  run on a GPU machine sees none, so ``device: auto`` cannot wander onto another run's GPU.
- A run of more than one process is torchrun on its own rendezvous port
  (``launch.torchrun``); a one-process run is started exactly as before, ``python -m
  replication train ...``.

A run waits in ``submit`` until its resources are free and gives them back in ``wait`` or
``cancel`` however it ended (exit 0, a failure, a kill). ``cancel_all`` stops the waiting and
terminates the running (Ctrl-C of a grid). Placement reaches the run only through its
environment (``launch.env``): the command from ``train`` on is the one the key was made from.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time

from replication.config import ConfigError
from replication.launch.backend import Backend, Handle, Job, register_backend
from replication.launch.config import LauncherConfig
from replication.launch.env import DEVICES, launch_env
from replication.launch.shape import RunShape
from replication.launch.slots import Closed, CpuSlots, GpuSlices, available_cores, visible_gpus
from replication.launch.torchrun import PortBook, single_prefix, torchrun_prefix


class LaunchStopped(KeyboardInterrupt):
    """A run was not started because the grid is stopping (a KeyboardInterrupt, as RunGuard's)."""


@register_backend("local")
class LocalBackend(Backend):
    GRACE_S = 10.0

    def __init__(self, config: LauncherConfig | None = None) -> None:
        super().__init__(config or LauncherConfig())
        gpus = self.config.gpus if self.config.gpus is not None else visible_gpus()
        self.cpus = CpuSlots(self.config.cpus or available_cores())
        self.gpus = GpuSlices(gpus)
        self.ports = PortBook()
        self.host = socket.gethostname()
        self._running: dict[int, Handle] = {}
        self._lock = threading.Lock()
        self._stopped = False

    # -- planning ----------------------------------------------------------------------------

    def check(self, shape: RunShape) -> None:
        if shape.nodes != 1:
            raise ConfigError(f"launcher.backend=local runs one-node shapes; this run asks for "
                              f"{shape.nodes} nodes (a cluster backend places it)")
        need = shape.gpus_per_node
        if need > len(self.gpus.gpus):
            have = ",".join(self.gpus.gpus) or "none"
            raise ConfigError(f"a run needs {need} GPU(s) ({shape.processes} process(es) x "
                              f"{shape.gpus_per_process}); this machine gives {len(self.gpus.gpus)} "
                              f"(visible: {have}; set launcher.gpus or CUDA_VISIBLE_DEVICES)")

    def capacity(self, shape: RunShape) -> int:
        if shape.gpus_per_node:
            n = self.gpus.capacity(shape.gpus_per_node)
        else:
            n = self.cpus.capacity(shape.processes, shape.cpus_per_process)
        return max(1, min(n, self.config.max_runs or n))

    def prefix(self, shape: RunShape, port: int | None, run_id: str) -> list[str]:
        """What precedes ``train`` in the launched command."""
        if shape.processes == 1:
            return single_prefix()
        return torchrun_prefix(shape.processes, port, run_id)

    def take(self, shape: RunShape, wait: bool = True) -> dict | None:
        """What a run of ``shape`` holds while it runs: ``{"devices", "cores", "port"}`` (a GPU
        slice or CPU cores, and a rendezvous port for several processes). ``wait``: until they
        are free (``Closed`` when the grid stops); otherwise None when they are not free now
        (a plan's placement, ``launch.placement``). Given back with ``give``."""
        devices: tuple[str, ...] | None = ()
        cores: int | None = 0
        if shape.gpus_per_node:
            size = shape.gpus_per_node
            devices = self.gpus.take(size) if wait else self.gpus.try_take(size)
        else:
            need = self.cpus.need(shape.processes, shape.cpus_per_process)
            cores = self.cpus.take(need) if wait else self.cpus.try_take(need)
        if devices is None or cores is None:
            return None
        held = {"devices": devices, "cores": cores, "port": None}
        try:
            held["port"] = self.ports.take() if shape.processes > 1 else None
        except BaseException:
            self.give(held)
            raise
        return held

    def placed(self, job: Job, held: dict) -> tuple[list[str], dict[str, str]]:
        """The command and environment ``job`` starts with on the resources ``held`` (``take``):
        the prefix (torchrun on the held port for several processes) before its ``train`` part,
        and the placement added to its environment. Pure: nothing starts."""
        port = held["port"]
        command = self.prefix(job.shape, port, run_id=f"run{port}") + _from_train(job.command)
        env = {**job.env, **launch_env(self.name, [self.host])}
        if held["devices"] or self.gpus.gpus:  # a CPU run on a GPU machine sees no GPU
            env[DEVICES] = ",".join(held["devices"])
        return command, env

    # -- running -----------------------------------------------------------------------------

    def submit(self, job: Job) -> Handle:
        shape = job.shape
        self.check(shape)
        if self._stopped:
            raise LaunchStopped(f"run {job.name} not started: the grid was stopped")
        try:
            held = self.take(shape)
        except Closed as e:
            raise LaunchStopped(f"run {job.name} not started: {e}") from None
        devices = held["devices"]
        try:
            command, env = self.placed(job, held)
            with self._lock:
                if self._stopped:
                    raise LaunchStopped(f"run {job.name} not started: the grid was stopped")
                proc = start_process(command, job.log, env)
                handle = Handle(job=job, job_id=None, devices=devices, command=command,
                                state={"proc": proc, **held})
                self._running[proc.pid] = handle
        except BaseException:
            self.give(held)
            raise
        return handle

    def wait(self, handle: Handle) -> int:
        proc = handle.state["proc"]
        try:
            return proc.wait()
        finally:
            if proc.poll() is not None:
                self._release(handle)

    def cancel(self, handle: Handle) -> None:
        self._stop([handle])

    def cancel_all(self) -> None:
        with self._lock:
            self._stopped = True
            running = list(self._running.values())
        self.cpus.close()
        self.gpus.close()
        self._stop(running)

    def _stop(self, handles: list[Handle]) -> None:
        """SIGTERM every run (torchrun passes it on to its ranks), SIGKILL those alive after
        one grace period shared by all, then give their resources back."""
        procs = [h.state["proc"] for h in handles]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + self.GRACE_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for handle in handles:
            self._release(handle)

    @property
    def stopped(self) -> bool:
        return self._stopped

    def running(self) -> list[Handle]:
        with self._lock:
            return list(self._running.values())

    def _release(self, handle: Handle) -> None:
        with self._lock:
            if self._running.pop(handle.state["proc"].pid, None) is None:
                return  # given back already
        self.give(handle.state)

    def give(self, held: dict) -> None:
        """Give back what ``take`` handed out (the slice or cores, and the port)."""
        if held.get("devices"):
            self.gpus.give(held["devices"])
        if held.get("cores"):
            self.cpus.give(held["cores"])
        if held.get("port") is not None:
            self.ports.give(held["port"])


def start_process(command: list[str], log, env: dict[str, str]) -> subprocess.Popen:
    """Start one run, its output appended to ``log`` (tests put a fake trainer here)."""
    with open(log, "a") as f:
        return subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT, env=env)


def _from_train(command: list[str]) -> list[str]:
    """``command`` from its ``train`` sub-command on (what follows any launcher prefix)."""
    if "train" not in command:
        raise ValueError(f"not a training command: {command}")
    return command[command.index("train"):]
