"""The local machine's resources as pools a run takes from and gives back.

- ``CpuSlots``: ``cores`` units; a run takes ``processes × threads`` of them, so the runs going
  at once never ask for more threads than there are cores (two 1-thread runs on 2 cores, one
  2-thread run). A run asking for more than the machine has takes the whole machine: it runs
  alone rather than never.
- ``GpuSlices``: the GPU ids; a run takes a disjoint slice of its size (processes × GPUs per
  process), an aligned block of neighbours when one is free (GPUs 0-1, 2-3: on most boards the
  pairs that share a switch), else the lowest free ids.

Both wait (a condition variable) until enough is free, and ``close()`` wakes every waiter with
``Closed`` (a stopped grid starts nothing more). Giving back is idempotent: a run's resources
are returned once however it ended.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence


class Closed(Exception):
    """The pool was closed while waiting (the grid was stopped)."""


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def visible_gpus(env: dict[str, str] | None = None) -> tuple[str, ...]:
    """The GPU ids runs may be given: ``CUDA_VISIBLE_DEVICES`` when set (empty: none), else one
    per line of ``nvidia-smi -L``, else none."""
    e = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in e:
        return tuple(d.strip() for d in e["CUDA_VISIBLE_DEVICES"].split(",") if d.strip())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU ")))


class CpuSlots:
    def __init__(self, cores: int) -> None:
        self.cores = max(1, int(cores))
        self.free = self.cores
        self._cond = threading.Condition()
        self._closed = False

    def need(self, processes: int, threads: int) -> int:
        """Cores a run of ``processes`` × ``threads`` takes (at most the machine)."""
        return min(self.cores, max(1, processes * threads))

    def capacity(self, processes: int, threads: int) -> int:
        return max(1, self.cores // self.need(processes, threads))

    def try_take(self, n: int) -> int | None:
        """``n`` cores if they are free now, else None (never waits: a plan's placement)."""
        with self._cond:
            if self._closed or self.free < n:
                return None
            self.free -= n
            return n

    def take(self, n: int) -> int:
        with self._cond:
            while not self._closed and self.free < n:
                self._cond.wait()
            if self._closed:
                raise Closed("no new run starts: the grid was stopped")
            self.free -= n
            return n

    def give(self, n: int) -> None:
        with self._cond:
            self.free = min(self.cores, self.free + n)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class GpuSlices:
    def __init__(self, gpus: Sequence[str]) -> None:
        self.gpus = tuple(gpus)
        self.busy: set[str] = set()
        self._cond = threading.Condition()
        self._closed = False

    def capacity(self, size: int) -> int:
        return len(self.gpus) // size if size else 0

    def _pick(self, size: int) -> tuple[str, ...] | None:
        free = [g for g in self.gpus if g not in self.busy]
        if len(free) < size:
            return None
        for start in range(0, len(self.gpus) - size + 1, size):  # an aligned block first
            block = self.gpus[start:start + size]
            if not self.busy.intersection(block):
                return block
        return tuple(free[:size])

    def try_take(self, size: int) -> tuple[str, ...] | None:
        """The slice ``take`` would hand out if one is free now, else None (never waits: a
        plan's placement, ``launch.placement``)."""
        if not 1 <= size <= len(self.gpus):
            raise ValueError(f"a slice of {size} GPUs out of {len(self.gpus)}")
        with self._cond:
            picked = None if self._closed else self._pick(size)
            if picked is not None:
                self.busy.update(picked)
            return picked

    def take(self, size: int) -> tuple[str, ...]:
        """A slice of ``size`` GPUs no other run holds, waiting until one is free."""
        if not 1 <= size <= len(self.gpus):
            raise ValueError(f"a slice of {size} GPUs out of {len(self.gpus)}")
        with self._cond:
            while not self._closed and (picked := self._pick(size)) is None:
                self._cond.wait()
            if self._closed:
                raise Closed("no new run starts: the grid was stopped")
            self.busy.update(picked)
            return picked

    def give(self, gpus: Sequence[str]) -> None:
        with self._cond:
            self.busy.difference_update(gpus)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
