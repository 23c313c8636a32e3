"""Wall-clock seconds per phase of a training step, so the step reads as the step.

    timer = PhaseTimer()
    with timer("generate"):
        batch = engine.generate(...)
    timer["generate"]          # seconds spent in that block (summed over every entry)

A phase entered twice (the allocator's plan and its observe) adds up. ``process_seconds`` is
the process's CPU time since the timer started: the step's cost on an idle machine, waits aside.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Iterator


class PhaseTimer:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._cpu_started = time.process_time()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - t

    def __getitem__(self, phase: str) -> float:
        return self.seconds.get(phase, 0.0)

    def elapsed(self) -> float:
        """Seconds since the timer started (the whole step)."""
        return time.perf_counter() - self.started

    def process_seconds(self) -> float:
        return time.process_time() - self._cpu_started
