"""What a rank of a multi-process run does when another rank or its launcher is gone.

- **Collective timeout.** A rank that stopped (killed, hung, stopped by a debugger) leaves the
  others blocked in their next collective. torch's default limit is 30 minutes; here it is
  ``REPLICATION_COLLECTIVE_TIMEOUT_S`` seconds (default 300 on CPU/gloo, 1800 on GPU/nccl — at
  paper scale rank 0 writes multi-GB checkpoints while the others wait). A rank whose
  collective fails prints ONE line naming itself and exits with ``EXIT_CODE``
  (``stop_on_collective_failure``).
- **Ranks die with their launcher.** A rank started by torchrun (or ``accelerate launch``,
  which runs torchrun in-process) exits when its launcher dies, ``kill -9`` included:
  PR_SET_PDEATHSIG plus a watchdog thread (``replication.interrupts.die_with_parent``, as the
  verifier workers do), so no orphaned rank keeps training into the run folder.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from collections.abc import Iterator, Mapping

TIMEOUT_ENV = "REPLICATION_COLLECTIVE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = {"gloo": 300.0, "nccl": 1800.0}
EXIT_CODE = 4
"""A rank stopped because a collective failed (another rank stopped, hung or died)."""


def collective_timeout(backend: str, env: Mapping[str, str] | None = None) -> datetime.timedelta:
    """The process group's timeout: ``REPLICATION_COLLECTIVE_TIMEOUT_S`` or the backend's default."""
    e = os.environ if env is None else env
    raw = e.get(TIMEOUT_ENV, "")
    if raw.strip():
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not seconds > 0:
            from replication.config import ConfigError

            raise ConfigError(f"{TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    else:
        seconds = DEFAULT_TIMEOUT_S.get(backend, DEFAULT_TIMEOUT_S["gloo"])
    return datetime.timedelta(seconds=seconds)


def launched_by_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """torchrun's elastic agent sets TORCHELASTIC_RUN_ID in every worker's environment."""
    e = os.environ if env is None else env
    return bool(e.get("TORCHELASTIC_RUN_ID"))


def die_with_launcher(env: Mapping[str, str] | None = None) -> bool:
    """Under torchrun, exit when the launcher (our parent) dies; returns whether it is armed."""
    if not launched_by_torchrun(env):
        return False
    from replication.interrupts import die_with_parent

    die_with_parent(os.getppid())
    return True


def is_collective_failure(err: BaseException) -> bool:
    """A collective that timed out or lost its peer (gloo and nccl word these differently)."""
    import torch.distributed as dist

    if isinstance(err, dist.DistError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and any(
        s in text for s in ("timed out", "timeout", "connection closed by peer", "connection reset",
                            "broken pipe", "nccl"))


@contextlib.contextmanager
def stop_on_collective_failure(rank: int, size: int, distributed: bool) -> Iterator[None]:
    """Turn a failed collective into one line naming this rank, then exit ``EXIT_CODE`` at once
    (``os._exit``: tearing the process group down would wait on the lost rank again)."""
    if not distributed:
        yield
        return
    try:
        yield
    except Exception as err:  # noqa: BLE001 - only collective failures are caught, see below
        if not is_collective_failure(err):
            raise
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        print(f"error: rank {rank} of {size}: a collective failed — another rank stopped, hung or "
              f"died ({TIMEOUT_ENV} sets the wait); {first}", file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)
